"""A GPU in MIG mode is its instances (issue 39 point 3): each GPU instance with its
profile, its own memory and its processes, read through NVML's MIG device handles
(nvidia-ml-py 13.580.82's pynvml.py: the stand-in's ``MIG_CALLS``) or nvidia-smi's ``-L``
and ``-q`` (driver 590.48.01, the real H100 and H200 MIG captures in
``fixtures/nvidia/real-captures``), shown in the snapshot's text and JSON under its GPU,
never the whole GPU's memory as one; "MIG: per-instance data not available from this
driver" where no instance could be read."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import (
    MIG_NOT_AVAILABLE,
    CheckCode,
    GpuProcess,
    GpuSample,
    HostSample,
)
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.report import check_verdict, snapshot_json, snapshot_table
from gpumon.backends.monitor.sources.agent import AgentSource
from gpumon.backends.parsers.mig import parse_mig_records
from gpumon.backends.parsers.nvidia_smi import SAMPLE_FIELDS, parse_query_gpu
from gpumon.backends.recording.recorder import sample_from_json, sample_to_json
from gpumon.backends.remote import agent, mig
from gpumon.backends.sim import scenario, smi
from gpumon.backends.transport import LocalTransport

from waiting import FakeClock

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures/nvidia/real-captures"
H100 = CAPTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200 = CAPTURES / "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
PARENT = "GPU-00000000-0000-0000-0000-000000000000"  # the captures' masked UUID


def capture_section(path: Path, title: str) -> str:
    """The output under a capture's ``# <title>`` banner (up to the next banner)."""
    text = path.read_text(encoding="utf-8")
    banner = re.compile(r"^#{80}\n# " + re.escape(title) + r"\n(?:#.*\n)*?#{80}\n", re.M)
    found = banner.search(text)
    assert found, title
    rest = text[found.end() :]
    end = rest.find("\n" + "#" * 80 + "\n")
    return rest if end < 0 else rest[:end]


def test_h100_capture_gives_each_gpu_instance_its_own_memory_and_processes() -> None:
    listed = capture_section(H100, "capabilities :: list (-L)")
    query = capture_section(H100, "load :: query (-q)")
    gpus, instances = mig.smi_instances(listed, query)
    assert gpus == [PARENT]
    got = [
        (i["gi"], i["profile"], i["used_mib"], i["total_mib"], i["sm"], i["pids"])
        for i in instances
    ]
    assert got == [
        (2, "3g.40gb", 11091, 40448, 60, [21180, 21181, 21198]),
        (3, "2g.20gb", 17, 20096, 32, []),
        (9, "1g.10gb", 9, 9984, 16, []),
        (10, "1g.10gb", 9, 9984, 16, []),
    ]
    assert instances[1]["devices"] == [
        {
            "index": 1,
            "ci": 0,
            "uuid": "MIG-00000001-0000-0000-0000-000000000001",
            "profile": "2g.20gb",
        }
    ]
    # the whole GPU's used memory (11125 MiB of 81559) is no instance's
    assert all(i["total_mib"] < 81559 for i in instances)


def test_h200_two_compute_instances_share_their_gpu_instances_memory_once() -> None:
    listed = capture_section(H200, "capabilities :: list (-L)")
    query = capture_section(H200, "load :: query (-q)")
    _, instances = mig.smi_instances(listed, query)
    first = instances[0]
    assert (first["gi"], first["profile"], first["used_mib"], first["total_mib"]) == (
        2,
        "3g.71gb",
        16925,
        71424,
    )
    assert [(d["ci"], d["profile"]) for d in first["devices"]] == [
        (0, "1c.3g.71gb"),
        (1, "2c.3g.71gb"),
    ]
    assert first["sm"] == 16 + 32
    assert first["pids"] == [12249, 12250, 12267]
    assert [i["gi"] for i in instances] == [2, 3, 9, 10]


def test_a_gpu_not_in_mig_mode_has_no_instances() -> None:
    query = capture_section(
        CAPTURES / "linux-x86_64__nvidia-h200__590.48.01.txt", "load :: query (-q)"
    )
    assert mig.smi_instances("", query) == ([], [])


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("FAKE_NVML_MIG", "1")
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_PROCESS_PID", "501,502")
    agent._proc_api.clear()
    yield load_fake_nvml("fake_nvml_mig")
    agent._proc_api.clear()


def test_the_nvml_stand_in_has_every_mig_call_the_agent_makes(nvml: Any) -> None:
    source = (Path(mig.__file__)).read_text(encoding="utf-8")
    used = set(re.findall(r"nvml\.(nvmlDevice\w+)", source))
    assert used - {"nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex"} <= {
        *nvml.MIG_CALLS,
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
    }
    for name in nvml.MIG_CALLS:
        assert name in nvml.__dict__, name  # written out, not the NOT_SUPPORTED fallback


