"""The alert strip: one line above the footer with the incident that matters most now.

It shows the most urgent unacknowledged incident (``incidents()``: the alerts of one job or
GPU, cause first): severity, time, host and the incident's headline with its fixes
("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201
jupyter-lab) — K stop it, r restart drafter": ``screen_fixes``, the keys that can act on
it now and the advice), how much evidence is folded under it and how many other
incidents there are. When the line is short the time goes first, then the host, then the
severity's word (its glyph stays), then the counts shrink to "(+N)", then the fixes after
the first (the keys go last: they are what to press), then the job's name leaves the
headline when the fix names it ("— r restart drafter") and the counts go, so that at 80
columns the key numbers stay; only then is the headline cut, before the fix and the list
key ("a: list") are. With nothing unacknowledged it is hidden, not an empty line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from gpumon.backends.alerts.incident import Fix, Incident, screen_fix
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable
from gpumon.tui.views import SEVERITY_GLYPH, Palette, Role, clock_time, health_role
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
    # Then the fixes get shorter (advice goes, then the keys' words after the verb), and
    # the job's name is said once, in the fix ("— r restart drafter" says whose), so that
    # the key numbers ("tried 2.00 GiB, 90 MiB free") stay at 80 columns: the first that
    # leaves the whole headline room; else the first that leaves room for its core (the
    # headline without its last clause, "; 6.0 GiB held by CT 201 jupyter-lab", which the
    # fix "K stop it" and the GPU row still say); else its core alone; else the first that
    # leaves it MIN_HEADLINE on the barest layout. The cause matters more than a fix's words.
    job = printable(incident.job) if incident.job else ""
    short = headline.removeprefix(f"{job}: ") if job and headline.startswith(f"{job}: ") else ""
    core = _LAST_CLAUSE.sub(")", headline)
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

    choices = _fix_choices(fixes)
    chosen = (
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
    if chosen is None:
        least = min(len(headline), MIN_HEADLINE)
        fix = next(
            (f for f in choices if fits(f, layouts(f)[-1], least)),
            choices[-1],
        )
        chosen = (fix, layouts(fix)[-1])
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


MIN_HEADLINE = 60  # the strip keeps this much of the headline before a fix's words
_LAST_CLAUSE = re.compile(r"; [^;()]*\)$")  # "(tried ..., 90 MiB free; 6.0 GiB held by ...)"


def _head(option: tuple[str, bool, bool, str, str], host: str) -> int:
    """The width before the headline: the badge, " 14:32:07 " or " ", the host and two
    spaces."""
    badge, with_time, with_host, _, _ = option
    return len(badge) + (10 if with_time else 1) + (len(host) + 2 if with_host else 0)


def _gist(fix: Fix) -> str:
    """Advice without its reason: "reboot the node (the GPU cannot ...)" -> "reboot the node"."""
    return fix.words.split(" (")[0]


def _fix_choices(fixes: list[Fix]) -> list[str]:
    """The fixes as the strip can say them, from the fullest to the barest: all of them
    (" — K stop it, r restart drafter, drain the node"), the keys with their words (advice
    only when no key acts), the keys with their verbs when there are several (" — K stop,
    r restart"; a lone key keeps its words), advice without its reason; "" when there are
    none."""
    if not fixes:
        return [""]
    keyed = [f for f in fixes if f.key] or fixes[:1]
    said = [[screen_fix(f) for f in fixes], [screen_fix(f) for f in keyed]]
    if len(keyed) > 1 or keyed[0].key is None:  # one key keeps its words: "r restart drafter"
        said.append([f"{f.key} {f.words.split()[0]}" if f.key else _gist(f) for f in keyed])
    return [f" — {', '.join(printable(x) for x in words)}" for words in said]


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
