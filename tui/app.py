"""The gpumon app: the monitors, the theme, the dashboard screen, and the keys that work
on every screen (quit, help, theme, the command palette).

Monitors are injected, not yet started (tests pass ones with a frozen clock), into the
app's ``Runtime`` (``backends.runtime``: its own unless one is passed in), which wires them
to its ``Session`` (the runs the keys start, every monitor's jobs watched) and its hub
(alerts delivered as ``gpumon watch`` delivers them); the app starts the runtime while the
screen is set up and stops it on exit. What the monitors show, and the keys that act on
it, are the dashboard's (``gpumon.tui.dashboard``): its screen is the app's default
screen, and every key, palette entry and help line comes from its action table.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.notifications import SeverityLevel
from textual.screen import Screen

from gpumon.backends.actions import Session
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.paths import state_dir
from gpumon.backends.runtime import Runtime
from gpumon.themes import (
    GPUMON_THEMES,
    STYLESHEET,
    choose_theme,
    severity_variables,
    theme_order,
)
from gpumon.tui.dashboard import DashboardScreen, GpumonCommands, bindings
from gpumon.tui.hangup import hangup_safe, terminal_fd, terminal_gone
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen, HelpScreen, help_rows
from gpumon.tui.state import remember_theme, remembered_theme
from gpumon.tui.textual_fixes import cache_inner_outer_by_colour, clamp_timer_intervals
from gpumon.tui.views import Palette

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpumon.backends.config import HostConfig
    from gpumon.backends.config.notify import NotifySettings
    from gpumon.backends.config.usage import UsageSettings
    from gpumon.backends.notify.hub import NotifyHub
    from gpumon.backends.sim import SimSettings


def screenshots_dir() -> Path:
    """Where the palette's Screenshot writes its SVGs: ``$XDG_STATE_HOME/gpumon/screenshots``."""
    return state_dir() / "screenshots"


TERMINAL_CHECK_S = 1.0  # how often to look for a terminal that went away without a SIGHUP