def test_nvml_reads_each_instance_through_its_mig_device_handle(nvml: Any) -> None:
    gpus, instances, problems = mig.nvml_instances(nvml, agent.nvml_compute_processes)
    assert gpus == [nvml.nvmlDeviceGetUUID(0)]
    assert problems == []
    got = [
        (i["gi"], i["profile"], i["total_mib"], i["used_mib"], i["sm"], i["pids"])
        for i in instances
    ]
    assert got == [
        (1, "2g.48gb", 47872, 1000 + 13, 94, [501]),
        (5, "1g.24gb", 23936, 1024 + 13, 47, [502]),
    ]
    assert instances[0]["devices"][0]["uuid"].startswith("MIG-")


def test_nvml_says_what_it_could_not_read_when_the_driver_gives_no_slice(
    nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_MIG", "no_devices")
    gpus, instances, problems = mig.nvml_instances(nvml, agent.nvml_compute_processes)
    assert (len(gpus), instances) == (1, [])
    assert problems == [f"{gpus[0]}: no MIG device could be opened"]


def test_the_nvml_row_says_mig_mode_and_no_utilisation(nvml: Any) -> None:
    fields = list(SAMPLE_FIELDS)
    gpus = parse_query_gpu(agent.nvml_gpu_rows(nvml, fields), tuple(fields)).gpus
    assert [(g.mig_mode, g.utilization_pct) for g in gpus] == [(True, None), (False, 7.0)]


def test_the_agent_asks_nvidia_smi_only_for_gpus_in_mig_mode() -> None:
    fields = ["index", "name", "mig.mode.current"]
    rows = ["0, NVIDIA H100, Disabled", "1, NVIDIA, H100 (a comma), Enabled", "2, X, [N/A]"]
    assert agent.mig_indexes(fields, rows) == ("1",)
    assert agent.mig_indexes(["index", "name"], ["0, X"]) == ()


def simulated(args: list[str], t: float) -> str:
    settings = replace(scenario.SimSettings(scenario="mig"), frozen_at=t)
    out = io.StringIO()
    assert smi.run(smi.parse_args(args), settings, out) == 0
    return out.getvalue()


def test_the_simulators_mig_gpu_reads_back_as_its_slices() -> None:
    t = 40.0
    settings = replace(scenario.SimSettings(scenario="mig"), frozen_at=t)
    gpus, instances = mig.smi_instances(simulated(["-L"], t), simulated(["-q", "-i", "7"], t))
    assert gpus == [scenario.UUIDS[scenario.MIG_GPU]]
    want = [
        (
            m.gi,
            m.profile,
            m.total_mib,
            scenario.mig_used_mib(settings, t, m),
            [m.pid] if m.pid else [],
        )
        for m in scenario.MIG_INSTANCES
    ]
    assert [
        (i["gi"], i["profile"], i["total_mib"], i["used_mib"], i["pids"]) for i in instances
    ] == want
    row = simulated(
        ["--query-gpu=index,utilization.gpu,mig.mode.current", "--format=csv,noheader"], t
    )
    assert row.splitlines()[scenario.MIG_GPU] == "7, [N/A], Enabled"


def test_hostile_records_lose_nothing_else() -> None:
    records: list[dict[str, Any]] = [
        {"gi": "2"},  # no usable id: dropped
        {
            "gi": 3,
            "profile": 7,
            "used_mib": -1,
            "total_mib": True,
            "devices": "x",
            "pids": [1, "2", -3],
        },
        {"gi": 4, "profile": "1g.24gb\x1b[31m", "devices": [{"index": 0, "uuid": "MIG-x"}, 5]},
    ]
    first, second = parse_mig_records(records)
    assert (
        first.gpu_instance_id,
        first.profile,
        first.memory_used_mib,
        first.memory_total_mib,
    ) == (
        3,
        None,
        None,
        None,
    )
    assert (first.devices, first.pids) == ((), (1,))
    assert "\x1b" not in (second.profile or "")
    assert [d.uuid for d in second.devices] == ["MIG-x"]


UUID = "GPU-95d3a06c-4f21-4c8e-b7a9-0a6e2f81c4d5"


def monitor_with(mig_mode: bool, records: list[dict[str, Any]] | None) -> HostMonitor:
    t0 = 1_800_000_000.0
    host = HostConfig(name="box", kind="local", kernel_log=False)
    monitor = HostMonitor(
        host, AgentSource(LocalTransport(host)), clock=FakeClock(t0).time, record=False
    )
    gpu = GpuSample(
        index=7,
        uuid=UUID,
        name="NVIDIA RTX PRO 6000",
        memory_used_mib=53000,
        memory_total_mib=97887,
        mig_mode=mig_mode,
    )
    procs = (
        GpuProcess(pid=1510, name="python3", memory_mib=40940, gpu_uuid=UUID, host_pid=2419510),
        GpuProcess(pid=1511, name="python3", memory_mib=12000, gpu_uuid=UUID, host_pid=2419511),
    )
    monitor.ingest_sample(HostSample("box", t0, None, (gpu,), procs))
    if records is not None:
        monitor.ingest_mig(records, None)
    return monitor


RECORDS = [
    {
        "gpu": UUID,
        "gi": 1,
        "profile": "2g.48gb",
        "total_mib": 47872,
        "used_mib": 40960,
        "pids": [2419510],
    },
    {
        "gpu": UUID,
        "gi": 5,
        "profile": "1g.24gb",
        "total_mib": 23936,
        "used_mib": 12020,
        "pids": [2419511],
    },
    {"gpu": UUID, "gi": 6, "profile": "1g.24gb", "total_mib": 23936, "used_mib": 13, "pids": []},
]


def test_the_snapshot_shows_the_instances_with_their_own_memory_and_processes() -> None:
    monitor = monitor_with(True, RECORDS)
    (gpu,) = snapshot_json(monitor, 0.0)["gpus"]
    got = [
        (
            i["gpu_instance_id"],
            i["profile"],
            i["memory_used_mib"],
            i["memory_total_mib"],
            i["utilization_pct"],
        )
        for i in gpu["mig"]["instances"]
    ]
    assert got == [
        (1, "2g.48gb", 40960, 47872, None),
        (5, "1g.24gb", 12020, 23936, None),
        (6, "1g.24gb", 13, 23936, None),
    ]
    assert [[p["pid"] for p in i["processes"]] for i in gpu["mig"]["instances"]] == [
        [1510],
        [1511],
        [],
    ]
    assert gpu["mig"]["error"] is None
    text = snapshot_table(monitor)
    row = next(ln for ln in text.splitlines() if ln.startswith("  7 "))
    assert "MIG" in row and "51.8/95.6" not in row  # never the whole GPU's memory as one
    assert re.search(r"11\.7/23\.4\s+50\.2%\s+n/a\s+GI 5 1g\.24gb", text), text
    assert "[GI 5 1g.24gb]" in text  # the process line names its instance


def test_a_mig_gpu_whose_instances_cannot_be_read_says_so() -> None:
    none: list[list[dict[str, Any]] | None] = [None, []]  # no Mig message; an empty one
    for records in none:
        monitor = monitor_with(True, records)
        (gpu,) = snapshot_json(monitor, 0.0)["gpus"]
        assert gpu["mig"]["instances"] == [] and gpu["mig"]["error"] == MIG_NOT_AVAILABLE
        text = snapshot_table(monitor)
        assert MIG_NOT_AVAILABLE in " ".join(text.split()), text
        assert "51.8/95.6" not in text


def test_a_gpu_not_in_mig_mode_has_no_mig_object() -> None:
    monitor = monitor_with(False, None)
    (gpu,) = snapshot_json(monitor, 0.0)["gpus"]
    assert gpu["mig"] is None
    assert "51.8/95.6" in snapshot_table(monitor)


def test_a_mig_uuid_names_its_instance() -> None:
    sample = monitor_with(
        True, [{**RECORDS[1], "devices": [{"index": 1, "ci": 0, "uuid": "MIG-a0c4"}]}]
    ).latest
    assert sample is not None
    found = sample.mig_device("MIG-a0c4")
    assert found is not None and found[0].name == "GI 5 1g.24gb"
    assert sample.mig_device("MIG-nope") is None


def slice_run(engine: AlertEngine, clock: FakeClock, used_at: Any, until: float) -> list[Any]:
    """Samples every second of GPU 7 in MIG mode: GI 5's used MiB ``used_at(t)``, GI 1
    steady; the whole GPU half empty throughout."""
    raised = []
    t = 0.0
    while t <= until:
        clock.now = 1_800_000_000.0 + t
        records = [
            {**RECORDS[0], "used_mib": 40960, "free_mib": 47872 - 40960},
            {**RECORDS[1], "used_mib": used_at(t), "free_mib": 23936 - used_at(t)},
        ]
        gpu = GpuSample(
            index=7, uuid=UUID, memory_used_mib=40960 + used_at(t), memory_total_mib=97887,
            memory_free_mib=97887 - 40960 - used_at(t), mig_mode=True,
        )  # fmt: skip
        sample = HostSample("box", clock.now, None, (gpu,), (), mig=parse_mig_records(records))
        raised += engine.on_sample(sample)
        t += 1.0
    return raised


def test_a_filling_instance_warns_of_its_own_time_to_full_and_memory() -> None:
    clock = FakeClock(1_800_000_000.0)
    engine = AlertEngine("box", AlertRules(), clock=clock.time)
    raised = slice_run(engine, clock, lambda t: min(9216 + round(160 * t), 23840), 100.0)
    kinds = {(a.kind, a.key) for a in raised}
    assert ("time_to_full", "time_to_full:7:gi5") in kinds
    assert ("memory", "memory:7:gi5") in kinds
    assert not any(a.key in ("memory:7", "time_to_full:7") for a in raised)  # not the GPU's
    first = next(a for a in raised if a.kind == "time_to_full")
    assert first.message.startswith("GPU 7 MIG GI 5 1g.24gb memory full in ~")
    memory = next(a for a in engine.active() if a.key == "memory:7:gi5")
    assert memory.message.startswith("GPU 7 MIG GI 5 1g.24gb memory 99.6% used")
    # the whole GPU was never above 66 %: judged as one, nothing would have been said
    assert (40960 + 23840) / 97887 < 0.67


def test_the_check_reads_the_instances_time_to_full() -> None:
    clock = FakeClock(1_800_000_000.0)
    engine = AlertEngine("box", AlertRules(), clock=clock.time)
    slice_run(engine, clock, lambda t: 9216 + round(160 * t), 70.0)
    (ttf,) = engine.instance_times_to_full(7).values()
    assert 5 in engine.instance_times_to_full(7) and 0 < ttf < 60
    assert engine.time_to_full(7) is None  # the whole GPU has no trend of its own


def test_a_steady_instance_raises_nothing() -> None:
    clock = FakeClock(1_800_000_000.0)
    engine = AlertEngine("box", AlertRules(), clock=clock.time)
    assert slice_run(engine, clock, lambda t: 12000, 60.0) == []


def test_check_judges_a_mig_gpu_by_its_fullest_instance() -> None:
    full = {**RECORDS[1], "used_mib": 23840, "free_mib": 96}
    monitor = monitor_with(True, [RECORDS[0], full, RECORDS[2]])
    code, text = check_verdict(monitor)
    assert code == CheckCode.CRITICAL, text
    assert text.startswith("CRITICAL box: GPU 7 MIG GI 5 1g.24gb memory 99.6% used"), text
    assert "fullest GPU 7 MIG GI 5 1g.24gb at 99.6% memory" in text
    assert "fullest_gpu_mem=99.6%" in text  # the whole GPU is at 54 %: never that


def test_a_cuda_oom_under_a_mig_uuid_is_on_its_instances_gpu() -> None:
    clock = FakeClock(1_800_000_000.0)
    engine = AlertEngine("box", AlertRules(), clock=clock.time)
    sliced = {**RECORDS[1], "devices": [{"index": 1, "ci": 0, "uuid": "MIG-a0c4e913-27d6"}]}
    gpu = GpuSample(
        index=7, uuid=UUID, memory_used_mib=53000, memory_total_mib=97887, mig_mode=True
    )
    engine.on_sample(
        HostSample("box", clock.now, None, (gpu,), (), mig=parse_mig_records([sliced]))
    )
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/finetune.py", line 1, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 23.38 GiB of which 90.00 MiB is free.",
    ]
    (oom,) = engine.on_log_lines("/srv/ft.log", lines, cuda_visible_devices="MIG-a0c4e913")
    assert oom.kind == "cuda_oom" and oom.gpu == 7
    assert "GPU 7 MIG GI 5 1g.24gb" in oom.message, oom.message


