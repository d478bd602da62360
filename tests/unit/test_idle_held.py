"""gpu_idle_held: a GPU holding memory at near-zero utilisation for the window, its holder
named; the GPUs of a job are one incident; and each false positive (utilisation not
reported, briefly idle, too little held, a gap in the samples) does not fire. The fleet's
idle-allocated PromQL is built from the same test."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.incident import Fix, command_fix, incidents, screen_fixes
from gpumon.backends.alerts.rules import IdleHeld
from gpumon.backends.config import HostConfig
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.exporter.metrics import GpumonCollector, registry_for
from gpumon.backends.fleet.queries import IDLE_HELD, FleetQueries
from gpumon.backends.model import (
    CheckCode,
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    ProcessSource,
)
from gpumon.backends.monitor import HostMonitor, check_verdict, make_monitor, snapshot_json
from gpumon.backends.monitor.report import active_incidents
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.parsers.sglang import SglangScrape
from gpumon.backends.transport import LocalTransport
from gpumon.backends.workloads import SglangTracker
from gpumon.tui.views.alert_cells import alert_count, strip_alert, strip_incident

from waiting import FakeClock

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


def test_samples_read_on_time_but_taken_late_are_no_gap() -> None:
    """ci (a CPU hog beside 4 test workers): the dashboard's loop stalled 6 s and then
    took the agent's rounds together; they were read a second apart. The arrival gap
    restarted the run and ended the idle alert the test waited for (it comes back only
    after the rule's whole window)."""
    engine = AlertEngine("h", RULES)
    engine.interval_s = 1.0
    for t in range(12):
        engine.on_sample(HostSample("h", T0 + t, None, (held(0),)), came=100.0 + t)
    (alert,) = idle_alerts(engine)
    for t in range(12, 18):  # read 1 s apart, all taken at 117.5 s
        engine.on_sample(HostSample("h", T0 + t, None, (held(0),)), came=117.5 + t / 100)
    assert idle_alerts(engine) == [alert.replace("11 s", "18 s")]  # its run kept its start
    assert len(ever_raised(engine)) == 1


def test_an_idle_alert_up_outlasts_a_gap_shorter_than_its_window() -> None:
    """An SSH hiccup of 8 s (no data on either clock) does not end an idle alert that is
    up, which would raise it again, as new, a whole window later; the run keeps its start.
    A gap as long as the window still restarts it (the test above)."""
    engine = AlertEngine("h", RULES)
    engine.interval_s = 1.0
    feed(engine, range(15))
    assert idle_alerts(engine)
    feed(engine, range(23, 25))
    (message,) = idle_alerts(engine)
    assert "for 24 s" in message and len(ever_raised(engine)) == 1
    feed(engine, range(40, 42))  # 15 s without data: longer than the 10 s window
    assert idle_alerts(engine) == [] and len(ever_raised(engine)) == 1


def test_a_wall_clock_step_between_reads_is_no_gap() -> None:
    engine = AlertEngine("h", RULES)
    engine.interval_s = 1.0
    for t in range(6):
        engine.on_sample(HostSample("h", T0 + t, None, (held(0),)), came=100.0 + t)
    for t in range(6, 12):  # the host's clock stepped 1 h forward; data every second
        engine.on_sample(HostSample("h", T0 + 3600 + t, None, (held(0),)), came=100.0 + t)
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


def test_a_jobs_gpus_held_idle_are_fixed_by_s_stopping_the_job() -> None:
    """Issue 36 point 2: the job that holds its GPUs idle is named as their fix, ``s``
    stops it and says which GPUs that frees (no headless command stops a job: the
    dashboard's key)."""
    engine = AlertEngine("h", RULES, jobs={"drafter": (5, 6)})
    gpus = (held(5, 88 * GIB, 0.0), held(6, 88 * GIB, 1.0))
    feed(engine, range(0, 30, 2), gpus, (proc(311, 5), proc(312, 6)))
    (alert,) = [a for a in engine.active() if a.kind == "gpu_idle_held"]
    assert alert.facts.gpus == (5, 6) and alert.facts.held is None
    (incident,) = incidents(engine.active())
    assert incident.fixes == (Fix("s", "stop drafter (frees GPUs 5,6)"),)
    assert screen_fixes(incident) == "s stop drafter (frees GPUs 5,6)"
    assert command_fix(incident) == "fix: stop drafter (frees GPUs 5,6) (the dashboard's s)"
    assert incident.fix is None  # not a restart


def test_a_gpu_held_idle_by_a_process_of_no_job_is_fixed_by_k_stopping_it() -> None:
    """Issue 36 point 2: the biggest holder of a GPU held idle outside any job is its fact
    (``held``) and ``K`` stops it, by its program's name; a GPU whose process list names
    nobody offers no fix it cannot name."""
    engine = AlertEngine("h", RULES)
    jupyter = GpuProcess(pid=None, name=None, memory_mib=6 * GIB, gpu_uuid="GPU-0",
                         host_pid=5150, container="201")  # fmt: skip
    jupyter = replace(jupyter, name="/usr/bin/python3 jupyter-lab")
    small = replace(proc(77, 0, "python probe.py"), memory_mib=GIB)
    feed(engine, range(12), processes=(small, jupyter))
    (alert,) = [a for a in engine.active() if a.kind == "gpu_idle_held"]
    assert alert.facts.held is not None
    assert alert.facts.held.holder.pid == 5150 and alert.facts.held.others == 1
    (incident,) = incidents(engine.active())
    assert screen_fixes(incident) == f"K stop {alert.facts.held.holder.program}"
    assert incident.fixes[0].key == "K"

    nobody = AlertEngine("h", RULES)
    feed(nobody, range(12))
    (incident,) = incidents(nobody.active())
    assert incident.fixes == ()


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
    clock = FakeClock(T0)  # the samples come a second apart on the monitor's clock
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), clock=clock.time, record=False)
    for t in range(12):
        clock.now = T0 + t
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
    clock.now = T0 + 12
    monitor.ingest_sample(HostSample("box", T0 + 12, None, (held(5, util=80.0),)))
    assert gauge() == 0 and check_verdict(monitor, [])[0] is CheckCode.OK


