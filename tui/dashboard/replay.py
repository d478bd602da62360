"""The dashboard on a flight recording (``gpumon replay FILE``): pause, step, speed, and
the header's "REPLAY 2x, 14:32:07 (45/661)" instead of the connection state.

``ReplayControls`` are the dashboard screen's keys on a recording. A replay is the app
with one monitor fed by a ``ReplaySource``: the rows, alerts, jobs pane and strip behave
as during the incident. ``p`` pauses the recording itself (not only the rows), so ``.``
can step it one sample at a time (``,`` one back); ``n`` / ``N`` jump to the first sample
of the next / previous incident and pause there (before its memory dropped: step on with
``.``); ``[`` / ``]`` change the speed, also while paused (the header says "paused 2x").
Keys that need a live machine are greyed out or hidden (the action table says which);
pressed, they say that this is a recording.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from textual.screen import Screen

from gpumon.backends.monitor import SPEEDS, ReplaySource
from gpumon.tui.dashboard.action_table import ACTIONS, DashboardAction
from gpumon.tui.dashboard.actions import RECORDING
from gpumon.tui.views import clock_time

if TYPE_CHECKING:
    from gpumon.backends.monitor import HostMonitor


def speed_text(speed: float) -> str:
    """2.0 -> "2x", 0.25 -> "0.25x"."""
    return f"{speed:g}x"


def replay_status(replay: ReplaySource) -> str:
    """ "REPLAY 2x, 14:32:07 (45/661)"; "paused 2x" while paused (the speed it resumes
    at), "ended" at the end."""
    samples = replay.recording.samples
    shown = replay.now  # the time of the sample on show (the first one before it plays)
    if replay.finished:
        state = "ended"
    elif replay.paused:
        state = "paused" if replay.speed == 1.0 else f"paused {speed_text(replay.speed)}"
    else:
        state = speed_text(replay.speed)
    return f"REPLAY {state}, {clock_time(shown)} ({replay.position}/{len(samples)})"


def replay_of(monitors: Sequence[HostMonitor]) -> ReplaySource | None:
    """The recording a dashboard of ``monitors`` shows, or None for live hosts."""
    if len(monitors) == 1 and isinstance(monitors[0].source, ReplaySource):
        return monitors[0].source
    return None


def replay_header(monitor: HostMonitor) -> str | None:
    """The header's replay status of ``monitor`` (None: it is live)."""
    source = monitor.source
    return replay_status(source) if isinstance(source, ReplaySource) else None


def machine_key(key: str) -> DashboardAction | None:
    """The dashboard action on a machine that ``key`` is bound to (None: no such one)."""
    return next((a for a in ACTIONS if a.machine and key in a.keys.split(",")), None)


class ReplayControls:
    """The replay keys on the dashboard ``screen``; ``moved()`` after a jump or a new
    speed (the timer's pace), ``refresh()`` redraws the dashboard."""

    def __init__(
        self,
        replay: ReplaySource,
        screen: Screen[None],
        *,
        refresh: Callable[[], None],
        moved: Callable[[], None],
    ) -> None:
        self.replay = replay
        self.screen = screen
        self.refresh = refresh
        self.moved = moved

    def state(self, action: str) -> bool | None:
        """A replay key's state: step only while paused, speed within its range, neither
        once the recording ended (greyed out, None)."""
        return self.verdict(action)[0]

    def verdict(self, action: str) -> tuple[bool | None, str | None]:
        """A replay key's state (``state``) and, greyed out, why."""
        replay = self.replay
        if action in ("replay_step", "replay_step_back") and not replay.paused:
            return None, "the recording plays: p pauses it first"
        if action == "replay_step":
            return (True, None) if not replay.finished else (None, "the recording has ended")
        if action == "replay_step_back":
            return (True, None) if replay.can_step_back else (None, "this is its first sample")
        if action == "replay_next_alert":
            return (True, None) if replay.has_next_alert() else (None, "no incident after this")
        if action == "replay_previous_alert":
            if replay.has_previous_alert():
                return True, None
            return None, "no incident before this"
        if replay.finished:
            return None, "the recording has ended"
        faster = action == "replay_faster"
        edge = SPEEDS[-1] if faster else SPEEDS[0]
        if replay.speed == edge:
            return None, f"already the {'fastest' if faster else 'slowest'} speed ({edge:g}x)"
        return True, None

    def refuse_key(self, key: str) -> bool:
        """A key of an action on a machine (hidden in a replay, so Textual passes it on):
        say that this is a recording, not that gpumon is read-only; False for other keys."""
        entry = machine_key(key)
        if entry is None:
            return False
        self.screen.notify(
            f"{key} ({entry.label.lower()}): {RECORDING}", title="Recording", severity="warning"
        )
        return True

    def toggle_pause(self) -> None:
        self.replay.set_paused(not self.replay.paused)
        self.screen.app.refresh_bindings()
        self.refresh()

    def step(self) -> None:
        if not self.replay.paused:
            return
        if self.replay.step():
            self.refresh()
        self.screen.app.refresh_bindings()

    def step_back(self) -> None:
        if self.replay.paused and self.replay.step_back():
            self.refresh()
        self.screen.app.refresh_bindings()

    def jump(self, *, forward: bool) -> None:
        """To the first sample of the next / previous incident, paused there (it would
        play on past the moment worth seeing)."""
        replay = self.replay
        moved = replay.next_alert() if forward else replay.previous_alert()
        if not moved:
            where = "later" if forward else "earlier"
            self.screen.notify(f"no {where} incident in the recording", timeout=2)
            return
        replay.set_paused(True)
        self._moved()

    def speed(self, *, faster: bool) -> None:
        speed = self.replay.faster() if faster else self.replay.slower()
        self.screen.notify(f"replay speed {speed_text(speed)}", timeout=2)
        self._moved()

    def _moved(self) -> None:
        """After a jump or a new speed: the timer's pace, the keys' states, the screen."""
        self.moved()
        self.screen.app.refresh_bindings()
        self.refresh()