class GpumonApp(App[int], inherit_bindings=False):
    TITLE = "gpumon"
    CSS_PATH = STYLESHEET
    COMMANDS: ClassVar = App.COMMANDS | {GpumonCommands}
    # Textual's own (ctrl+q; hidden) but Ctrl+C quits as in htop and k9s (Textual's only
    # says how to quit), then the app's from the action table.
    BINDINGS: ClassVar[list[BindingType]] = [
        *(b for b in App.BINDINGS if not (isinstance(b, Binding) and b.key == "ctrl+c")),
        Binding("ctrl+c", "quit", "Quit", show=False, tooltip="Quit gpumon"),
        *bindings("app"),
    ]

    def __init__(
        self,
        monitors: Sequence[HostMonitor],
        *,
        theme: str | None = None,
        read_only: bool = False,
        bell: bool = True,
        session: Session | None = None,
        hub: NotifyHub | None = None,
        runtime: Runtime | None = None,
        notes: Sequence[str] = (),
        usage: UsageSettings | None = None,
    ) -> None:
        super().__init__()
        cache_inner_outer_by_colour()  # no widget's render cache outlives it (textual_fixes)
        clamp_timer_intervals()  # a toast mounted after its notification expired (the same)
        self._mounted = False
        self._notes = tuple(notes)  # warnings from before the start (a config the demo skipped)
        self.runtime = runtime if runtime is not None else Runtime(session=session, hub=hub)
        for monitor in monitors:
            self.runtime.adopt(monitor)
        self._starting: asyncio.Task[None] | None = None
        for t in GPUMON_THEMES:
            self.register_theme(t)
        name, self._theme_problem = choose_theme(
            theme, remembered_theme(), list(self.available_themes)
        )
        self.theme = name
        self._save_theme = theme is not None and self._theme_problem is None
        self.palette = Palette.from_theme(self.current_theme)
        self.dashboard = DashboardScreen(
            self.monitors,
            palette_of=lambda: self.palette,
            read_only=read_only,
            bell=bell,
            session=self.session,
        )
        if usage is not None:
            self.dashboard.actions.usage_settings = usage
        self._tty: int | None = None

    @property
    def monitors(self) -> list[HostMonitor]:
        """The monitors on show (the runtime's)."""
        return self.runtime.monitors

    @property
    def session(self) -> Session:
        """The runs the keys start, and every monitor's jobs watched (the runtime's)."""
        return self.runtime.session

    @property
    def hub(self) -> NotifyHub | None:
        """Alerts to the [notify.*] notifiers, as ``gpumon watch`` delivers them (the
        runtime's; None: the dashboard does not deliver)."""
        return self.runtime.hub

    # --- lifecycle -----------------------------------------------------------------------
    def get_default_screen(self) -> Screen[None]:
        return self.dashboard

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return severity_variables(self.current_theme)

    def on_load(self) -> None:
        # Connect while Textual sets up the screen: the first frame can show data.
        self.runtime.start_monitors()
        self._starting = asyncio.get_running_loop().create_task(self.runtime.start())

    def on_mount(self) -> None:
        self._mounted = True
        if self._theme_problem:
            self.notify(self._theme_problem, title="Theme", severity="warning", timeout=10)
        for note in self._notes:
            self.notify(note, title="Config", severity="warning", timeout=20)
        if self._save_theme:
            remember_theme(self.theme)
        if not self.is_headless:
            if self.hub is not None:
                self.hub.terminal = self._write_terminal
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop = asyncio.get_running_loop()
                loop.add_signal_handler(signal.SIGHUP, self._on_hangup)
                # SIGTERM leaves like q: monitors stopped, the demo's job and its folder gone
                loop.add_signal_handler(signal.SIGTERM, self.exit, 0)
            self._tty = terminal_fd()
            if self._tty is not None:
                self.set_interval(TERMINAL_CHECK_S, self._check_terminal, name="terminal")

    async def on_unmount(self) -> None:
        self._mounted = False
        if not self.is_headless:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                for signum in (signal.SIGHUP, signal.SIGTERM):
                    asyncio.get_running_loop().remove_signal_handler(signum)
        await self.runtime.stop()

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

    def _write_terminal(self, data: bytes) -> None:
        """A ``terminal`` notifier's sequences, through the driver's writer: between
        frames, never inside one."""
        driver = self._driver
        if driver is not None:
            driver.write(data.decode())

    def get_driver_class(self) -> type[Driver]:
        return hangup_safe(super().get_driver_class())

    def _on_hangup(self) -> None:
        """The terminal went away: stop drawing and leave quietly."""
        driver = self.driver_class
        if hasattr(driver, "gone"):
            driver.gone = True
        self.exit(0)

    def _check_terminal(self) -> None:
        if terminal_gone(self._tty):
            self._on_hangup()  # no SIGHUP came (nohup, a wrapper), but the terminal is gone

    def on_resize(self) -> None:
        self.call_after_refresh(self.dashboard.refresh_dashboard)

    # --- the palette's system commands ----------------------------------------------------
    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Textual's, with its Screenshot (which hands the file to the terminal, where it
        gets lost) replaced by one that writes the SVG to gpumon's state dir and says where."""
        for command in super().get_system_commands(screen):
            if command.title == "Screenshot":
                yield SystemCommand(
                    "Screenshot",
                    f"Save an SVG of the screen in {screenshots_dir()}",
                    lambda: self.set_timer(0.1, self.action_save_screenshot),
                )
            else:
                yield command

    def action_save_screenshot(self) -> None:
        """Write an SVG of the screen on show; a notification names the file (or the error)."""
        folder = screenshots_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = self.save_screenshot(path=str(folder))
        except OSError as e:
            self.notify(f"screenshot not saved: {e}", title="Screenshot", severity="error")
            return
        self.notify(f"saved {path}", title="Screenshot", timeout=6)

    # --- the app's own keys --------------------------------------------------------------
    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        rows = help_rows(
            [
                ("Dashboard", DashboardScreen.BINDINGS),
                ("Detail view", DetailScreen.BINDINGS),
                ("Alert history", AlertHistoryScreen.BINDINGS),
                (
                    "Anywhere",
                    [
                        Binding("ctrl+p", "command_palette", "Command palette"),
                        Binding("ctrl+c", "quit", "Quit gpumon"),
                    ],
                ),
            ]
        )
        self.push_screen(HelpScreen(rows))

    def action_cycle_theme(self) -> None:
        """``t``: gpumon's own themes in turn (the palette offers every theme); from a
        theme chosen there, back to gpumon's first."""
        own = [t.name for t in GPUMON_THEMES if t.name in self.available_themes]
        order = own or theme_order(self.available_themes)
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
            self.dashboard.refresh_dashboard()


def run_dashboard(
    hosts: Sequence[HostConfig],
    *,
    sim: SimSettings | Callable[[], SimSettings] | None = None,
    theme: str | None = None,
    read_only: bool = False,
    interval: float | None = None,
    bell: bool = True,
    notify: NotifySettings | None = None,
    notes: Sequence[str] = (),
    usage: UsageSettings | None = None,
) -> int:
    """Run the dashboard on ``hosts`` until the user quits; returns the exit status.
    With ``notify`` notifiers, alerts are delivered as ``gpumon watch`` delivers them
    (``runtime.dashboard_hub``: "auto" only while no watch runs, "always", "never").
    ``notes`` are shown as warnings once the screen is up; ``usage``: the config's
    ``[usage]`` (``u``'s cost)."""
    runtime = Runtime.for_dashboard(hosts, sim=sim, interval=interval, notify=notify, usage=usage)
    app = GpumonApp(
        runtime.monitors,
        theme=theme,
        read_only=read_only,
        bell=bell,
        runtime=runtime,
        notes=notes,
        usage=usage,
    )
    return run_app(app)


def run_app(app: GpumonApp) -> int:
    """Run ``app`` (live or a replay) until the user quits; returns the exit status."""
    app.run()
    return app.return_code or 0
