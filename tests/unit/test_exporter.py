"""The exporter's metrics from a monitor fed the simulated CT200 (in process)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.config import HostConfig
from gpumon.backends.exporter.metrics import (
    METRIC_NAMES,
    GpumonCollector,
    OomCounter,
    registry_for,
)
from gpumon.backends.model import Health, HostSample, pci_key
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.parsers import QUERY_FIELDS, parse_query_gpu
from gpumon.backends.remote.agent import NAME_MAX_CHARS
from gpumon.backends.sim.scenario import MIG_GPU

from sim_samples import sim_mig_sample, sim_printers, sim_sample


def scrape(collector: GpumonCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(registry_for(collector)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_gpu_metrics_in_base_units_and_the_oom_counter() -> None:
    settings = demo_settings(demo_time=30, frozen=True)
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    sample = sim_sample(sim_printers(settings), settings, 30.0)
    monitor.ingest_sample(sample)
    ooms = OomCounter()
    ooms.attach(monitor)
    monitor.alerts.raise_alert("cuda_oom", Health.CRITICAL, "CUDA OOM", gpu=6, job="drafter")
    monitor.alerts.raise_alert("cuda_oom", Health.CRITICAL, "CUDA OOM", gpu=6, job="drafter")
    metrics = scrape(GpumonCollector(lambda: [monitor], ooms))
    gpu6 = sample.gpus[6]
    assert gpu6.memory_used_mib is not None
    used = {lab["gpu"]: v for lab, v in metrics["gpumon_gpu_memory_used_bytes"]}
    assert used["6"] == gpu6.memory_used_mib * 1024 * 1024 and len(used) == 8
    [(labels, _)] = [x for x in metrics["gpumon_gpu_memory_total_bytes"] if x[0]["gpu"] == "6"]
    assert labels == {"host": "ct200", "gpu": "6", "uuid": gpu6.uuid, "name": gpu6.name}
    util = {lab["gpu"]: v for lab, v in metrics["gpumon_gpu_utilization_ratio"]}
    assert all(0.0 <= v <= 1.0 for v in util.values())
    [(oom_labels, count)] = metrics["gpumon_oom_events_total"]
    assert count == 2 and oom_labels == {
        "host": "ct200",
        "gpu": "6",
        "job_name": "drafter",
        "kind": "cuda_oom",
    }
    active = {(lab["severity"], lab["kind"]): v for lab, v in metrics["gpumon_alerts_active"]}
    assert active[("critical", "cuda_oom")] == 2 and active[("warning", "xid")] == 0
    assert {n.removesuffix("_total") for n in metrics} <= {
        n.removesuffix("_total") for n in METRIC_NAMES
    } | {"gpumon_oom_events_created", "gpumon_xid_events_created"}


def test_xid_events_carry_the_tables_level_and_action() -> None:
    settings = demo_settings(demo_time=30, frozen=True)
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    sample = sim_sample(sim_printers(settings), settings, 30.0)
    monitor.ingest_sample(sample)
    bus = f"PCI:{pci_key(sample.gpus[6].bus_id)}"  # 00000000:BA:00.0 -> PCI:0000:ba:00
    lines = [
        f"[1.0] NVRM: Xid ({bus}): 79, pid=9962, name=python, GPU has fallen off the bus.",
        f"[1.0] NVRM: Xid ({bus}): 79, pid=9962, name=python, GPU has fallen off the bus.",
        f"[2.0] NVRM: Xid ({bus}): 13, pid=9962, name=python, Graphics Exception: ESR 0x1",
        # the action is the one its line names (its alert's fact), not the table's "see"
        f"[3.0] NVRM: Xid ({bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
        "(GPU Reset Required)",
    ]
    monitor.alerts.on_kernel_lines(lines, backlog=True)  # before gpumon: not counted
    monitor.alerts.on_kernel_lines([line.replace("[", "[9") for line in lines])
    metrics = scrape(GpumonCollector(lambda: [monitor]))
    got = {
        (lab["gpu"], lab["xid"], lab["severity"], lab["action"]): v
        for lab, v in metrics["gpumon_xid_events_total"]
    }
    assert got == {
        ("6", "79", "critical", "reboot the node"): 1.0,  # the repeated line: one event
        ("6", "13", "warning", "restart the application"): 1.0,
        ("6", "154", "critical", "reset the GPU"): 1.0,
    }


def test_a_gpu_name_of_10_kb_is_cut_in_every_label_as_the_gpu_row_cuts_it() -> None:
    """Issue 34 point 11: a name the target reports goes into a label of five series per
    GPU, stored by Prometheus with every sample: cut to NAME_MAX_CHARS and "...", like
    the GPU row (the agent's cut of a name over its line bound)."""
    name = "NVIDIA " + "X" * 10_233  # 10 KiB: under the agent's line bound, so it came whole
    values = {"index": "0", "uuid": "GPU-" + "u" * 10_000, "name": name, "memory.total": "97887"}
    values |= {"memory.used": "1024", "power.draw": "80.5", "temperature.gpu": "41"}
    values |= {"utilization.gpu": "7"}
    row = ", ".join(values.get(f, "[N/A]") for f in QUERY_FIELDS)
    (gpu,) = parse_query_gpu([row]).gpus
    assert gpu.name == name  # the model keeps what the target said
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    monitor.ingest_sample(HostSample("ct200", 1000.0, None, (gpu,)))
    metrics = scrape(GpumonCollector(lambda: [monitor]))
    series = [labels for samples in metrics.values() for labels, _ in samples if "name" in labels]
    assert len(series) == 5  # memory used and total, utilisation, temperature, power
    for labels in series:
        assert labels["name"] == name[:NAME_MAX_CHARS] + "..."
        assert labels["uuid"] == values["uuid"][:NAME_MAX_CHARS] + "..."
        assert all(len(v) <= NAME_MAX_CHARS + 3 for v in labels.values())


def test_a_value_not_reported_is_left_out_not_zero() -> None:
    from dataclasses import replace

    settings = demo_settings(demo_time=30, frozen=True)
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    sample = sim_sample(sim_printers(settings), settings, 30.0)
    gpus = tuple(replace(g, power_w=None) if g.index == 3 else g for g in sample.gpus)
    monitor.ingest_sample(replace(sample, gpus=gpus))
    metrics = scrape(GpumonCollector(lambda: [monitor]))
    assert {lab["gpu"] for lab, _ in metrics["gpumon_gpu_power_watts"]} == set("0124567")
    assert metrics["gpumon_agent_up"] == [({"host": "ct200"}, 1.0)]


def test_a_hung_server_and_a_rejected_drafter_are_exported() -> None:
    """Issue 25.1/25.5: ``gpumon_alerts_active`` by kind, and the accept length."""
    from gpumon.backends.parsers.sglang import SglangScrape
    from gpumon.backends.workloads import SglangTracker

    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    tracker = monitor.workloads.sglang.setdefault(30000, SglangTracker(30000))
    tracker.observe(SglangScrape(running=37.0, decode_tokens=5.0, spec_accept_length=1.04), 0.0)
    monitor.alerts.on_server_condition(
        "sglang_hung", Health.CRITICAL, 30000, "sglang :30000 hung: 37 running", 70.0
    )
    metrics = scrape(GpumonCollector(lambda: [monitor], OomCounter()))
    active = {(lab["severity"], lab["kind"]): v for lab, v in metrics["gpumon_alerts_active"]}
    assert active[("critical", "sglang_hung")] == 1
    assert active[("warning", "spec_accept_low")] == 0
    [(labels, value)] = metrics["gpumon_sglang_spec_accept_length"]
    assert (labels["port"], value) == ("30000", 1.04)


def test_a_server_whose_page_is_over_8_mib_is_an_exported_sglang_error() -> None:
    """Issue 28.6: two scrapes refused for size, through the monitor as the agent says
    them, are ``gpumon_alerts_active{kind="sglang_error"}`` 1 and ``gpumon_sglang_up`` 0."""
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    for _ in range(2):
        monitor.ingest_http("sglang:24061", None, "", "page larger than 8 MiB: not read")
    metrics = scrape(GpumonCollector(lambda: [monitor], OomCounter()))
    active = {(lab["severity"], lab["kind"]): v for lab, v in metrics["gpumon_alerts_active"]}
    assert active[("warning", "sglang_error")] == 1
    assert [v for lab, v in metrics["gpumon_sglang_up"] if lab["port"] == "24061"] == [0.0]


def test_vllm_servers_are_exported_beside_sglang_and_what_a_release_lacks_is_left_out() -> None:
    """Issue 38 point 5: per vLLM server the pane's numbers (same labels as SGLang's),
    from pages made by vLLM's own declarations; 0.6.6.post1 (V0) has no prefix-cache
    counters and no drafter: those series are absent, never 0."""
    from vllm_trackers import busy

    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    monitor.workloads.vllm[8000] = busy(8000, 1000.0)
    monitor.workloads.vllm[8001] = busy(8001, 1000.0, version="0.6.6.post1")
    metrics = scrape(GpumonCollector(lambda: [monitor], OomCounter()))

    def by_port(name: str) -> dict[str, float]:
        return {lab["port"]: v for lab, v in metrics.get(name, [])}

    assert by_port("gpumon_vllm_up") == {"8000": 1.0, "8001": 1.0}
    new = monitor.workloads.vllm[8000]
    assert by_port("gpumon_vllm_running_requests")["8000"] == new.running
    assert by_port("gpumon_vllm_waiting_requests")["8000"] == new.queued
    assert by_port("gpumon_vllm_kv_usage_ratio")["8000"] == new.token_usage
    # 0.34.0's page has two engines (data parallel), each 1,000 tokens further every 5 s
    assert by_port("gpumon_vllm_generation_tokens_per_second") == {"8000": 400.0, "8001": 200.0}
    assert by_port("gpumon_vllm_prompt_tokens_per_second") == {"8000": 400.0, "8001": 200.0}
    assert by_port("gpumon_vllm_preemptions_per_second") == {"8000": 0.0, "8001": 0.0}
    # no drafter on these pages, no prefix-cache traffic in the window: n/a, not 0
    for name in (
        "gpumon_vllm_spec_accept_length",
        "gpumon_vllm_spec_accept_ratio",
        "gpumon_vllm_prefix_cache_hit_ratio",
    ):
        assert name not in metrics
    old = monitor.workloads.vllm[8001]
    old.spec_accept_length, old.spec_accept_rate = 1.4, 0.2  # a drafter's window
    metrics = scrape(GpumonCollector(lambda: [monitor], OomCounter()))
    assert by_port("gpumon_vllm_spec_accept_length") == {"8001": 1.4}
    assert by_port("gpumon_vllm_spec_accept_ratio") == {"8001": 0.2}
    assert {lab["host"] for lab, _ in metrics["gpumon_vllm_up"]} == {"ct200"}
    assert "gpumon_sglang_up" not in metrics  # no SGLang server here: no series


def test_a_mig_gpu_is_exported_by_its_instances() -> None:
    """Issue 39 point 3: a MIG GPU's ``gpumon_gpu_memory_used_bytes`` is the sum of its
    instances, which none of them fills; each GPU instance has its own memory gauges,
    labelled with its GI id and profile, and the GPU says how many it has."""
    settings = demo_settings("mig", demo_time=40, frozen=True)
    sample = sim_mig_sample(settings, 40.0)
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    monitor.ingest_sample(sample)
    metrics = scrape(GpumonCollector(lambda: [monitor]))
    uuid = sample.gpus[MIG_GPU].uuid
    mib: dict[str, dict[tuple[int, str | None], int | None]] = {
        "gpumon_mig_memory_used_bytes": {
            (i.gpu_instance_id, i.profile): i.memory_used_mib for i in sample.mig
        },
        "gpumon_mig_memory_total_bytes": {
            (i.gpu_instance_id, i.profile): i.memory_total_mib for i in sample.mig
        },
    }
    for name, want in mib.items():
        assert len(want) == 3 and None not in want.values(), want
        got = {(int(lab["gi"]), lab["profile"]): v / (1024 * 1024) for lab, v in metrics[name]}
        assert got == want, name
        assert {(lab["host"], lab["gpu"], lab["uuid"]) for lab, _ in metrics[name]} == {
            ("ct200", str(MIG_GPU), uuid)
        }
    counts = {lab["gpu"]: v for lab, v in metrics["gpumon_gpu_mig_instances"]}
    assert counts == {str(MIG_GPU): 3.0}  # the GPUs off MIG have none, not 0


def test_a_mig_gpu_whose_instances_cannot_be_read_exports_none_of_them() -> None:
    """In MIG mode, no instance read (``MIG: per-instance data not available``): 0
    instances, and no instance series made up from the whole GPU's numbers."""
    settings = demo_settings("mig", demo_time=40, frozen=True)
    sample = replace(sim_mig_sample(settings, 40.0), mig=())
    monitor = make_monitor(HostConfig(name="ct200", kind="local"), record=False)
    monitor.ingest_sample(sample)
    metrics = scrape(GpumonCollector(lambda: [monitor]))
    assert [(lab["gpu"], v) for lab, v in metrics["gpumon_gpu_mig_instances"]] == [
        (str(MIG_GPU), 0.0)
    ]
    assert "gpumon_mig_memory_used_bytes" not in metrics
