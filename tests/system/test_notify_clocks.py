"""Found while fixing issue 34 point 5: the notifiers' waits were wall-clock times, so a
wall-clock step during one moved the page by the step's size. A new incident's settle
window, a notifier's retry after a failure and an incident's ``resolve_after_s`` each
waited 30 min longer after a -30 min step, and a +1 h step ended them at once (a pager's
first message went out before the cause that follows it could join). The hub's real
delivery task runs here on the real monotonic clock, beside a wall clock the test steps
(``Wall``), with a ``terminal`` notifier whose output is a callback: each wait ends when
its own window has passed, whatever the wall clock did in it.
tests/unit/test_notify_clocks.py has the same on a FakeClock, and the outbox read back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.notifiers import DeliveryError
from gpumon.backends.notify.outbox import Outbox

from stepped_clock import Wall
from waiting import until

pytestmark = pytest.mark.system

WINDOW_S = 1.0  # each wait under test: a settle window, a retry
# Three of the hub's ticks (TICK_S, 1 s): the old code resolved at the next tick after a
# +1 h step, which a loaded machine may hold back past a 1 s window.
RESOLVE_AFTER_S = 3.0
STEPS = [+3600.0, -1800.0]


class Desk:
    """The hub with one ``terminal`` notifier, each message recorded when it was written
    (by the monotonic clock) as its events' kinds; ``fail`` refuses the next ones."""

    def __init__(self, tmp_path: Path, *, settle_s: float = 0.0, resolve_after_s: float = 0.0):
        self.wall = Wall(time.time)
        terminal = NotifierConfig("desk", "terminal", group_s=0, settle_s=settle_s)
        settings = NotifySettings(
            notifiers={"desk": terminal},
            min_open_s=0,
            resolve_after_s=resolve_after_s,
            retry_first_s=WINDOW_S,
            retry_max_s=WINDOW_S,
        )
        outbox = Outbox(tmp_path / "outbox.sqlite3")
        self.hub = NotifyHub(settings, outbox, clock=self.wall, ticks=time.monotonic)
        self.hub.terminal = self._write
        self.hub.delivered.add(self._delivered)
        self.fail = 0
        self.failed_at: float | None = None
        self.messages: list[tuple[float, list[str]]] = []

    async def __aenter__(self) -> Desk:
        await self.hub.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.hub.close()
        self.hub.outbox.close()

    def _write(self, data: bytes) -> None:
        if self.fail:
            self.fail -= 1
            self.failed_at = time.monotonic()
            raise DeliveryError("the desktop is away")

    def _delivered(self, name: str, events: list[IncidentEvent]) -> None:
        self.messages.append((time.monotonic(), [e.event for e in events]))

    def see(self, *alerts: Alert) -> float:
        """The host's active alerts now, as the monitor's listener gives them to the hub;
        returns when, by the monotonic clock: before the hub reads it (a wait the hub
        times from its own reading ends no sooner than the window after this)."""
        hub = self.hub
        at = time.monotonic()
        hub.publish(hub.tracker.observe("box", alerts, hub.clock(), tick=hub.ticks()))
        return at


def xid(at: float, gpu: int = 3) -> Alert:
    said = f"Xid 79 on GPU {gpu}: GPU has fallen off the bus"
    return Alert(f"xid:{gpu}", Health.CRITICAL, "xid", "box", gpu, None, said, at, at)


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
async def test_a_step_during_the_settle_window_moves_no_first_page(
    tmp_path: Path, step: float
) -> None:
    async with Desk(tmp_path, settle_s=WINDOW_S) as desk:
        opened = desk.see(xid(desk.wall()))
        desk.wall.offset += step
        await until(lambda: desk.messages, 20, "the first page")
        [(at, events)] = desk.messages
        assert events == ["open"]
        assert at - opened >= WINDOW_S  # the +1 h step sent it at once


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
async def test_a_step_during_a_retry_moves_no_retry(tmp_path: Path, step: float) -> None:
    async with Desk(tmp_path) as desk:
        desk.fail = 1
        first = xid(desk.wall())
        desk.see(first)
        await until(lambda: desk.failed_at is not None, 20, "the first try")
        desk.wall.offset += step
        desk.see(first, xid(desk.wall(), gpu=4))  # a new incident wakes the delivery task
        await until(lambda: desk.messages, 20, "the retry")
        [(at, events)] = desk.messages
        assert desk.failed_at is not None and at - desk.failed_at >= WINDOW_S
        assert events == ["open", "open"]  # both, once the retry was due


@pytest.mark.parametrize("step", STEPS, ids=["+1h", "-30min"])
async def test_a_step_while_an_incident_waits_to_resolve_moves_no_resolve(
    tmp_path: Path, step: float
) -> None:
    async with Desk(tmp_path, resolve_after_s=RESOLVE_AFTER_S) as desk:
        desk.see(xid(desk.wall()))
        await until(lambda: desk.messages, 20, "the open")
        cleared = desk.see()  # its alert ended: resolved once over resolve_after_s
        desk.wall.offset += step
        await until(lambda: len(desk.messages) == 2, 20, "the resolve")
        at, events = desk.messages[1]
        assert events == ["resolve"]
        assert at - cleared >= RESOLVE_AFTER_S  # the +1 h step resolved it at the next tick
