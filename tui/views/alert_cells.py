"""Pure functions from alerts to what the dashboard says about them: the header count, the
strip's alert, one-line texts and the history table's cells."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gpumon.backends.alerts.incident import Incident, line, screen_fixes
from gpumon.backends.alerts.kinds import kind_title
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
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
    (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab) — K stop it, r
    restart drafter", ``screen_fixes``), control characters made visible. The toast, the
    strip and the history say exactly this."""
    return _printable(" ".join(line(incident, screen_fixes(incident)).split()))


def incident_notice(incident: Incident, limit: int, prefix: str = "") -> str:
    """``prefix`` and ``incident_text`` in at most ``limit`` characters (a toast): the
    headline is cut before its fixes are ("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB,
    90 MiB free; 6.0 GiB… — K stop it, r restart drafter"), unless they leave it less
    than a third; then the whole line is cut."""
    text = prefix + incident_text(incident)
    if len(text) <= limit:
        return text
    fixes = screen_fixes(incident)
    tail = f" — {_printable(fixes)}" if fixes else ""
    room = limit - len(prefix) - len(tail) - 1
    if tail and room >= limit // 3:
        headline = _printable(" ".join(incident.headline.split()))
        return f"{prefix}{headline[:room].rstrip()}…{tail}"
    return text[: limit - 1] + "…"


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


def alert_text(message: str) -> str:
    """A message on one line, control characters made visible."""
    return _printable(" ".join(message.split()))


def alert_title(alert: Alert) -> str:
    """A notification's title: "CRITICAL: CUDA out of memory"."""
    return f"{alert.severity.value.upper()}: {kind_title(alert.kind)}"