# --------------------------------- issue 34 point 8: a server without traffic, silencing


def test_an_sglang_server_up_with_no_traffic_is_no_gpu_idle_held_but_a_jupyter_is() -> None:
    """GPU 0 holds an SGLang server's KV pool (69 GiB at 0 %: no request); GPU 1 a jupyter
    kernel's 6 GiB at 0 %. Both read gpu_idle_held (a page every quiet night for the
    server); now the server's is a server_idle note, the kernel's stays."""
    engine = AlertEngine("h", RULES)
    engine.serving = {0: 30000}  # the monitor's Workloads.serving_gpus: port 30000 is up
    gpus = (held(0, 69 * GIB), held(1, 6 * GIB))
    procs = (proc(311, 0, "sglang::scheduler_TP0"), proc(9, 1, "python -m jupyter-lab"))
    feed(engine, range(12), gpus, procs)
    by_kind = {a.kind: a for a in engine.active()}
    assert set(by_kind) == {"server_idle", "gpu_idle_held"}
    kernel = by_kind["gpu_idle_held"]
    assert kernel.gpu == 1 and kernel.key == "gpu_idle_held:1"
    server = by_kind["server_idle"]
    assert (server.key, server.gpu, server.severity) == ("server_idle:30000", 0, Health.INFO)
    assert server.message == (
        "sglang :30000 up, idle for 11 s: GPU 0 at under 5 % holds 69 GiB (its KV cache pool);"
        " a server without traffic"
    )
    engine.serving = {}  # the server stops answering, its processes keep the memory
    feed(engine, range(12, 13), gpus, procs)
    assert sorted(a.key for a in engine.active()) == ["gpu_idle_held:0", "gpu_idle_held:1"]


