"""Pure functions from alerts to what the dashboard says about them: the header count, the
strip's alert, one-line texts and the history table's cells."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gpumon.backends.alerts.incident import Fix, Incident, line, screen_fix, screen_fixes
from gpumon.backends.alerts.kinds import kind_title
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.monitor.textfit import cells as cells_of
from gpumon.backends.monitor.textfit import cut as cut_text
from gpumon.backends.untrusted import printable as _printable
from gpumon.tui.views.gpu_cells import Cell, Role, alert_count_text, health_role

SEVERITY_GLYPH = {Health.CRITICAL: "✖", Health.WARNING: "▲"}


class AlertCount(NamedTuple):
    """What the header counts: active alerts, how many of them are not yet acknowledged,
    and the role of the worst unacknowledged one (muted once all are seen)."""

    total: int
    new: int
    role: Role

    @property
    def text(self) -> str:
        """ "0 alerts", "1 alert", "2 alerts (1 new)", "2 alerts (seen)"."""
        return alert_count_text(self.total, self.new)


def alert_count(alerts: Sequence[Alert]) -> AlertCount:
    """The header's count of ``alerts`` (active ones count; acknowledged ones are "seen",
    and so are notes: nothing to act on)."""
    active = [a for a in alerts if a.active]
    new = [a for a in active if not a.acknowledged and a.severity.alarming]
    if not new:
        return AlertCount(len(active), 0, Role.MUTED)
    return AlertCount(len(active), len(new), health_role(Health.worst(*(a.severity for a in new))))


def strip_alert(alerts: Iterable[Alert]) -> tuple[Alert | None, int]:
    """The alert the strip shows, and how many other unacknowledged active alerts there are.

    The newest unacknowledged critical alert; when there is none, the newest unacknowledged
    warning (a time-to-full warning is the OOM coming: worth the line). None when nothing
    is unacknowledged but notes.
    """
    new = [a for a in alerts if a.active and not a.acknowledged and a.severity.alarming]
    if not new:
        return None, 0
    top = max(new, key=lambda a: (a.severity.rank, a.time, a.last_seen))
    return top, len(new) - 1


def strip_incident(found: Sequence[Incident]) -> tuple[Incident | None, int]:
    """The incident the strip shows, and how many other unacknowledged active incidents
    there are: the first active one not yet acknowledged (``incidents()`` puts the most
    urgent first: critical before warning, then the newest). None when nothing is new but
    notes."""
    new = [i for i in found if i.active and not i.acknowledged and i.severity.alarming]
    if not new:
        return None, 0
    return new[0], len(new) - 1


def incident_text(incident: Incident) -> str:
    """The incident's one line on screen: headline and fixes ("drafter: CUDA OOM on GPU 6
    (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab) — K stop
    jupyter-lab, r restart drafter", ``screen_fixes``), control characters made visible.
    The toast, the strip and the history say exactly this."""
    return _printable(" ".join(line(incident, screen_fixes(incident)).split()))


MIN_CUT = 20  # a headline cut shorter than this gives the fix's words way: "CUDA OOM on GPU 6 …"


def gist(fix: Fix) -> str:
    """Advice without its reason: "reboot the node (the GPU cannot ...)" -> "reboot the node"."""
    return fix.words.split(" (")[0]


def fix_forms(fixes: Sequence[Fix], job: str | None = None) -> tuple[list[str], list[str]]:
    """The fixes as a line can say them with their words, from the fullest to the barest:
    all of them (" — K stop jupyter-lab, r restart drafter, drain the node"), the keys
    with their words (advice only when no key acts), an advice without its reason
    ("reboot the node"); and the last resorts where there are several keys, the keys with
    only their verbs: first where their words name the incident's ``job`` (the headline
    says it: " — K stop jupyter-lab, r restart"; ``K`` keeps its target, never to be taken
    for ``s``, stop the job), then all of them (" — K stop, r restart", where nothing
    else leaves the headline room). A lone key keeps its words. [""] when there are none."""
    if not fixes:
        return [""], []
    keyed = [f for f in fixes if f.key] or list(fixes[:1])
    said = [[screen_fix(f) for f in fixes], [screen_fix(f) for f in keyed]]
    if keyed[0].key is None:
        said.append([gist(f) for f in keyed])
    worded = list(dict.fromkeys(f" — {', '.join(_printable(x) for x in words)}" for words in said))
    if len(keyed) < 2:
        return worded, []

    def verb(fix: Fix, *, named: bool) -> str:
        if named and not (job and fix.words.endswith(f" {job}")):
            return screen_fix(fix)  # "K stop jupyter-lab": its target is what it does
        return f"{fix.key} {fix.words.split()[0]}"

    terse = (
        f" — {', '.join(_printable(verb(f, named=named)) for f in keyed)}"
        for named in (True, False)
    )
    return worded, [f for f in dict.fromkeys(terse) if f not in worded]


def wrapped_lines(text: str, width: int) -> int:
    """How many lines ``text`` takes wrapped at spaces into ``width`` columns, as a toast
    wraps it (a word wider than a line is folded)."""
    width = max(width, 1)
    count, used = 1, 0
    for word in text.split(" "):
        size = cells_of(word)
        if used and used + 1 + size <= width:
            used += 1 + size
            continue
        if used:
            count += 1
        folds, used = divmod(size, width)
        if folds and not used:  # exactly full lines: the last one ends the word
            folds, used = folds - 1, width
        count += folds
    return count


TOAST_WIDTH = 60  # Textual's Toast: width 60, max-width 50% of its rack
TOAST_RACK_SCROLLBAR = 2  # the rack scrolls vertically: its scrollbar's columns
TOAST_FRAME = 3  # the toast's left border and one column of padding either side


def toast_text_width(screen_width: int) -> int:
    """The columns of text a toast has on a screen ``screen_width`` wide: 36 at 80, 57
    from 122 on."""
    return max(min(TOAST_WIDTH, (screen_width - TOAST_RACK_SCROLLBAR) // 2) - TOAST_FRAME, 1)


def incident_notice(incident: Incident, width: int, lines: int = 1, prefix: str = "") -> str:
    """``prefix`` and ``incident_text`` in at most ``lines`` lines of ``width`` columns (a
    toast, a history cell): the headline is cut before its fixes are ("drafter: CUDA OOM on
    GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB… — K stop jupyter-lab, r restart
    drafter"), the job's name going first where the fix names it; only where that leaves
    the headline fewer than ``MIN_CUT`` characters (a third of the room on a narrow one)
    do the keys keep just their verbs ("K stop jupyter-lab, r restart", then "K stop, r
    restart"), and below that the whole line is cut."""
    text = prefix + incident_text(incident)

    def fits(said: str) -> bool:
        return cells_of(said) <= width if lines == 1 else wrapped_lines(said, width) <= lines

    if fits(text):
        return text
    headline = _printable(" ".join(incident.headline.split()))
    job = _printable(incident.job) if incident.job else ""
    least = min(MIN_CUT, width * lines // 3)
    worded, terse = fix_forms(incident.fixes, incident.job)
    for fix in [*worded, *terse]:
        if not fix:
            break
        said = headline
        if job and fix.endswith(f" {job}") and said.startswith(f"{job}: "):
            said = said.removeprefix(f"{job}: ")  # "— r restart drafter" says whose
        cut = _cut_before(said, prefix, fix, fits)
        if cut is not None and cells_of(cut) - cells_of(prefix + fix) > least:
            return cut
    return _cut_before(text, "", "", fits) or text[:1] + "…"


def _cut_before(said: str, prefix: str, fix: str, fits: Callable[[str], bool]) -> str | None:
    """``prefix``, the longest start of ``said`` that ``fits`` with "…" and ``fix`` after
    it (None: not even one character)."""

    def line(n: int) -> str:
        return f"{prefix}{said}{fix}" if n >= len(said) else f"{prefix}{said[:n].rstrip()}…{fix}"

    low, high = 0, len(said)  # the largest n whose line fits (fitting ends at some n)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(line(mid)):
            low = mid
        else:
            high = mid - 1
    return line(low) if low else None


def incident_title(incident: Incident) -> str:
    """A notification's title for an incident: its cause's, "CRITICAL: CUDA out of memory",
    at the incident's severity."""
    return f"{incident.severity.value.upper()}: {kind_title(incident.cause.kind)}"


def clock_time(epoch: float) -> str:
    """Local wall-clock time of ``epoch``: "14:32:07"."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def alert_time(epoch: float, now: float) -> str:
    """ "14:32:07" within the last day, else "11-28 14:32"."""
    if abs(now - epoch) < 86400:
        return clock_time(epoch)
    return time.strftime("%m-%d %H:%M", time.localtime(epoch))


def alert_where(alert: Alert) -> str:
    """ "demo GPU 6 drafter": host, GPU and job when known."""
    parts = [_printable(alert.host)]
    if alert.gpu is not None:
        parts.append(f"GPU {alert.gpu}")
    if alert.job:
        parts.append(_printable(alert.job))
    return " ".join(parts)


def alert_message(alert: Alert) -> str:
    """The message on one line, control characters made visible."""
    return alert_text(alert.message)


def alert_state(alert: Alert) -> Cell:
    """ "active", "active, ack" (a silenced condition), "ack" (ended by acknowledging) or
    "ended"."""
    if alert.active:
        if alert.acknowledged:
            return Cell("active ✓ack", Role.MUTED)
        return Cell("active", health_role(alert.severity))
    return Cell("✓ack" if alert.acknowledged else "ended", Role.MUTED)


def history_cells(alert: Alert, now: float) -> tuple[Cell, ...]:
    """The history table's cells of one alert: severity, time, host, GPU, job, state,
    message, now. The severity is the worst it reached and the message what was true when
    it was raised and at its peak ("... · peak ..."); "now" is its current value, only
    while it is active and differs from the peak (an alert that clears is not rewritten
    with the values it had on the way down)."""
    role = health_role(alert.peak) if alert.active and not alert.acknowledged else Role.MUTED
    glyph = SEVERITY_GLYPH.get(alert.peak, " ")
    raised, peak = alert_text(alert.raised_text), alert_text(alert.peak_text)
    message = raised if peak == raised else f"{raised} · peak {peak}"
    current = alert_message(alert)
    return (
        Cell(f"{glyph} {alert.peak.value}", role),
        Cell(alert_time(alert.time, now), Role.NORMAL),
        Cell(_printable(alert.host), Role.NORMAL),
        Cell("" if alert.gpu is None else str(alert.gpu), Role.NORMAL),
        Cell(_printable(alert.job) if alert.job else "", Role.NORMAL),
        alert_state(alert),
        Cell(message, Role.NORMAL if alert.active else Role.MUTED),
        Cell(current if alert.active and current != peak else "", health_role(alert.severity)),
    )


def incident_cells(incident: Incident, now: float) -> tuple[Cell, ...]:
    """The history row of an incident (its evidence follows as ``evidence_cells``): the
    cause's row with the incident's headline and fix as the message, its worst severity.
    Its time is the cause's (when what the headline says happened); an earlier warning
    shows its own time on its evidence row, and the detail says "since ... (first
    warning)"."""
    cause = history_cells(incident.cause, now)
    worst = Health.worst(*(a.peak for a in incident.alerts))
    live = incident.active and not incident.acknowledged
    glyph = SEVERITY_GLYPH.get(worst, " ")
    return (
        Cell(f"{glyph} {worst.value}", health_role(worst) if live else Role.MUTED),
        cause[1],
        cause[2],
        Cell("" if incident.gpu is None else str(incident.gpu), Role.NORMAL),
        Cell(_printable(incident.job) if incident.job else "", Role.NORMAL),
        incident_state(incident),
        Cell(incident_text(incident), Role.NORMAL if incident.active else Role.MUTED),
        cause[7],
    )


def evidence_cells(alert: Alert, now: float) -> tuple[Cell, ...]:
    """An alert folded under its incident's row: its own cells, the severity marked as
    evidence ("└"), muted."""
    cells = history_cells(alert, now)
    first = Cell(f"└ {alert.peak.value}", Role.MUTED)
    return (first, *cells[1:6], Cell(cells[6].text, Role.MUTED), cells[7])


def incident_state(incident: Incident) -> Cell:
    """ "active", "active ✓ack", "ended" for an incident: its cause's state, or "active"
    while any of its alerts is."""
    if incident.cause.active or not incident.active:
        return alert_state(incident.cause)
    live = [a for a in incident.alerts if a.active]
    return alert_state(live[0])


HISTORY_COLUMNS = ("severity", "time", "host", "GPU", "job", "state", "message", "now")
HISTORY_MESSAGE_MIN = 40  # narrower, and the severity says only its glyph, the host goes
HISTORY_NOW_MIN = 12  # "now" gets a third of the room, from this many columns
HISTORY_HEAD_LINES = 2  # an incident's own row wraps its message to this many lines


@dataclass(frozen=True, slots=True)
class HistoryLayout:
    """How the history's columns fit a width: the severity as its glyph alone ("✖", an
    evidence row's "└▲") or in words, the host column or not (one host on a narrow
    screen), and the widths the message and "now" get (their text is cut to them).
    ``fixed``: the width of every other column shown, by title (its widest cell): the
    table is given every width, since a DataTable measures its automatic columns only when
    its app is idle, and a busy app drew them at their titles' width ("17:2" for
    "17:22:52") until then."""

    short_severity: bool
    host: bool
    message: int
    now: int
    fixed: Mapping[str, int] = field(default_factory=dict)

    @property
    def titles(self) -> tuple[str, ...]:
        """The column titles (the short severity has none)."""
        out = [t for t in HISTORY_COLUMNS if self.host or t != "host"]
        return ("", *out[1:]) if self.short_severity else tuple(out)

    def widths(self) -> list[int | None]:
        """Each column's width, in ``titles``' order (None: one ``fixed`` does not name)."""
        said = {**self.fixed, "message": self.message, "now": self.now}
        return [said.get(title) for title in self.titles]

    def row(
        self, cells: Sequence[Cell], incident: Incident | None = None
    ) -> tuple[tuple[Cell, ...], int]:
        """One row's cells (``history_cells``' eight) as this layout shows them, and its
        height: the message of an incident's own row on up to HISTORY_HEAD_LINES lines,
        cut before its fixes (``incident_notice``: the fix's keys and words stay), any
        other message and "now" on one line, cut with "…"."""
        first, *rest = cells
        if self.short_severity:
            first = Cell(short_severity(first.text), first.role)
        out = [first, *rest]
        message, now = out[6], out[7]
        height = 1
        if cells_of(message.text) > self.message:
            if incident is not None:
                text = incident_notice(incident, self.message, HISTORY_HEAD_LINES)
                height = wrapped_lines(text, self.message)
            else:
                text = cut_text(message.text, self.message)
            out[6] = Cell(text, message.role)
        said = now.text
        if cells_of(said) > self.now:  # what it shares with the message goes first
            said = _after_common_words(said, cells[6].text)
        out[7] = Cell(cut_text(said, self.now), now.role)
        if not self.host:
            del out[2]
        return tuple(out), height


def _after_common_words(text: str, other: str) -> str:
    """``text`` without the words it starts with in common with ``other``: "GPU 6 memory
    6.3% used" after "GPU 6 memory 96.7% used" is "6.3% used" (itself when that leaves
    nothing)."""
    words, others = text.split(" "), other.split(" ")
    pairs = enumerate(zip(words, others, strict=False))
    same = next((i for i, (a, b) in pairs if a != b), min(len(words), len(others)))
    return " ".join(words[same:]) or text


def short_severity(text: str) -> str:
    """A severity cell as its glyph: "✖ critical" -> "✖", an evidence row's "└ warning" ->
    "└▲"."""
    mark, _, word = text.partition(" ")
    glyph = next((g for h, g in SEVERITY_GLYPH.items() if h.value == word), "")
    return f"└{glyph}" if mark == "└" else glyph or mark


def history_layout(
    rows: Sequence[Sequence[Cell]], width: int, *, hosts: int, padding: int = 1
) -> HistoryLayout:
    """The layout of the history's ``rows`` (``history_cells``' eight cells each) in
    ``width`` columns, each column ``padding`` wider on either side: every message whole
    where it fits, else the message column gets what the others and "now" leave (a third
    of the room goes to "now" when a row has a value there, so it stays on screen); where
    that leaves the message fewer than HISTORY_MESSAGE_MIN columns the severity says only
    its glyph, then (one host) the host column goes."""

    def widest(column: int, title: str, short: bool = False) -> int:
        texts = [r[column].text for r in rows]
        if short:
            texts = [short_severity(t) for t in texts]
        return max([cells_of(title), *(cells_of(t) for t in texts)])

    message_w, now_w = widest(6, "message"), widest(7, "now")
    has_now = any(r[7].text for r in rows)
    variants = [(False, True), (True, True)] + ([(True, False)] if hosts == 1 else [])
    others = {HISTORY_COLUMNS[c]: widest(c, HISTORY_COLUMNS[c]) for c in (1, 2, 3, 4, 5)}
    layout = HistoryLayout(False, True, message_w, now_w)
    for short, host in variants:
        widths = {t: w for t, w in others.items() if host or t != "host"}
        widths["" if short else "severity"] = (
            widest(0, "", short) if short else widest(0, "severity")
        )
        count = 8 if host else 7
        room = width - sum(widths.values()) - 2 * padding * count
        if message_w + now_w <= room:
            return HistoryLayout(short, host, message_w, now_w, widths)
        now = min(now_w, max(HISTORY_NOW_MIN, room // 3)) if has_now else cells_of("now")
        layout = HistoryLayout(short, host, max(room - now, 10), now, widths)
        if layout.message >= HISTORY_MESSAGE_MIN:
            return layout
    return layout


def alert_text(message: str) -> str:
    """A message on one line, control characters made visible."""
    return _printable(" ".join(message.split()))


def alert_title(alert: Alert) -> str:
    """A notification's title: "CRITICAL: CUDA out of memory"."""
    return f"{alert.severity.value.upper()}: {kind_title(alert.kind)}"