def test_a_recording_keeps_the_instances() -> None:
    sample = monitor_with(True, RECORDS).latest
    assert sample is not None and len(sample.mig) == 3
    back = sample_from_json(json.loads(json.dumps(sample_to_json(sample))))
    assert back.mig == sample.mig
    assert "mig" not in sample_to_json(replace(sample, mig=()))  # none: as before


def test_a_report_the_parser_cannot_read_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"-L": (0, "GPU 0: X (UUID: GPU-1)\n"), "-q": (0, "garbled\n")}
    calls: list[list[str]] = []

    def run_once(argv: list[str], timeout: float = 0.0) -> tuple[int, str]:
        calls.append(argv)
        return answers[argv[1]]

    monkeypatch.setattr(agent, "run_once", run_once)  # what nvidia-smi printed
    message = agent.smi_mig("nvidia-smi", ("0",))
    assert calls == [["nvidia-smi", "-L"], ["nvidia-smi", "-q", "-i", "0"]]
    assert (message.gpus, message.instances) == ([], [])
    assert message.error == "nvidia-smi -q shows no GPU in MIG mode (an unknown layout?)"
    answers["-L"] = (9, "NVIDIA-SMI has failed because it couldn't communicate with the driver\n")
    failed = agent.smi_mig("nvidia-smi", ("0",))
    assert failed.error == (
        "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate with the driver"
    )