def test_notifiers_get_server_idle_only_where_their_kinds_name_it() -> None:
    default = NotifierConfig("hook", "webhook", url="http://127.0.0.1:9/hook")
    assert not default.wants("h", "server_idle", Health.INFO)
    assert default.wants("h", "gpu_idle_held", Health.WARNING)
    named = NotifierConfig("hook", "webhook", url="http://127.0.0.1:9/hook", kinds=("server_idle",))
    assert named.wants("h", "server_idle", Health.INFO)
    # a note is below every min_severity: naming its kind is what asks for it
    pager = replace(named, kinds=("server_idle", "cuda_oom"), min_severity=Health.CRITICAL)
    assert pager.wants("h", "server_idle", Health.INFO)
    assert not pager.wants("h", "cuda_oom", Health.WARNING)
    # nor does a note of a kind notified by default page anyone who did not name it
    assert not default.wants("h", "gpu_idle_held", Health.INFO)


def test_a_server_without_traffic_is_a_note_never_a_failed_check_nor_a_page(
    tmp_path: Path,
) -> None:
    """Issue 34 point 8 asked for "a server_idle note at most, off by default for
    notifiers", never a page. It was a warning: check exited 1 (WARNING box: sglang
    :30000 up, idle ...), the strip showed it, the header counted it new, the fleet
    counted it in the node's warnings. Now it is a note (info): in the alert list and
    the snapshot's alerts, the check OK, nothing in the strip, no message by default."""
    clock = FakeClock(T0)  # the samples come a second apart on the monitor's clock
    host = HostConfig(name="box", kind="local", alerts=RULES)
    monitor = make_monitor(host, record=False, clock=clock.time)
    monitor.workloads.sglang[30000] = tracker = SglangTracker(30000)
    tracker.observe(SglangScrape(running=0.0, queued=0.0), T0)  # up and answering
    for t in range(12):
        clock.now = T0 + t
        gpus, procs = (held(0, 69 * GIB),), (proc(311, 0, "sglang::scheduler_TP0"),)
        monitor.ingest_sample(HostSample("box", T0 + t, None, gpus, procs))
    [note] = monitor.alerts.active()
    assert (note.kind, note.severity) == ("server_idle", Health.INFO)
    code, line = check_verdict(monitor, [])
    assert code is CheckCode.OK and line.startswith("OK box: 1 GPUs"), line
    [said] = snapshot_json(monitor, T0 + 11)["alerts"]
    assert (said["kind"], said["severity"]) == ("server_idle", "info")
    found = active_incidents(monitor)
    assert strip_incident(found) == (None, 0) and strip_alert([note]) == (None, 0)
    assert alert_count([note]).new == 0 and alert_count([note]).total == 1
    page = generate_latest(registry_for(GpumonCollector(lambda: [monitor]))).decode()
    assert 'gpumon_alerts_active{host="box",kind="server_idle",severity="info"} 1.0' in page
    assert 'kind="server_idle",severity="warning"' not in page
    default = NotifierConfig("all", "webhook", url="http://127.0.0.1:9/all")
    named = replace(default, name="idle", kinds=("server_idle",))
    hub = NotifyHub(
        NotifySettings(notifiers={"all": default, "idle": named}),
        Outbox(tmp_path / "outbox.sqlite3"),
        clock=lambda: T0 + 11,
    )
    hub.publish(hub.tracker.observe("box", monitor.alerts.active(), T0 + 11, found))
    assert hub.outbox.pending("all") == []
    [row] = hub.outbox.pending("idle")
    assert row.event.summary().startswith("[INFO] box: sglang :30000 up, idle for 11 s")
    hub.outbox.close()


