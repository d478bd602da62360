"""The dashboard app: one section per host, keys as actions, one refresh timer.

Monitors are injected, not yet started (tests pass ones with a frozen clock); the app
starts them on mount and stops them on exit. Monitor listeners only mark a host dirty
(and react at once to a change of connection state); a timer at about 1 Hz redraws what
changed, batched.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.driver import Driver
from textual.timer import Timer
from textual.widgets import Footer

from gpumon.backends.model import ConnState, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.themes import (
    GPUMON_THEMES,
    STYLESHEET,
    choose_theme,
    severity_variables,
    theme_order,
)

from .commands import GpumonCommands
from .hangup import hangup_safe, terminal_fd, terminal_gone
from .notices import ConnectionWatch
from .palette import Palette
from .screens.detail import DetailScreen, DetailTarget
from .screens.help import HelpScreen, help_rows
from .state import remember_theme, remembered_theme
from .widgets.gpu_row import GpuRow
from .widgets.gpu_table import HostSection, ViewContext
from .widgets.plot import plotext

if TYPE_CHECKING:
    from gpumon.backends.config import HostConfig
    from gpumon.backends.sim.scenario import SimSettings

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
TICK_S = 1.0
TALL_SCREEN = 40  # from this many lines, GPU rows grow to 2-3 lines


class HostList(VerticalScroll, can_focus=False):
    """The scrolling column of host sections (never takes focus: keys go to the app)."""


class GpumonApp(App[int]):
    TITLE = "gpumon"
    CSS_PATH = STYLESHEET
    COMMANDS: ClassVar = App.COMMANDS | {GpumonCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Quit gpumon"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="This list of keys"),
        Binding("enter", "open_detail", "Detail", tooltip="Detail view of the GPU at the cursor"),
        Binding(
            "p", "toggle_pause", "Pause", tooltip="Pause or resume updates (monitoring goes on)"
        ),
        Binding(
            "plus,equals_sign",
            "faster",
            "Faster",
            key_display="+",
            tooltip="Sample faster, on every host",
        ),
        Binding(
            "minus", "slower", "Slower", key_display="-", tooltip="Sample slower, on every host"
        ),
        Binding("t", "cycle_theme", "Theme", tooltip="Next colour theme (remembered)"),
        Binding("m", "toggle_spark", "Mem/Util", tooltip="Sparklines: memory or utilisation"),
        Binding("down,j", "cursor(1)", "Next GPU", show=False),
        Binding("up,k", "cursor(-1)", "Previous GPU", show=False),
    ]

    def __init__(
        self,
        monitors: Sequence[HostMonitor],
        *,
        theme: str | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self._mounted = False
        self.monitors = list(monitors)
        self.read_only = read_only
        for t in GPUMON_THEMES:
            self.register_theme(t)
        name, self._theme_problem = choose_theme(
            theme, remembered_theme(), list(self.available_themes)
        )
        self.theme = name
        self._save_theme = theme is not None and self._theme_problem is None
        self.palette = Palette.from_theme(self.current_theme)
        self.sections = [HostSection(m, i) for i, m in enumerate(self.monitors)]
        self.paused = False
        self.spark_memory = True
        self.cursor: tuple[int, int] | None = None
        self.row_height = 1
        self._dirty: set[int] = set()  # hosts with news since their rows were drawn
        self._watches = [ConnectionWatch(m.name, m.status.state) for m in self.monitors]
        self._timer: Timer | None = None
        self._tty: int | None = None

    # --- lifecycle -----------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HostList(*self.sections, id="hosts")
        yield Footer(compact=True)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return severity_variables(self.current_theme)

    def on_load(self) -> None:
        # Connect while Textual sets up the screen: the first frame can show data.
        for i, m in enumerate(self.monitors):
            m.add_listener(partial(self._on_monitor_change, i))
            m.start()

    def on_mount(self) -> None:
        self._mounted = True
        if self._theme_problem:
            self.notify(self._theme_problem, title="Theme", severity="warning", timeout=10)
        if self._save_theme:
            remember_theme(self.theme)
        self._retime()
        for i, m in enumerate(self.monitors):  # what happened while the screen was set up
            self._on_monitor_change(i, m)
        # Load plotext off the event loop, before anyone opens a detail view.
        self.set_timer(2.0, lambda: self.run_worker(plotext, thread=True, group="warm-up"))
        if not self.is_headless:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_hangup)
            self._tty = terminal_fd()
        self.refresh_dashboard()

    async def on_unmount(self) -> None:
        self._mounted = False  # monitors report "stopped" below; nothing to draw it on
        if self._timer is not None:
            self._timer.stop()
        if not self.is_headless:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await asyncio.gather(*(m.stop() for m in self.monitors), return_exceptions=True)

    def get_driver_class(self) -> type[Driver]:
        return hangup_safe(super().get_driver_class())

    def _on_hangup(self) -> None:
        """The terminal went away: stop drawing and leave quietly."""
        driver = self.driver_class
        if hasattr(driver, "gone"):
            driver.gone = True
        self.exit(0)

    def on_resize(self) -> None:
        self.call_after_refresh(self.refresh_dashboard)

    def _row_height(self) -> int:
        """Lines per GPU row: 1 in small terminals, up to 3 when there is room.
        Later panes (SGLang, jobs) take their share before this is computed."""
        _, h = self.size
        if h < TALL_SCREEN:
            return 1
        gpus = sum(len(s.gpus) or 8 for s in self.sections)
        free = h - 1 - 3 * len(self.sections)
        return min(max(free // max(gpus, 1), 1), 3)

    def _retime(self) -> None:
        """One timer, about 1 Hz, faster when a host samples faster."""
        period = min(TICK_S, max(0.25, min((m.interval for m in self.monitors), default=1.0)))
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(period, self._tick, name="refresh")

    # --- monitor events ------------------------------------------------------------------
    def _on_monitor_change(self, i: int, monitor: HostMonitor) -> None:
        """A monitor listener: note the news; react now only to a new connection state
        or the first data (the timer draws the rest)."""
        if not self._mounted:
            return
        self._dirty.add(i)
        watch = self._watches[i]
        changed = monitor.status.state != watch.state
        if changed:
            notice = watch.change(monitor.status.state, monitor.status.error)
            if notice is not None:
                self.notify(
                    notice.message,
                    title=notice.title,
                    severity=notice.severity,
                    timeout=notice.timeout,
                )
            self.refresh_bindings()
        if changed or (monitor.latest is not None and self.sections[i].shown is None):
            self.call_later(self.refresh_dashboard, {i})

    def _tick(self) -> None:
        if terminal_gone(self._tty):
            self._on_hangup()  # no SIGHUP came (nohup, a wrapper), but the terminal is gone
            return
        self.refresh_dashboard(rows_of=set(self._dirty))

    # --- drawing -------------------------------------------------------------------------
    def refresh_dashboard(
        self, hosts: set[int] | None = None, *, rows_of: set[int] | None = None
    ) -> None:
        """Bring the sections (all, or ``hosts``) and an open detail view up to date.

        Headers always (ages move); rows of every section, or with ``rows_of`` only of
        those hosts (the timer passes the ones with news; stale marks are kept right).
        """
        if not self._mounted:
            return
        self.row_height = self._row_height()
        with self.batch_update():
            for i, section in enumerate(self.sections):
                if hosts is not None and i not in hosts:
                    continue
                rows = rows_of is None or i in rows_of
                if rows:
                    self._dirty.discard(i)
                section.refresh_view(self._view_context(i), rows=rows)
            if self.cursor is None and any(s.gpus for s in self.sections):
                self._move_cursor(0)
            if isinstance(self.screen, DetailScreen):
                self.screen.refresh_view()

    def _view_context(self, i: int) -> ViewContext:
        cursor = self.cursor[1] if self.cursor and self.cursor[0] == i else None
        return ViewContext(
            now=self.monitors[i].clock(),
            paused=self.paused,
            palette=self.palette,
            spark_memory=self.spark_memory,
            row_height=self.row_height,
            cursor=cursor,
        )

    def shown_sample(self, monitor: HostMonitor) -> HostSample | None:
        """The sample the dashboard shows for ``monitor`` (frozen while paused)."""
        return self.sections[self.monitors.index(monitor)].shown

    # --- cursor --------------------------------------------------------------------------
    def _positions(self) -> list[tuple[int, int]]:
        return [(i, p) for i, s in enumerate(self.sections) for p in range(len(s.gpus))]

    def _move_cursor(self, delta: int) -> None:
        positions = self._positions()
        if not positions:
            return
        at = positions.index(self.cursor) + delta if self.cursor in positions else 0
        new = positions[min(max(at, 0), len(positions) - 1)]
        old, self.cursor = self.cursor, new
        if old == new:
            return
        touched = {new[0]} | ({old[0]} if old else set())
        self.refresh_dashboard(touched)
        section = self.sections[new[0]]
        if new[1] < len(section.rows):
            section.rows[new[1]].scroll_visible(animate=False)
        if isinstance(self.screen, DetailScreen) and (target := self._cursor_target()):
            self.screen.show_gpu(target)
        self.refresh_bindings()

    def _cursor_target(self) -> DetailTarget | None:
        if self.cursor is None:
            return None
        i, pos = self.cursor
        gpus = self.sections[i].gpus
        if pos >= len(gpus):
            return None
        return DetailTarget(self.monitors[i], gpus[pos].index)

    def _cursor_monitor(self) -> HostMonitor | None:
        if self.cursor is not None:
            return self.monitors[self.cursor[0]]
        return self.monitors[0] if self.monitors else None

    def on_gpu_row_selected(self, message: GpuRow.Selected) -> None:
        host = next((i for i, s in enumerate(self.sections) if message.row in s.rows), None)
        if host is None:
            return
        target = (host, self.sections[host].rows.index(message.row))
        positions = self._positions()
        if target in positions:
            cur = positions.index(self.cursor) if self.cursor in positions else 0
            self._move_cursor(positions.index(target) - cur)
        if message.open_detail:
            self.action_open_detail()

    # --- actions -------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        in_detail = isinstance(self.screen, DetailScreen)
        if action == "toggle_spark" and in_detail:
            return False  # no sparklines there
        if action == "open_detail":
            if in_detail:
                return False
            return True if self._cursor_target() is not None else None
        if action in ("faster", "slower"):
            m = self._cursor_monitor()
            if m is None or m.status.state != ConnState.CONNECTED:
                return None
            return True if self._next_interval(action == "faster") is not None else None
        return True

    def action_cursor(self, delta: int) -> None:
        self._move_cursor(delta)

    def action_open_detail(self) -> None:
        target = self._cursor_target()
        if target is None or isinstance(self.screen, DetailScreen):
            return
        self.push_screen(
            DetailScreen(target, sample_of=self.shown_sample, palette_of=lambda: self.palette)
        )
        self.refresh_bindings()
        self.call_after_refresh(self.refresh_dashboard)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        rows = help_rows(
            [
                ("Dashboard", self.BINDINGS),
                ("Detail view", DetailScreen.BINDINGS),
                ("Anywhere", [Binding("ctrl+p", "command_palette", "Command palette")]),
            ]
        )
        self.push_screen(HelpScreen(rows))

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_dashboard()

    def _next_interval(self, faster: bool) -> float | None:
        m = self._cursor_monitor()
        if m is None:
            return None
        cur = m.interval
        if faster:
            options = [x for x in INTERVALS if x < cur - 1e-9]
            return max(options) if options else None
        options = [x for x in INTERVALS if x > cur + 1e-9]
        return min(options) if options else None

    def _change_interval(self, faster: bool) -> None:
        new = self._next_interval(faster)
        if new is None:
            return
        for m in self.monitors:
            m.set_interval(new)
        self._retime()
        self.refresh_bindings()
        self.refresh_dashboard()

    def action_faster(self) -> None:
        self._change_interval(faster=True)

    def action_slower(self) -> None:
        self._change_interval(faster=False)

    def action_cycle_theme(self) -> None:
        order = theme_order(self.available_themes)
        at = order.index(self.theme) if self.theme in order else -1
        self.theme = order[(at + 1) % len(order)]

    def action_set_theme(self, name: str) -> None:
        if name in self.available_themes:
            self.theme = name

    def watch_theme(self, name: str) -> None:
        self.palette = Palette.from_theme(self.current_theme)
        if self._mounted:
            remember_theme(name)
            self.notify(f"Theme: {name}", timeout=2)
            self.refresh_dashboard()

    def action_toggle_spark(self) -> None:
        self.spark_memory = not self.spark_memory
        self.refresh_dashboard()


def run_dashboard(
    hosts: Sequence[HostConfig],
    *,
    sim: SimSettings | None = None,
    theme: str | None = None,
    read_only: bool = False,
    interval: float | None = None,
) -> int:
    """Run the dashboard on ``hosts`` until the user quits; returns the exit status."""
    from gpumon.backends.connect import make_monitor

    if interval is not None:
        hosts = [replace(h, interval=interval) for h in hosts]
    monitors = [make_monitor(h, sim) for h in hosts]
    app = GpumonApp(monitors, theme=theme, read_only=read_only)
    app.run()
    return app.return_code or 0
