"""An incident's detail over the alert history (Enter on a row): the full headline, each
alert's first / peak / now messages with their times, the lines that raised them, the fix
and the flight recording (``views.alert_detail``). It scrolls (↑ ↓ PgUp PgDn) and fits
80x24; Esc closes it."""

from __future__ import annotations

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

    def __init__(self, view: DetailView, palette: Palette) -> None:
        super().__init__(id="alert-detail")
        self.view = view
        self.rows = detail_rows(view)
        self.palette = palette

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

    @property
    def plain(self) -> str:
        """The detail's lines, unwrapped (tests read it)."""
        return detail_plain(self.rows)
