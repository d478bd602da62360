"""Issue 34 point 5 in process: the monitor judges every age on the monotonic clock from
when data came (its ``watch_clock``), dates samples and alerts on the wall clock, and
leaves out of every age the time gpumon itself did not run. A +1 h wall-clock step paged
a false critical ``stale_data``; after a -30 min step a hang went unpaged for 30 min; a
watch stopped (SIGSTOP) past the critical threshold paged a false critical on resuming.
tests/integration/test_watch_clocks_ssh.py plays the same with a real ``gpumon watch``."""

from __future__ import annotations

import asyncio

from gpumon.backends.alerts.engine import AlertRules
from gpumon.backends.config import HostConfig
from gpumon.backends.model import ConnState, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.state import SUSPENDED_AFTER_S

from quiet_source import Quiet
from stepped_clock import Wall
from waiting import FakeClock

REFUSED = "cannot connect to 127.0.0.1 port 2222: connection refused"


def _monitor(ticks: FakeClock, rules: AlertRules | None = None) -> tuple[HostMonitor, Wall]:
    wall = Wall(ticks.time, at=ticks.now + 1_800_000_000.0)
    host = HostConfig(name="box", kind="local", kernel_log=False, alerts=rules or AlertRules())
    monitor = HostMonitor(
        host, Quiet(), clock=wall, ticks=ticks.time, sleep=ticks.sleep, record=False
    )
    return monitor, wall


def _sample(monitor: HostMonitor, wall: Wall) -> None:
    gpu = GpuSample(index=0, uuid="U", memory_used_mib=1000, memory_total_mib=90000)
    monitor.ingest_sample(HostSample("box", wall(), None, (gpu,)))


def _silence(monitor: HostMonitor) -> list[tuple[str, Health]]:
    return [(a.kind, a.severity) for a in monitor.alerts.active()]


def test_a_wall_clock_step_changes_no_verdict() -> None:
    ticks = FakeClock(5000.0)
    monitor, wall = _monitor(ticks)  # 1 s interval: warning after 5 s, critical after 30 s
    monitor.ingest_status(ConnState.CONNECTED)
    _sample(monitor, wall)
    ticks.advance(1.0)
    wall.offset += 3600  # NTP, or a clock set by hand
    monitor.check_silence()
    assert _silence(monitor) == [] and not monitor.is_stale() and not monitor.no_data()
    assert monitor.stale_s() == 1.0  # the data's age, not the step's
    _sample(monitor, wall)
    wall.offset -= 5400  # now 30 min behind where it began
    ticks.advance(4.9)
    monitor.check_silence()
    assert _silence(monitor) == []
    ticks.advance(0.2)  # the hang's usual time: 5 s without data
    monitor.check_silence()
    assert _silence(monitor) == [("stale_data", Health.WARNING)]
    [alert] = monitor.alerts.active()
    assert alert.time == wall()  # dated on the wall clock, as it reads now
    assert alert.message.startswith("no GPU data for 5 s while connected")
    ticks.advance(25.0)
    monitor.check_silence()
    assert _silence(monitor) == [("stale_data", Health.CRITICAL)]


def test_an_unreachable_hosts_time_is_counted_on_the_monotonic_clock() -> None:
    ticks = FakeClock(5000.0)
    monitor, wall = _monitor(ticks, AlertRules(unreachable_critical_s=60.0))
    monitor.ingest_status(ConnState.CONNECTED)
    _sample(monitor, wall)
    monitor.ingest_status(ConnState.RECONNECTING, error=REFUSED, attempt=1)
    wall.offset += 3600
    ticks.advance(10.0)
    monitor.check_silence()
    assert _silence(monitor) == []  # one failed try 10 s ago: no page (not 3610 s)
    wall.offset -= 7200
    ticks.advance(50.0)
    monitor.check_silence()
    assert _silence(monitor) == [("host_unreachable", Health.CRITICAL)]


async def _started(monitor: HostMonitor) -> None:
    monitor.start()
    await _tick()  # the watchdog's first sleep


async def _tick() -> None:
    """One round of the watchdog: it checks the silence, then sleeps its period (the
    FakeClock moves on 1 s) and yields."""
    await asyncio.sleep(0)


async def test_time_gpumon_did_not_run_is_not_the_hosts_silence() -> None:
    ticks = FakeClock(5000.0)
    monitor, wall = _monitor(ticks, AlertRules(stale_critical_intervals=10.0))
    await _started(monitor)
    try:
        monitor.ingest_status(ConnState.CONNECTED)
        for _ in range(3):  # a sample each round
            _sample(monitor, wall)
            await _tick()
        ticks.advance(90.0)  # SIGSTOP: the monotonic clock runs on, gpumon does not
        await _tick()  # SIGCONT: the watchdog runs first, before any data
        assert _silence(monitor) == [] and not monitor.no_data()
        assert monitor.is_stale()  # the values on show are 91 s old all the same
        _sample(monitor, wall)  # the host answers within its interval
        assert not monitor.is_stale()
        for _ in range(5):
            await _tick()
        assert _silence(monitor) == []
        await _tick()  # 5 s without data since: a true hang, paged in its usual time
        assert _silence(monitor) == [("stale_data", Health.WARNING)]
    finally:
        await monitor.stop()


async def test_a_hang_before_the_stop_keeps_its_page_and_its_age() -> None:
    """The stop is left out, not the silence before it: a warning stays a warning (no
    false resolve, no false escalation) and escalates when the silence gpumon watched
    reaches the threshold."""
    ticks = FakeClock(5000.0)
    monitor, wall = _monitor(ticks, AlertRules(stale_critical_intervals=10.0))
    await _started(monitor)
    try:
        monitor.ingest_status(ConnState.CONNECTED)
        _sample(monitor, wall)
        for _ in range(6):
            await _tick()
        assert _silence(monitor) == [("stale_data", Health.WARNING)]
        ticks.advance(60.0)
        await _tick()
        assert _silence(monitor) == [("stale_data", Health.WARNING)]  # 6 s watched, not 66
        for _ in range(4):
            await _tick()
        assert _silence(monitor) == [("stale_data", Health.CRITICAL)]
    finally:
        await monitor.stop()


async def test_a_late_tick_under_the_bound_counts_and_a_stopped_monitors_clock_stands() -> None:
    ticks = FakeClock(5000.0)
    monitor, wall = _monitor(ticks)
    await _started(monitor)
    try:
        monitor.ingest_status(ConnState.CONNECTED)
        _sample(monitor, wall)
        ticks.advance(SUSPENDED_AFTER_S + 0.5)  # a loaded machine's late tick: gpumon ran
        await _tick()
        assert _silence(monitor) == [("stale_data", Health.WARNING)]
    finally:
        await monitor.stop()
    age = monitor.stale_s()
    ticks.advance(60.0)  # a one-shot waits for the target's processes to end
    assert monitor.stale_s() == age
