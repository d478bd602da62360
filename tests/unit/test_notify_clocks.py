"""The notifiers' waits on the monotonic clock (found while fixing issue 34 point 5), on a
FakeClock beside a wall clock the test steps: a new incident's settle window, a retry and
``resolve_after_s`` end when their own time has passed; the waits a restarted watch reads
back from the outbox (a row's ``not_before``, a notifier's ``retry_at``: wall-clock times
in the file) are taken as times from now, at most their window ahead, so a clock stepped
back while gpumon was down holds no page back by the step's size.
tests/system/test_notify_clocks.py runs the hub's real delivery task on the real clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox

from stepped_clock import Wall
from waiting import FakeClock

SETTLE_S = 5.0
RETRY_MAX_S = 60.0
STEPS = [+3600.0, -1800.0]


def _clocks() -> tuple[FakeClock, Wall]:
    """The monotonic clock and the wall clock beside it, which a test steps."""
    ticks = FakeClock()
    return ticks, Wall(ticks.time, at=1_800_000_000.0)


def _hub(
    path: Path,
    ticks: FakeClock,
    wall: Wall,
    resolve_after_s: float = 0.0,
    reading: Callable[[], float] | None = None,
) -> NotifyHub:
    """The hub with one pager; ``reading``: its monotonic clock (``ticks``' by default)."""
    pager = NotifierConfig(
        "pd", "pagerduty", url="http://127.0.0.1:9/pd", routing_key="K", group_s=0,
        settle_s=SETTLE_S,
    )  # fmt: skip
    settings = NotifySettings(
        notifiers={"pd": pager},
        min_open_s=0,
        resolve_after_s=resolve_after_s,
        retry_first_s=2.0,
        retry_max_s=RETRY_MAX_S,
    )
    outbox = Outbox(path / "outbox.sqlite3")
    return NotifyHub(settings, outbox, clock=wall, ticks=reading or ticks.time)


def _see(hub: NotifyHub, *alerts: Alert) -> None:
    hub.publish(hub.tracker.observe("box", alerts, hub.clock(), tick=hub.ticks()))


def _xid(at: float) -> Alert:
    said = "Xid 79 on GPU 3: GPU has fallen off the bus"
    return Alert("xid:3", Health.CRITICAL, "xid", "box", 3, None, said, at, at)


def _due(hub: NotifyHub) -> list[str]:
    """The events of the pager's message due now."""
    rows, _ = hub.next_message("pd")
    return [r.event.event for r in rows]


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
def test_the_settle_window_ends_in_its_time_whatever_the_wall_clock_did(
    tmp_path: Path, step: float
) -> None:
    ticks, wall = _clocks()
    hub = _hub(tmp_path, ticks, wall)
    _see(hub, _xid(wall()))
    ticks.advance(1.0)
    wall.offset += step
    assert _due(hub) == []  # +1 h sent it before the cause could join
    assert hub.next_message("pd")[1] == pytest.approx(SETTLE_S - 1.0)
    ticks.advance(SETTLE_S - 1.0)
    assert _due(hub) == ["open"]  # -30 min held it 30 min longer
    hub.outbox.close()


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
def test_a_retry_ends_in_its_time_whatever_the_wall_clock_did(tmp_path: Path, step: float) -> None:
    ticks, wall = _clocks()
    hub = _hub(tmp_path, ticks, wall)
    hub.back_off("pd", [], "HTTP 503", 2.0)
    wall.offset += step
    assert hub.retry_in("pd") == 2.0
    ticks.advance(2.0)
    assert hub.retry_in("pd") == 0.0
    hub.outbox.close()


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
def test_an_incident_resolves_after_resolve_after_s_whatever_the_wall_clock_did(
    tmp_path: Path, step: float
) -> None:
    ticks, wall = _clocks()
    hub = _hub(tmp_path, ticks, wall, resolve_after_s=120.0)
    _see(hub, _xid(wall()))
    ticks.advance(10.0)
    _see(hub)  # its alert ended
    wall.offset += step
    ticks.advance(119.0)
    assert hub.tracker.due(hub.clock(), hub.ticks()) == []  # +1 h resolved it at once
    ticks.advance(1.0)
    [resolved] = hub.tracker.due(hub.clock(), hub.ticks())  # -30 min: 30 min late
    assert resolved.event == "resolve" and resolved.time == wall()  # dated by the wall
    hub.outbox.close()


def test_waits_read_back_from_the_outbox_are_bounded_by_their_window(tmp_path: Path) -> None:
    """gpumon stops while a first page settles and its pager is backed off; the clock is
    set back an hour before it starts again: the file's times are an hour ahead. The page
    goes out once its settle window has passed, the retry within ``retry_max_s``."""
    ticks, wall = _clocks()
    first = _hub(tmp_path, ticks, wall)
    _see(first, _xid(wall()))
    first.back_off("pd", [], "HTTP 503", 10.0)
    first.outbox.close()
    wall.offset -= 3600.0
    ticks.advance(1.0)
    again = _hub(tmp_path, ticks, wall)
    rows, wait = again.next_message("pd")
    assert rows == [] and wait is not None and wait <= SETTLE_S
    assert 0 < again.retry_in("pd") <= RETRY_MAX_S
    ticks.advance(SETTLE_S)
    assert _due(again) == ["open"]
    ticks.advance(RETRY_MAX_S)
    assert again.retry_in("pd") == 0.0
    again.outbox.close()


def test_rows_read_back_already_due_go_out_together(tmp_path: Path) -> None:
    """A restarted watch finds two rows of one host due while it was down (the incident's
    escalation and its resolve): one message. Its clock moves on a little with each
    reading, as a real one does (each row read back was made due 'now' as it was looked
    at: the second a moment after the first, and each went alone)."""
    ticks, wall = _clocks()
    first = _hub(tmp_path, ticks, wall)
    warning = dataclasses.replace(_xid(wall()), severity=Health.WARNING)
    _see(first, warning)
    ticks.advance(SETTLE_S)
    rows, _ = first.next_message("pd")
    first.mark_sent("pd", [r.id for r in rows])
    _see(first, _xid(wall()))  # critical now: an update
    _see(first)  # and over: its resolve
    first.outbox.close()
    ticks.advance(60.0)

    def reading() -> float:
        ticks.advance(1e-6)
        return ticks.now

    again = _hub(tmp_path, ticks, wall, reading=reading)
    assert _due(again) == ["update", "resolve"]
    again.outbox.close()
