"""The alert strip: one line above the footer with the incident that matters most now.

It shows the most urgent unacknowledged incident (``incidents()``: the alerts of one job or
GPU, cause first): severity, time, host and the incident's headline with its fix
("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free) — r restart drafter", the
key to the fix when ``r`` would act on the incident's job), how much
evidence is folded under it and how many other incidents there are. When the line is
short the time goes first, then the host, then the severity's word (its glyph stays),
then the counts shrink to "(+N)", then the job's name leaves the headline when the fix
names it ("— r restart drafter") and the counts go, so that at 80 columns the key
numbers stay; last the headline is cut before the fix and the list key ("a: list") are.
With
nothing unacknowledged it is hidden, not an empty line.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from gpumon.backends.alerts.incident import Incident
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable
from gpumon.tui.views import SEVERITY_GLYPH, Palette, Role, clock_time, health_role
from gpumon.tui.views.alert_cells import FIX_HINT
from gpumon.tui.widgets.view_widget import ViewWidget


@dataclass(frozen=True, slots=True)
class StripView:
    incident: Incident
    more: int  # other unacknowledged incidents
    palette: Palette
    # The key to the incident's fix as the screen offers it ("r restart drafter"; "": none,
    # ``r`` cannot act on it now); None: the plain hint when the incident has a fix.
    fix: str | None = None

    @property
    def alert(self) -> Alert:
        """The incident's cause (the alert its headline comes from)."""
        return self.incident.cause


def render_strip(view: StripView, width: int) -> Text:
    """The strip's line (pure: tests read it)."""
    incident, pal = view.incident, view.palette
    role = health_role(incident.severity)
    label = "CRITICAL" if incident.severity is Health.CRITICAL else "WARNING"
    glyph = SEVERITY_GLYPH.get(incident.severity, "!")
    if view.fix is None:
        fix = f" — {FIX_HINT}" if incident.fix else ""
    else:
        fix = f" — {view.fix}" if view.fix else ""
    headline = printable(" ".join(incident.headline.split()))
    folded = [f"+{len(incident.evidence)} evidence"] if incident.evidence else []
    if view.more:
        folded.append(f"+{view.more} more")
    tail_full = "  " + ", ".join([*folded, "a: list"])
    count = len(incident.evidence) + view.more
    tail_bare = "  a: list"  # the key always shows
    tail_short = f"  (+{count}) a: list" if count else tail_bare
    host = printable(incident.host)
    wide, bare = f" {glyph} {label} ", f" {glyph} "
    # (badge, time, host, headline, tail) from the richest to the barest; the first that
    # leaves the whole headline room wins, else the barest one and its headline is cut.
    options = [
        (wide, True, True, headline, tail_full),
        (wide, False, True, headline, tail_full),
        (wide, False, False, headline, tail_full),
        (bare, False, False, headline, tail_full),
        (bare, False, False, headline, tail_short),
    ]
    # Then the job's name once, in the fix ("— r restart drafter" says whose), and the
    # counts, so that the key numbers ("tried 2.00 GiB, 90 MiB free") stay at 80 columns.
    job = printable(incident.job) if incident.job else ""
    if job and fix.endswith(f" {job}") and headline.startswith(f"{job}: "):
        short = headline.removeprefix(f"{job}: ")
        options += [(bare, False, False, short, tail_short), (bare, False, False, short, tail_bare)]
    for badge, with_time, with_host, said, tail in options:
        head = len(badge) + (11 if with_time else 0) + (len(host) + 2 if with_host else 1)
        if head + len(said) + len(fix) + len(tail) <= width:
            break
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(badge, pal.badge(role))
    if with_time:
        line.append(f" {clock_time(incident.cause.time)} ", pal.text(Role.MUTED))
    else:
        line.append(" ")
    if with_host:
        line.append(host, Style(bold=True))
        line.append("  ")
    room = max(width - line.cell_len - len(fix) - len(tail), 0)
    message = Text(said, pal.text(role))
    message.truncate(room, overflow="ellipsis")
    line.append_text(message)
    if fix and line.cell_len + len(fix) <= width:
        line.append(fix, Style(bold=True))
    if tail and line.cell_len + len(tail) <= width:
        line.append(tail, pal.text(Role.MUTED))
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
