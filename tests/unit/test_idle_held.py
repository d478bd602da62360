"""gpu_idle_held: a GPU holding memory at near-zero utilisation for the window, its holder
named; the GPUs of a job are one incident; and each false positive (utilisation not
reported, briefly idle, too little held, a gap in the samples) does not fire. The fleet's
idle-allocated PromQL is built from the same test."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.rules import IdleHeld
from gpumon.backends.config import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.exporter.metrics import GpumonCollector, registry_for
from gpumon.backends.fleet.queries import IDLE_HELD, FleetQueries
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.monitor import CheckCode, HostMonitor, check_verdict, snapshot_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.transport import LocalTransport

T0 = 1_800_000_000.0
GIB = 1024
RULES = AlertRules(idle_held_after_s=10.0)


def held(index: int, used_mib: int | None = 86 * GIB, util: float | None = 0.0) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        utilization_pct=util,
        memory_total_mib=143771,
        memory_used_mib=used_mib,
    )


def proc(pid: int, gpu: int, name: str = "python train.py") -> GpuProcess:
    return GpuProcess(pid=pid, name=name, memory_mib=86 * GIB, gpu_uuid=f"GPU-{gpu}")


def feed(
    engine: AlertEngine,
    seconds: range,
    gpus: tuple[GpuSample, ...] | None = None,
    processes: tuple[GpuProcess, ...] = (),
) -> None:
    for t in seconds:
        gs = gpus if gpus is not None else (held(0),)
        engine.on_sample(HostSample("h", T0 + t, None, gs, processes))


def idle_alerts(engine: AlertEngine) -> list[str]:
    return [a.message for a in engine.active() if a.kind == "gpu_idle_held"]


def ever_raised(engine: AlertEngine) -> list[str]:
    """Every gpu_idle_held alert the engine raised, active or ended since."""
    return [a.message for a in engine.history() if a.kind == "gpu_idle_held"]


def test_held_and_idle_past_the_window_names_its_holder() -> None:
    engine = AlertEngine("h", RULES)
    feed(engine, range(10), processes=(proc(4242, 0),))
    assert idle_alerts(engine) == []  # 9 s idle: not yet
    feed(engine, range(10, 12), processes=(proc(4242, 0),))
    (alert,) = [a for a in engine.active() if a.kind == "gpu_idle_held"]
    assert alert.severity is Health.WARNING and alert.gpu == 0
    assert alert.message == (
        "GPU 0 idle (0 %) for 11 s while holding 86 GiB; held by PID 4242 train.py"
    )


def test_it_resolves_when_the_gpu_works_again() -> None:
    engine = AlertEngine("h", RULES)
    feed(engine, range(12))
    assert idle_alerts(engine)
    feed(engine, range(12, 13), (held(0, util=60.0),))
    assert idle_alerts(engine) == []
    assert [a.kind for a in engine.history() if not a.active] == ["gpu_idle_held"]


def test_utilisation_not_reported_is_never_idle() -> None:
    engine = AlertEngine("h", RULES)
    feed(engine, range(60), (held(0, util=None),))
    assert ever_raised(engine) == []


def test_briefly_idle_between_epochs_is_not_idle_held() -> None:
    """Idle 8 s (a checkpoint), busy one sample, idle 8 s again: never 10 s in a row."""
    engine = AlertEngine("h", RULES)
    for start in range(0, 90, 9):
        feed(engine, range(start, start + 8))
        feed(engine, range(start + 8, start + 9), (held(0, util=97.0),))
    assert ever_raised(engine) == []


def test_too_little_held_is_not_idle_held() -> None:
    engine = AlertEngine("h", RULES)
    feed(engine, range(60), (held(0, used_mib=2048),))  # not more than 2048
    feed(engine, range(60, 120), (held(1, used_mib=500),))
    assert ever_raised(engine) == []


def test_a_gap_in_the_samples_is_not_idle_time() -> None:
    """Samples each second, then nothing for 30 s: 4 + 5 s seen idle, not 39."""
    engine = AlertEngine("h", RULES)
    feed(engine, range(5))
    feed(engine, range(35, 40))
    assert ever_raised(engine) == []
    feed(engine, range(40, 46))  # 10 s seen in a row since the gap
    assert idle_alerts(engine)


def test_a_slow_interval_is_not_a_gap() -> None:
    """Sampled every 10 s (two samples once came 0.2 s apart): 10 s between samples is the
    rate asked for, not stale data; 60 s without one is."""
    engine = AlertEngine("h", AlertRules(idle_held_after_s=60.0))
    engine.interval_s = 10.0
    feed(engine, range(0, 1))
    engine.on_sample(HostSample("h", T0 + 0.2, None, (held(0),)))
    feed(engine, range(10, 70, 10))
    assert idle_alerts(engine)
    feed(engine, range(130, 180, 10))  # after a minute of nothing: 40 s seen since
    assert idle_alerts(engine) == []


def test_a_jobs_gpus_are_one_incident() -> None:
    engine = AlertEngine("h", RULES, jobs={"drafter": (5, 6, 7)})
    gpus = (held(4, util=90.0), held(5, 88 * GIB, 0.0), held(6, 88 * GIB, 2.0), held(7, 88 * GIB))
    procs = (proc(311, 5), proc(312, 6), proc(313, 7), proc(9, 4, "python serve.py"))
    feed(engine, range(0, 400, 2), gpus, procs)
    (alert,) = [a for a in engine.active() if a.kind == "gpu_idle_held"]
    assert alert.job == "drafter" and alert.gpu == 5
    (incident,) = incidents(engine.active())
    assert incident.headline == (
        "drafter's GPUs 5-7 idle (0-2 %) for 7 min while holding 88 GiB each;"
        " held by PID 311 train.py (+2 more)"
    )


def test_off_with_zero_after_s() -> None:
    engine = AlertEngine("h", AlertRules(idle_held_after_s=0.0))
    feed(engine, range(60))
    assert ever_raised(engine) == []


@pytest.mark.parametrize(
    ("used", "util", "idle"),
    [(2049, 4.9, True), (2048, 0.0, False), (90000, 5.0, False), (90000, None, False)],
)
def test_one_definition_with_the_fleet(used: int, util: float | None, idle: bool) -> None:
    """The host rule's sample test at its boundaries, and the fleet's PromQL carries the
    same thresholds and comparisons (strictly more than, strictly under)."""
    assert IdleHeld().sample(used, util) is idle
    assert AlertRules().idle_held == IDLE_HELD
    expr = FleetQueries(idle_window_s=600).instant()["idle_allocated"]
    assert "> bool 2048)" in expr and "< bool 5)" in expr and "[600s]" in expr


def test_the_keys_are_checked() -> None:
    rules = AlertRules.from_mapping({"idle_held_after_s": 10, "idle_util_pct": 3}, "alerts")
    assert rules.idle_held == IdleHeld(2048, 3.0, 10.0)
    with pytest.raises(ValueError, match=r"alerts\.idle_util_pct: expected a number"):
        AlertRules.from_mapping({"idle_util_pct": 0}, "alerts")


def test_the_monitor_check_snapshot_and_exporter_say_it() -> None:
    """Through a HostMonitor with a configured job: ``check`` warns with the incident's
    headline, ``snapshot --json`` has the kind, the exporter gauges it; a busy sample
    ends it everywhere."""
    host = HostConfig(
        name="box", kind="local", kernel_log=False, alerts=RULES, jobs=(JobConfig("drafter", (5,)),)
    )
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    for t in range(12):
        monitor.ingest_sample(HostSample("box", T0 + t, None, (held(5),), (proc(7, 5),)))
    now = T0 + 11
    code, line = check_verdict(monitor, [])
    assert code is CheckCode.WARNING
    assert line.startswith("WARNING box: drafter's GPU 5 idle (0 %) for 11 s while holding 86 GiB")
    assert [a["kind"] for a in snapshot_json(monitor, now)["alerts"]] == ["gpu_idle_held"]

    def gauge() -> float:
        text = generate_latest(registry_for(GpumonCollector(lambda: [monitor]))).decode()
        return next(
            s.value
            for family in text_string_to_metric_families(text)
            if family.name == "gpumon_alerts_active"
            for s in family.samples
            if s.labels["kind"] == "gpu_idle_held" and s.labels["severity"] == "warning"
        )

    assert gauge() == 1
    monitor.ingest_sample(HostSample("box", T0 + 12, None, (held(5, util=80.0),)))
    assert gauge() == 0 and check_verdict(monitor, [])[0] is CheckCode.OK
