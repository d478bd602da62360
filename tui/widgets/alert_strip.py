"""The alert strip: one line above the footer with the alert that matters most now.

It shows the newest unacknowledged critical alert (else the newest unacknowledged
warning): severity, time, host, GPU, job and the message on one line, and how many more
there are, and the key to the incident's fix (``r restart drafter``) when ``r`` would act
on the alert's job. With nothing unacknowledged it is hidden, not an empty line.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.tui.views import (
    SEVERITY_GLYPH,
    Palette,
    Role,
    alert_message,
    alert_where,
    clock_time,
    health_role,
)
from gpumon.tui.widgets.view_widget import ViewWidget


@dataclass(frozen=True, slots=True)
class StripView:
    alert: Alert
    more: int  # other unacknowledged alerts
    palette: Palette
    fix: str = ""  # the key to the incident's fix, "r restart drafter" ("": none)


def render_strip(view: StripView, width: int) -> Text:
    """The strip's line (pure: tests read it)."""
    a, pal = view.alert, view.palette
    role = health_role(a.severity)
    label = "CRITICAL" if a.severity is Health.CRITICAL else "WARNING"
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f" {SEVERITY_GLYPH.get(a.severity, '!')} {label} ", pal.badge(role))
    line.append(f" {clock_time(a.time)} ", pal.text(Role.MUTED))
    line.append(alert_where(a), Style(bold=True))
    line.append("  ")
    tail = Text()
    if view.fix:  # the fix and the count always fit: the message gives way
        tail.append(f"  {view.fix}", Style(bold=True))
    tail.append(f"  +{view.more} more, a: list" if view.more else "  a: list", pal.text(Role.MUTED))
    room = max(width - line.cell_len - tail.cell_len, 0)
    message = Text(alert_message(a), pal.text(role))
    message.truncate(room, overflow="ellipsis")
    line.append_text(message)
    if line.cell_len + tail.cell_len <= width:
        line.append_text(tail)
    line.truncate(width, overflow="ellipsis")
    return line


class AlertStrip(ViewWidget[StripView]):
    """``show(view)`` updates the strip; ``show(None)`` hides it."""

    DEFAULT_CSS = """
    AlertStrip { height: 1; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False

    def view_changed(self, old: StripView | None) -> None:
        self.display = self.view is not None

    def render_view(self, view: StripView, width: int) -> Text:
        return render_strip(view, width)