@pytest.mark.parametrize(
    ("ignore", "alerted"),
    [
        ((), [1, 2]),
        (("jupyter*",), [2]),  # GPU 1: the kernel, by its program name
        (("CT201",), [2]),  # ... by its container
        (("jupyter*", "python*"), []),  # GPU 2: train.py, which nvidia-smi names python
        (("jupyter*", "train.py"), []),
    ],
)
def test_idle_held_ignore_silences_gpus_whose_every_holder_it_names(
    ignore: tuple[str, ...], alerted: list[int]
) -> None:
    rules = AlertRules.from_mapping(
        {"idle_held_after_s": 10, "idle_held_ignore": list(ignore)}, "alerts"
    )
    engine = AlertEngine("h", rules, container=200)
    kernel = GpuProcess(
        pid=None, name="python", memory_mib=6 * GIB, gpu_uuid="GPU-1", host_pid=9,
        container="201", command="/usr/bin/python3 -m jupyter-lab --no-browser",
        source=ProcessSource.HOST.value,
    )  # fmt: skip
    procs = (kernel, proc(7, 2))
    feed(engine, range(12), (held(1, 6 * GIB), held(2)), procs)
    assert sorted(a.gpu or 0 for a in engine.active() if a.kind == "gpu_idle_held") == alerted


def test_a_gpu_one_of_whose_holders_is_not_ignored_still_warns() -> None:
    rules = AlertRules(idle_held_after_s=10.0, idle_held_ignore=("jupyter*",))
    engine = AlertEngine("h", rules)
    feed(engine, range(12), (held(0),), (proc(1, 0, "jupyter-lab"), proc(2, 0)))
    assert idle_alerts(engine)
    assert not AlertRules(idle_held_ignore=("*",)).idle_held_ignored(())  # none known


def test_idle_held_ignore_is_checked() -> None:
    for bad in ("jupyter*", [""], [1], ["x" * 256], ["p"] * 65):
        with pytest.raises(ValueError, match=r"alerts\.idle_held_ignore: expected a list"):
            AlertRules.from_mapping({"idle_held_ignore": bad}, "alerts")


def test_the_page_names_what_the_idle_gpus_cost_so_far_as_typed_facts() -> None:
    """Issue 39 point 2: ``4 GPUs idle 6.0 h, 14 kWh, ~2.10 EUR``: four GPUs at 583.3 W for
    6 h (power x time: 4 x 583.3 W x 21,600 s = 50.4 MJ = 14.0 kWh) at 0.15 EUR a kWh;
    the facts say it to every output (the JSON, a recording) without parsing the text."""
    from gpumon.backends.alerts.facts import AlertFacts, IdleCost

    engine = AlertEngine("h", AlertRules(), jobs={"drafter": (0, 1, 2, 3)})
    engine.energy_price = (0.15, "EUR")
    gpus = tuple(replace(held(i), power_w=583.3333) for i in range(4))
    for t in range(0, 6 * 3600 + 1, 60):  # a sample a minute: interval_s says so
        engine.interval_s = 60.0
        engine.on_sample(HostSample("h", T0 + t, None, gpus, ()))
    (alert,) = [a for a in engine.active() if a.kind == "gpu_idle_held"]
    assert alert.message.endswith("; 4 GPUs idle 6.0 h, 14 kWh, ~2.10 EUR"), alert.message
    cost = alert.facts.idle_cost
    assert cost is not None and cost.gpus == 4 and cost.seconds == 6 * 3600
    assert cost.kwh == pytest.approx(14.0, rel=1e-4) and cost.cost == pytest.approx(2.1, rel=1e-4)
    (incident,) = incidents(engine.active())  # the page's headline says it
    assert incident.headline.endswith("4 GPUs idle 6.0 h, 14 kWh, ~2.10 EUR"), incident.headline
    back = AlertFacts.from_json(alert.facts.to_json())  # a recording's, the JSON's
    assert back.idle_cost == cost
    assert IdleCost(2, 90.0).words() == "2 GPUs idle 90 s"  # no power reported: no kWh, not 0
    no_power = AlertEngine("h", RULES)
    feed(no_power, range(12), processes=(proc(4242, 0),))
    (quiet,) = [a for a in no_power.active() if a.kind == "gpu_idle_held"]
    assert quiet.facts.idle_cost == IdleCost(1, 11.0)  # known: the GPUs and the time
    assert "kWh" not in quiet.message
