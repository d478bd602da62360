"""A connected stream that goes silent (a hung link: no RST, SSH keepalive still waiting)
is seen from the data itself: after two of its periods, never under the floor, the
monitor says "no data" and the header shows it instead of "connected"."""

from __future__ import annotations

from gpumon.backends.config import HostConfig
from gpumon.backends.model import ConnState, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.monitor.state import NO_DATA_FLOOR_S
from gpumon.backends.transport import LocalTransport
from gpumon.tui.views import Role
from gpumon.tui.views.gpu_cells import HeaderInput, HeaderPart, header_parts


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _monitor(interval: float) -> tuple[HostMonitor, Clock]:
    host = HostConfig(name="box", kind="local", interval=interval, kernel_log=False)
    clock = Clock()
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), clock=clock, record=False)
    monitor.ingest_status(ConnState.CONNECTED)
    return monitor, clock


def _round(monitor: HostMonitor, clock: Clock, after: float) -> None:
    clock.now += after
    sample = HostSample("box", clock.now, None, (GpuSample(index=0, uuid="U"),))
    monitor.ingest_sample(sample)


def test_no_data_after_two_intervals_of_silence() -> None:
    monitor, clock = _monitor(interval=1.0)
    assert not monitor.no_data()  # before the first round there is nothing to miss
    for _ in range(5):
        _round(monitor, clock, 1.0)
    assert monitor.silence_limit() == 2.0
    clock.now += 1.9
    assert not monitor.no_data()
    clock.now += 0.2
    assert monitor.no_data()
    assert not monitor.is_stale()  # the stale mark (3 intervals, 3 s) is not there yet
    _round(monitor, clock, 0.0)
    assert not monitor.no_data()


def test_the_floor_and_a_slow_sampler_keep_it_from_flickering() -> None:
    fast, clock = _monitor(interval=0.1)
    for _ in range(5):
        _round(fast, clock, 0.1)
    assert fast.silence_limit() == NO_DATA_FLOOR_S
    clock.now += 0.5  # a slow nvidia-smi round at 0.1 s: not "no data"
    assert not fast.no_data()
    # nvidia-smi taking 1.5 s per round at a 1 s interval: the typical gap counts.
    slow, clock = _monitor(interval=1.0)
    for _ in range(9):
        _round(slow, clock, 2.5)
    assert slow.silence_limit() == 5.0
    clock.now += 4.0
    assert not slow.no_data()


def test_a_new_session_is_not_no_data_until_it_had_its_time() -> None:
    monitor, clock = _monitor(interval=1.0)
    _round(monitor, clock, 1.0)
    monitor.ingest_status(ConnState.RECONNECTING)
    clock.now += 30.0
    assert not monitor.no_data()  # not connected: the header says so already
    monitor.ingest_status(ConnState.CONNECTED)
    clock.now += 1.0
    assert not monitor.no_data()
    clock.now += 1.5
    assert monitor.no_data()


def _header(
    monitor: HostMonitor, clock: Clock, stale_alert: Health | None = None
) -> list[HeaderPart]:
    return header_parts(
        HeaderInput(
            name="box",
            status=monitor.status,
            age=monitor.stale_s(),
            now=clock.now,
            stale=monitor.is_stale(),
            interval=monitor.interval,
            alerts=len(monitor.alerts.active()),
            paused=False,
            no_data=monitor.no_data(),
            stale_alert=stale_alert,
        )
    )


def test_the_header_says_no_data_instead_of_connected() -> None:
    monitor, clock = _monitor(interval=1.0)
    _round(monitor, clock, 1.0)
    clock.now += 3.0
    parts = _header(monitor, clock)
    assert parts[1].text == "◌ no data"
    assert parts[1].role == Role.WARNING  # said at once; the stale_data alert colours it
    assert "connected" not in "  ".join(p.text for p in parts)


def test_a_stale_data_alert_colours_the_header_and_a_sample_ends_it() -> None:
    monitor, clock = _monitor(interval=1.0)
    _round(monitor, clock, 1.0)
    for wait, level, role in (
        (5.0, Health.WARNING, Role.WARNING),
        (26.0, Health.CRITICAL, Role.CRITICAL),
    ):
        clock.now += wait
        monitor.check_silence()
        (alert,) = monitor.alerts.active()
        assert (alert.kind, alert.severity) == ("stale_data", level)
        parts = _header(monitor, clock, alert.severity)
        assert parts[1].text == "◌ no data" and parts[1].role == role
        assert any(p.text.startswith("stale ") and p.role == role for p in parts)
    _round(monitor, clock, 0.5)
    assert monitor.alerts.active() == []
    monitor.ingest_status(ConnState.RECONNECTING)  # a lost link says so itself
    clock.now += 60
    monitor.check_silence()
    assert monitor.alerts.active() == []
