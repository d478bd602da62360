"""The alert strip: one line above the footer with the incident that matters most now.

It shows the most urgent unacknowledged incident (``incidents()``: the alerts of one job or
GPU, cause first): severity, time, host and the incident's headline with its fixes
("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201
jupyter-lab) — K stop jupyter-lab, r restart drafter": ``screen_fixes``, the keys that can
act on it now and the advice), how much evidence is folded under it and how many other
incidents there are. When the line is short the time goes first, then the host, then the
severity's word (its glyph stays), then the counts shrink to "(+N)", then the advice
after a key (the keys go last: they are what to press), then the job's name leaves the
headline when the fix names it ("— r restart drafter") and the counts go; then the
headline is cut, never the fix's keys and words nor the list key ("a: list"): at 80
columns "✖  CUDA OOM on GPU 6 (tried 2… — K stop jupyter-lab, r restart drafter  a: list".
With nothing unacknowledged it is hidden, not an empty line.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from gpumon.backends.alerts.incident import Fix, Incident
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable
from gpumon.tui.views import SEVERITY_GLYPH, Palette, Role, clock_time, health_role
from gpumon.tui.views.alert_cells import MIN_CUT, fix_forms
from gpumon.tui.widgets.view_widget import ViewWidget


@dataclass(frozen=True, slots=True)
class StripView:
    incident: Incident
    more: int  # other unacknowledged incidents
    palette: Palette
    # The incident's fixes the screen offers now, the best first (a key that cannot act on
    # it now is left out: read-only, another job under the cursor); None: all of them.
    fixes: tuple[Fix, ...] | None = None

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
    fixes = list(incident.fixes if view.fixes is None else view.fixes)
    headline = _one_line(incident.headline)
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
    # Then the headline gives way, never the fix's words: the fixes get shorter (advice
    # goes, then an advice's reason), and the job's name is said once, in the fix ("— r
    # restart drafter" says whose): the first that leaves the whole headline room; else the
    # first that leaves room for its core (the headline without its last clause, "; 6.0 GiB
    # held by CT 201 jupyter-lab", which the fix "K stop jupyter-lab" and the GPU row still
    # say); else its core alone; else the headline is cut, from MIN_CUT characters on,
    # before the keys and their words are ("K stop jupyter-lab, r restart drafter": what to
    # press and what it does; issue 36). Only where even that leaves no room do the keys
    # keep just their verbs ("K stop jupyter-lab, r restart": K keeps its target; then "K
    # stop, r restart"), and below that the headline keeps MIN_HEADLINE.
    job = printable(incident.job) if incident.job else ""
    parts = incident.said
    short = _one_line(parts.what) if parts.job and parts.job == incident.job else ""
    core = _one_line(parts.core)
    Layout = tuple[str, bool, bool, str, str]

    def layouts(fix: str) -> list[Layout]:
        if short and fix.endswith(f" {job}"):
            return [
                *options,
                (bare, False, False, short, tail_short),
                (bare, False, False, short, tail_bare),
            ]
        return options

    def cores(fix: str) -> list[Layout]:
        if core == headline:
            return []
        out = [(bare, False, False, core, tail_short), (bare, False, False, core, tail_bare)]
        if short:
            out.append((bare, False, False, core.removeprefix(f"{job}: "), tail_bare))
        return out

    def fits(fix: str, option: Layout, said: int) -> bool:
        return _head(option, host) + said + len(fix) + len(option[4]) <= width

    def whole(choices: list[str]) -> tuple[str, Layout] | None:
        """The first fix and layout that say the whole headline, or its core."""
        return (
            next(((f, o) for f in choices for o in layouts(f) if fits(f, o, len(o[3]))), None)
            or next(
                (
                    (f, o)
                    for f in choices
                    for o in layouts(f)
                    if len(core) < len(o[3]) and fits(f, o, len(core))
                ),
                None,
            )
            or next(((f, o) for f in choices for o in cores(f) if fits(f, o, len(o[3]))), None)
        )

    def cut(fix: str, least: int) -> tuple[str, Layout] | None:
        """``fix`` on the barest layout, when it leaves the headline ``least`` characters:
        the cause's first words, without the job's name where a cut line has no room for
        it (the fix "K stop jupyter-lab, r restart" does not say it either)."""
        option = (cores(fix) or layouts(fix))[-1]
        return (fix, option) if fits(fix, option, min(len(option[3]), least)) else None

    worded, terse = fix_forms(fixes, job)
    forms = (worded, *([f] for f in terse))  # the worded ones, then each last resort
    found = (c for said in forms for c in (whole(said), cut(said[-1], MIN_CUT)) if c)
    chosen = next(found, None)
    if chosen is None:
        last = (terse or worded)[-1]
        barest = (cores(last) or layouts(last))[-1]
        chosen = cut(last, min(len(headline), MIN_HEADLINE)) or (last, barest)
    fix, (badge, with_time, with_host, said, tail) = chosen
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


MIN_HEADLINE = 60  # the last resort keeps this much of the headline


def _one_line(text: str) -> str:
    return printable(" ".join(text.split()))


def _head(option: tuple[str, bool, bool, str, str], host: str) -> int:
    """The width before the headline: the badge, " 14:32:07 " or " ", the host and two
    spaces."""
    badge, with_time, with_host, _, _ = option
    return len(badge) + (10 if with_time else 1) + (len(host) + 2 if with_host else 0)


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
