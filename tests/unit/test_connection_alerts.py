"""Issue 28 points 1, 2, 4 in process: a host that cannot be reached is a
``host_unreachable`` incident (warning after a few failed tries, critical after
``unreachable_critical_s``, with the last error, ended when it is back); a driver that says
why no data comes ("GPU is lost") is a critical ``driver_error`` in its own words, and
``check`` says CRITICAL; the notify hub counts a host that never sends three samples once
``SETTLE_S`` has passed."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.rules import UNREACHABLE_WARNING_FAILURES, UNREACHABLE_WARNING_S
from gpumon.backends.config import HostConfig
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.exporter.metrics import GpumonCollector, registry_for
from gpumon.backends.model import CheckCode, ConnState, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor, check_verdict, snapshot_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.notify.hub import SETTLE_S, NotifyHub
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.parsers.nvidia_smi import classify_smi_failure
from gpumon.backends.transport import LocalTransport

T0 = 1_800_000_000.0
REFUSED = "cannot connect to 127.0.0.1 port 2222: connection refused"
# The driver's words after an Xid 79 (formats.md, nvidia-smi failures), exit 15.
GPU_LOST = (
    "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost. "
    "Reboot the system to recover this GPU"
)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _monitor(clock: Clock, unreachable_critical_s: float = 120.0) -> HostMonitor:
    rules = AlertRules(unreachable_critical_s=unreachable_critical_s)
    host = HostConfig(name="box", kind="local", kernel_log=False, alerts=rules)
    return HostMonitor(host, AgentSource(LocalTransport(host)), clock=clock, record=False)


def _sample(monitor: HostMonitor, clock: Clock) -> None:
    gpu = GpuSample(index=0, uuid="U", memory_used_mib=1000, memory_total_mib=90000)
    monitor.ingest_sample(HostSample("box", clock.t, None, (gpu,)))


def _fail(monitor: HostMonitor, clock: Clock, attempt: int, error: str = REFUSED) -> None:
    """One failed session, as ``TransportSource.run`` says it, 1 s after the last."""
    clock.t += 1.0
    monitor.ingest_status(ConnState.RECONNECTING, error=error, attempt=attempt)


# --- host_unreachable ------------------------------------------------------------------


def test_the_engine_warns_after_a_few_failures_and_is_critical_after_the_limit() -> None:
    engine = AlertEngine("box", AlertRules(unreachable_critical_s=120), clock=Clock())
    few = UNREACHABLE_WARNING_FAILURES
    assert engine.on_unreachable(few - 1, 5.0, REFUSED, T0) == []  # a blip is not a page
    (warn,) = engine.on_unreachable(few, 6.0, REFUSED, T0 + 1)
    assert (warn.kind, warn.key, warn.severity) == ("host_unreachable",) * 2 + (Health.WARNING,)
    assert warn.message == f"{REFUSED} (unreachable for 6 s, {few} attempts failed)"
    assert engine.on_unreachable(few + 1, 119.0, "no answer from x within 10 s", T0 + 2) == []
    (crit,) = engine.on_unreachable(few + 2, 120.0, "no answer from x within 10 s", T0 + 3)
    assert crit.severity is Health.CRITICAL and crit.message.startswith("no answer from x")
    engine.on_unreachable(0, None, None, T0 + 4)  # connected: the host is back
    assert engine.active() == [] and engine.history()[0].peak is Health.CRITICAL
    never = AlertEngine("box", AlertRules(unreachable_critical_s=0), clock=Clock())
    assert never.on_unreachable(50, 1e6, REFUSED, T0)[0].severity is Health.WARNING
    # Tries that are far apart (a refused key is retried every 30 s): blind 30 s is enough.
    slow = AlertEngine("box", AlertRules(), clock=Clock())
    refused = "authentication refused by me@box: permission denied"
    assert slow.on_unreachable(1, UNREACHABLE_WARNING_S - 1, refused, T0) == []
    (warn,) = slow.on_unreachable(1, UNREACHABLE_WARNING_S, refused, T0 + 1)
    assert warn.severity is Health.WARNING and warn.message.startswith(refused)
    once = AlertEngine("box", AlertRules(), clock=Clock())  # a one-shot's only try
    (gave_up,) = once.on_unreachable(1, 0.5, REFUSED, T0, gave_up=True)
    assert gave_up.severity is Health.WARNING and "1 attempt failed" in gave_up.message


def test_a_host_that_goes_down_is_unreachable_then_critical_then_back() -> None:
    clock = Clock()
    monitor = _monitor(clock, unreachable_critical_s=30)
    monitor.ingest_status(ConnState.CONNECTED)
    _sample(monitor, clock)
    # The stream ends (the session had data: the loss is its first "failure"), then
    # reconnects are refused.
    for attempt in range(1, UNREACHABLE_WARNING_FAILURES):
        _fail(monitor, clock, attempt)
        assert monitor.alerts.active() == []
    _fail(monitor, clock, UNREACHABLE_WARNING_FAILURES)
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity) == ("host_unreachable", Health.WARNING)
    assert alert.message.startswith(REFUSED)
    assert snapshot_json(monitor, clock.t)["alerts"][0]["kind"] == "host_unreachable"
    clock.t = T0 + 30.0  # the watchdog, no new try in between: blind for 30 s
    monitor.check_silence()
    (alert,) = monitor.alerts.active()
    assert alert.severity is Health.CRITICAL and "unreachable for 30 s" in alert.message
    monitor.ingest_status(ConnState.CONNECTED, error=None)  # back
    assert monitor.alerts.active() == []


def test_a_host_never_reached_from_the_start_is_the_same_incident() -> None:
    clock = Clock()
    monitor = _monitor(clock)
    monitor.ingest_status(ConnState.CONNECTING)
    for attempt in range(1, UNREACHABLE_WARNING_FAILURES + 1):
        _fail(monitor, clock, attempt, "cannot connect to nohost: name or service not known")
    (alert,) = monitor.alerts.active()
    assert alert.kind == "host_unreachable" and "name or service not known" in alert.message
    # A one-shot (no reconnect) that failed its only try says it too; check stays UNKNOWN:
    # it cannot judge the GPUs of a host it did not reach.
    once = _monitor(Clock())
    once.ingest_status(ConnState.FAILED, error=REFUSED, attempt=1)
    assert [a.kind for a in once.alerts.active()] == ["host_unreachable"]
    assert check_verdict(once) == (CheckCode.UNKNOWN, f"UNKNOWN box: {REFUSED}")
    once.ingest_status(ConnState.STOPPED, error=REFUSED)  # the stop keeps the verdict
    assert [a.kind for a in once.alerts.active()] == ["host_unreachable"]


# --- driver_error -------------------------------------------------------------------------


def test_a_lost_gpu_from_the_start_is_a_critical_driver_error_in_its_words() -> None:
    clock = Clock()
    monitor = _monitor(clock)
    monitor.ingest_status(ConnState.CONNECTED)  # the agent's Hello
    failure = classify_smi_failure(GPU_LOST, 15)
    assert failure is not None and failure.driver
    monitor.ingest_smi_failure(failure)
    clock.t += 3.0  # the floor (not five intervals): a silence, and the driver says why
    monitor.check_silence()
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity) == ("driver_error", Health.CRITICAL)
    assert GPU_LOST in alert.message and "reboot the host" in alert.message
    code, line = check_verdict(monitor)
    assert code is CheckCode.CRITICAL and GPU_LOST in line and "reboot the host" in line
    monitor.ingest_status(ConnState.STOPPED, error=monitor.status.error)  # one-shot's end
    assert check_verdict(monitor)[0] is CheckCode.CRITICAL
    assert snapshot_json(monitor, clock.t)["alerts"][0]["kind"] == "driver_error"


def test_a_driver_error_mid_stream_replaces_the_stall_and_a_sample_ends_it() -> None:
    clock = Clock()
    monitor = _monitor(clock)
    monitor.ingest_status(ConnState.CONNECTED)
    _sample(monitor, clock)
    clock.t += 5.0
    monitor.check_silence()
    assert [a.kind for a in monitor.alerts.active()] == ["stale_data"]
    stall = classify_smi_failure("nvidia-smi gave no usable GPU row for 5 s", 124)
    assert stall is not None and not stall.driver  # a stall stays a stall, with its words
    monitor.ingest_smi_failure(stall)
    monitor.check_silence()
    (alert,) = monitor.alerts.active()
    assert alert.kind == "stale_data" and "no usable GPU row" in alert.message
    lost = classify_smi_failure(GPU_LOST, 15)
    assert lost is not None
    monitor.ingest_smi_failure(lost)
    monitor.check_silence()
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity) == ("driver_error", Health.CRITICAL)
    code, line = check_verdict(monitor)
    assert code is CheckCode.CRITICAL and line.startswith(f'CRITICAL box: nvidia-smi: "{GPU_LOST}')
    _sample(monitor, clock)
    assert monitor.alerts.active() == []


def test_sessions_that_each_end_in_the_driver_error_stay_one_driver_error() -> None:
    """nvidia-smi streamed directly (no Python on the target): each session ends with the
    failure and the next one starts; that is the driver, not an unreachable host."""
    clock = Clock()
    monitor = _monitor(clock)
    failure = classify_smi_failure(GPU_LOST, 15)
    assert failure is not None
    for attempt in range(1, 8):
        monitor.ingest_status(ConnState.CONNECTED, error=None)
        monitor.ingest_smi_failure(failure)
        _fail(monitor, clock, attempt, failure.message)
    assert [(a.kind, a.severity) for a in monitor.alerts.history()] == [
        ("driver_error", Health.CRITICAL)
    ]  # raised once, never ended in between
    _fail(monitor, clock, 8)  # then the host goes down: unreachable, whatever it said before
    assert [a.kind for a in monitor.alerts.active()] == ["host_unreachable"]


# --- delivery: the hub and the exporter --------------------------------------------------


def test_the_hub_counts_a_host_that_never_settles_once_its_time_is_up(tmp_path: Path) -> None:
    """nvidia-smi hangs a second after the first sample: a stale_data alert, one sample.
    Before, the hub waited for a third sample that never came: 0 events."""
    clock = Clock()
    hook = NotifierConfig(name="hook", kind="webhook", url="http://127.0.0.1:9/hook")
    hub = NotifyHub(NotifySettings(notifiers={"hook": hook}), Outbox(tmp_path / "o.sqlite3"))
    hub.clock = clock
    monitor = _monitor(clock)
    hub.attach(monitor)
    monitor.ingest_status(ConnState.CONNECTED)
    _sample(monitor, clock)
    clock.t += 5.0
    monitor.check_silence()
    assert [a.kind for a in monitor.alerts.active()] == ["stale_data"]
    hub.observe_settled()
    assert hub.outbox.pending("hook") == []  # one sample, 5 s: still settling
    clock.t = T0 + SETTLE_S
    hub.observe_settled()  # the tick: nothing changed on the host, its time is up
    [row] = hub.outbox.pending("hook")
    assert (row.event.event, row.event.kind, row.event.key) == (
        "open",
        "stale_data",
        "box/gpu-/-/stale_data",
    )
    hub.outbox.close()


@pytest.mark.parametrize("kind", ["host_unreachable", "log_flood"])
def test_the_exporter_gauges_every_active_kind(kind: str) -> None:
    monitor = _monitor(Clock())
    monitor.alerts.raise_alert(kind, Health.CRITICAL, "x")
    text = generate_latest(registry_for(GpumonCollector(lambda: [monitor]))).decode()
    active = {
        (s.labels["severity"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpumon_alerts_active"
        for s in family.samples
    }
    assert active[("critical", kind)] == 1 and active[("warning", "driver_error")] == 0
