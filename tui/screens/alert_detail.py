"""An incident's detail over the alert history (Enter on a row): the full headline, each
alert's first / peak / now messages with their times, the lines that raised them, the fix
and the flight recording (``views.alert_detail``), kept up to date while it is open. It
scrolls (↑ ↓ PgUp PgDn) and fits 80x24; Esc closes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpumon.backends.alerts.incident import Incident
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.views import Palette
from gpumon.tui.views.alert_detail import (
    DetailView,
    detail_plain,
    detail_renderable,
    detail_rows,
)


def detail_view(monitor: HostMonitor, incident: Incident) -> DetailView:
    """What the detail of ``incident`` (an incident of ``monitor``'s host) shows now."""
    store = monitor.alerts
    sources = {a.key: store.source_lines(a.key) for a in incident.alerts}
    recording = None
    for alert in sorted(incident.alerts, key=lambda a: a.time):
        found = monitor.recorder.recording_of(alert.time)
        if found is not None:
            recording = (str(found[0]), found[1])
            break
    return DetailView(incident, monitor.clock(), sources, recording)


class AlertDetailScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Close", tooltip="Back to the alert history"),
    ]
    DEFAULT_CSS = """
    AlertDetailScreen { align: center middle; }
    #alert-detail-box {
        width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(
        self,
        view: DetailView,
        palette: Palette,
        *,
        follow: Callable[[], DetailView | None] | None = None,
    ) -> None:
        """``follow()``: the incident's view now (None: it is no longer found, the last
        view stays); the dashboard calls ``refresh_view`` after each change of its hosts."""
        super().__init__(id="alert-detail")
        self.view = view
        self.rows = detail_rows(view)
        self.palette = palette
        self.follow = follow

    def compose(self) -> ComposeResult:
        box = VerticalScroll(id="alert-detail-box")
        box.border_title = "Incident"
        box.border_subtitle = "↑↓ scroll  Esc closes"
        with box:
            yield Static(
                detail_renderable(self.rows, self.palette), id="alert-detail-text", markup=False
            )

    def on_mount(self) -> None:
        self.query_one("#alert-detail-box").focus()

    def refresh_view(self) -> bool:
        """Show the incident as it is now (a memory warning the OOM made critical, its
        "now" messages, an end); returns whether anything changed. The scroll position
        stays."""
        view = self.follow() if self.follow is not None else None
        if view is None:
            return False
        rows = detail_rows(view)
        if rows == self.rows:
            return False
        self.view, self.rows = view, rows
        text = self.query("#alert-detail-text").first(Static)
        text.update(detail_renderable(rows, self.palette))
        return True

    @property
    def plain(self) -> str:
        """The detail's lines, unwrapped (tests read it)."""
        return detail_plain(self.rows)
