"""The dashboard on a flight recording (``gpumon replay FILE``): pause, step, speed, and
the header's "REPLAY 2x, 14:32:07 (45/661)" instead of the connection state.

``ReplayMixin`` is a base of ``DashboardScreen``. A replay is the app with one monitor fed
by a ``ReplaySource``: the rows, alerts, jobs pane and strip behave as during the incident.
``p`` pauses the recording itself (not only the rows), so ``.`` can step it one sample at a
time; ``n`` / ``N`` jump to the next / previous alert; ``[`` / ``]`` change the speed, also
while paused (the header says "paused 2x"). Keys that need a live machine are greyed out
or hidden (the action table says which).
"""

from __future__ import annotations

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


class ReplayMixin(Screen[None]):
    if TYPE_CHECKING:  # provided by the dashboard screen
        monitors: list[HostMonitor]

        def refresh_dashboard(
            self, hosts: set[int] | None = None, *, rows_of: set[int] | None = None
        ) -> None: ...

        def _retime(self) -> None: ...

    @property
    def replay(self) -> ReplaySource | None:
        """The recording on show, or None for live hosts."""
        if len(self.monitors) == 1 and isinstance(self.monitors[0].source, ReplaySource):
            return self.monitors[0].source
        return None

    def replay_header(self, monitor: HostMonitor) -> str | None:
        source = monitor.source
        return replay_status(source) if isinstance(source, ReplaySource) else None

    def replay_state(self, replay: ReplaySource, action: str) -> bool | None:
        """A replay key's state: step only while paused, speed within its range, neither
        once the recording ended (greyed out, None)."""
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

    def toggle_replay_pause(self, replay: ReplaySource) -> None:
        replay.set_paused(not replay.paused)
        self.app.refresh_bindings()
        self.refresh_dashboard()

    def action_replay_step(self) -> None:
        replay = self.replay
        if replay is None or not replay.paused:
            return
        if replay.step():
            self.refresh_dashboard()
        self.app.refresh_bindings()

    def action_replay_next_alert(self) -> None:
        self._replay_jump(forward=True)

    def action_replay_previous_alert(self) -> None:
        self._replay_jump(forward=False)

    def _replay_jump(self, *, forward: bool) -> None:
        replay = self.replay
        if replay is None:
            return
        moved = replay.next_alert() if forward else replay.previous_alert()
        if not moved:
            self.notify(f"no {'later' if forward else 'earlier'} alert in the recording", timeout=2)
            return
        self._replay_moved()

    def action_replay_faster(self) -> None:
        self._replay_speed(faster=True)

    def action_replay_slower(self) -> None:
        self._replay_speed(faster=False)

    def _replay_speed(self, *, faster: bool) -> None:
        replay = self.replay
        if replay is None:
            return
        speed = replay.faster() if faster else replay.slower()
        self.notify(f"replay speed {speed_text(speed)}", timeout=2)
        self._replay_moved()

    def _replay_moved(self) -> None:
        """After a jump or a new speed: the timer's pace, the keys' states, the screen."""
        self._retime()
        self.app.refresh_bindings()
        self.refresh_dashboard()
