"""The dashboard on a flight recording (``gpumon replay FILE``): pause, step, speed, and
the header's "REPLAY 2x, 14:32:07 (45/661)" instead of the connection state.

``ReplayControls`` are the dashboard screen's keys on a recording. A replay is the app
with one monitor fed by a ``ReplaySource``: the rows, alerts, jobs pane and strip behave
as during the incident. ``p`` pauses the recording itself (not only the rows), so ``.``
can step it one sample at a time; ``n`` / ``N`` jump to the next / previous alert; ``[`` /
``]`` change the speed, also while paused (the header says "paused 2x"). Keys that need a
live machine are greyed out or hidden (the action table says which).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from textual.screen import Screen

from gpumon.backends.monitor import SPEEDS, ReplaySource
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
        replay = self.replay
        if action == "replay_step":
            return True if replay.paused and not replay.finished else None
        if action == "replay_next_alert":
            return True if replay.has_next_alert() else None
        if action == "replay_previous_alert":
            return True if replay.has_previous_alert() else None
        if replay.finished:
            return None
        edge = SPEEDS[-1] if action == "replay_faster" else SPEEDS[0]
        return True if replay.speed != edge else None

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

    def jump(self, *, forward: bool) -> None:
        replay = self.replay
        moved = replay.next_alert() if forward else replay.previous_alert()
        if not moved:
            where = "later" if forward else "earlier"
            self.screen.notify(f"no {where} alert in the recording", timeout=2)
            return
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
