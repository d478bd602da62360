"""The dashboard app: one section per host (GPU rows, SGLang and jobs panes), the alert
strip, keys as actions, one refresh timer.

Monitors are injected, not yet started (tests pass ones with a frozen clock); the app
starts them on mount and stops them on exit. Monitor listeners only mark a host dirty
(and react at once to a change of connection state); a timer at about 1 Hz redraws what
changed, batched. Alerts (``app_alerts``), the replay (``app_replay``) and the keys that
act on a machine (``actions``) live in mixins.
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
from textual.notifications import SeverityLevel
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
from gpumon.tui.dashboard import (
    HOST_ACTIONS,
    ActionCommands,
    ActionsMixin,
    AlertsMixin,
    ConnectionWatch,
    CursorMixin,
    GpumonCommands,
    ReplayMixin,
    dashboard_keys,
    plan_layout,
)
from gpumon.tui.hangup import hangup_safe, terminal_fd, terminal_gone
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen, HelpScreen, help_rows
from gpumon.tui.state import remember_theme, remembered_theme
from gpumon.tui.views import Palette
from gpumon.tui.widgets import HostSection, ViewContext, plotext

if TYPE_CHECKING:
    from gpumon.backends.config import HostConfig
    from gpumon.backends.sim import SimSettings

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
TICK_S = 1.0
ON_ALERT_SCREEN = frozenset(
    {"quit", "help", "pop_screen", "command_palette", "cycle_theme", "set_theme"}
)


class HostList(VerticalScroll, can_focus=False):
    """The scrolling column of host sections (never takes focus: keys go to the app)."""


class GpumonApp(
    ActionsMixin, AlertsMixin, ReplayMixin, CursorMixin, App[int], inherit_bindings=False
):
    TITLE = "gpumon"
    CSS_PATH = STYLESHEET
    COMMANDS: ClassVar = App.COMMANDS | {GpumonCommands, ActionCommands}
    # Not inherited: ``dashboard_keys`` lists every key once, in footer order.
    BINDINGS: ClassVar[list[BindingType]] = dashboard_keys(ActionsMixin.BINDINGS)

    def __init__(
        self,
        monitors: Sequence[HostMonitor],
        *,
        theme: str | None = None,
        read_only: bool = False,
        bell: bool = True,
    ) -> None:
        super().__init__()
        self._mounted = False
        self.monitors = list(monitors)
        self.read_only = read_only
        self.bell_enabled = bell and self.replay is None  # a replay does not ring
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
        self.cursor: tuple[int, int] | None = None  # (host, row): GPU rows, then job rows
        self.row_height = 1
        self._dirty: set[int] = set()  # hosts with news since their rows were drawn
        self._watches = [ConnectionWatch(m.name, m.status.state) for m in self.monitors]
        self._timer: Timer | None = None
        self._tty: int | None = None
        self.listen_to_alerts()

    # --- lifecycle -----------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HostList(*self.sections, id="hosts")
        yield self.strip
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
        self.announce_early_alerts()
        # Load plotext off the event loop, before anyone opens a detail view.
        self.set_timer(2.0, lambda: self.run_worker(plotext, thread=True, group="warm-up"))
        if not self.is_headless:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_hangup)
            self._tty = terminal_fd()
        self.refresh_dashboard()
        self.call_after_refresh(self.refresh_bindings)  # a no-op until mounted: now it is

    async def on_unmount(self) -> None:
        self._mounted = False  # monitors report "stopped" below; nothing to draw it on
        if self._timer is not None:
            self._timer.stop()
        if not self.is_headless:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await asyncio.gather(*(m.stop() for m in self.monitors), return_exceptions=True)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every notification is plain text: toasts quote alert messages, log lines and
        tool errors from the watched machine, and Textual markup in them (``[@click=…]``,
        ``[link=…]``, an unbalanced ``[/]``) would act on the operator's terminal or crash
        the render. ``markup`` is accepted for Textual's signature and ignored."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

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

    def _retime(self) -> None:
        """One timer, about 1 Hz, faster when a host samples (or a replay plays) faster."""
        fastest = min((m.interval for m in self.monitors), default=1.0)
        if self.replay is not None:
            fastest /= self.replay.speed
        period = min(TICK_S, max(0.25, fastest))
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
            if notice is not None and self.replay is None:
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
        """Bring the sections (all, or ``hosts``), the strip and an open detail or alert
        view up to date.

        Headers always (ages move); rows of every section, or with ``rows_of`` only of
        those hosts (the timer passes the ones with news; stale marks are kept right).
        """
        if not self._mounted:
            return
        self.refresh_strip()
        plan = plan_layout(
            self.size.height, [s.needs() for s in self.sections], strip=self.strip.display
        )
        self.row_height = plan.row_height
        with self.batch_update():
            for i, section in enumerate(self.sections):
                if hosts is not None and i not in hosts:
                    continue
                rows = rows_of is None or i in rows_of
                if rows:
                    self._dirty.discard(i)
                ctx = replace(self._view_context(i), max_servers=plan.max_servers[i])
                section.refresh_view(ctx, rows=rows)
            if self.cursor is None and any(s.gpus for s in self.sections):
                self._move_cursor(0)
            self.follow_cursor()
            if isinstance(self.screen, DetailScreen | AlertHistoryScreen):
                self.screen.refresh_view()

    def _view_context(self, i: int) -> ViewContext:
        cursor = job_cursor = None
        if self.cursor and self.cursor[0] == i:
            gpus = len(self.sections[i].gpus)
            pos = self.cursor[1]
            cursor, job_cursor = (pos, None) if pos < gpus else (None, pos - gpus)
        monitor = self.monitors[i]
        return ViewContext(
            now=monitor.clock(),
            paused=self.paused,
            palette=self.palette,
            spark_memory=self.spark_memory,
            row_height=self.row_height,
            cursor=cursor,
            job_cursor=job_cursor,
            replay=self.replay_header(monitor),
        )

    def shown_sample(self, monitor: HostMonitor) -> HostSample | None:
        """The sample the dashboard shows for ``monitor`` (frozen while paused)."""
        return self.sections[self.monitors.index(monitor)].shown

    # --- actions -------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        in_detail = isinstance(self.screen, DetailScreen)
        if isinstance(self.screen, AlertHistoryScreen) and action not in ON_ALERT_SCREEN:
            return False  # its own keys only: the dashboard's act on what is not on show
        replay = self.check_replay_action(action)
        if replay is not True:
            return replay
        if self.replay is not None and action in HOST_ACTIONS:
            return False  # a recording has no machine to act on
        if action == "toggle_spark" and in_detail:
            return False  # no sparklines there
        if action == "open_detail":
            if in_detail:
                return False
            return True if self._cursor_target() is not None else None
        if action in ("faster", "slower"):
            m = self.selected_monitor()
            if m is None or m.status.state != ConnState.CONNECTED:
                return None
            return True if self._next_interval(action == "faster") is not None else None
        return super().check_action(action, parameters)

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
                ("Dashboard", self.dashboard_bindings()),
                ("Detail view", DetailScreen.BINDINGS),
                ("Alert history", AlertHistoryScreen.BINDINGS),
                ("Anywhere", [Binding("ctrl+p", "command_palette", "Command palette")]),
            ]
        )
        self.push_screen(HelpScreen(rows))

    def dashboard_bindings(self) -> list[BindingType]:
        """The dashboard's keys (the action keys included), without Textual's own."""
        return [b for b in self.BINDINGS if b not in App.BINDINGS]

    def action_toggle_pause(self) -> None:
        if self.replay is not None:
            self.toggle_replay_pause(self.replay)
            return
        self.paused = not self.paused
        self.refresh_dashboard()

    def _next_interval(self, faster: bool) -> float | None:
        m = self.selected_monitor()
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
    bell: bool = True,
) -> int:
    """Run the dashboard on ``hosts`` until the user quits; returns the exit status."""
    from gpumon.backends.monitor import make_monitor

    if interval is not None:
        hosts = [replace(h, interval=interval) for h in hosts]
    monitors = [make_monitor(h, sim) for h in hosts]
    return run_app(GpumonApp(monitors, theme=theme, read_only=read_only, bell=bell))


def run_app(app: GpumonApp) -> int:
    """Run ``app`` (live or a replay) until the user quits; returns the exit status."""
    app.run()
    return app.return_code or 0
