"""An incident's detail (Enter on a row of the alert history): everything the row cuts.

``detail_rows(view)`` gives the lines as (label, text, role) rows, pure so that tests
read them; ``detail_table`` lays them out with the labels in their own column, so a
wrapped message stays indented under its text instead of running back to the left edge.

What it says, in order: the headline at its severity; where and since when (the time of
the incident's first alert, "(first warning)" when that alert is a warning that came
before the cause); what was done about it ("restarted by root at 05:40:13 (new PID
2433201)", ``Incident.restarts``); the fix (``screen_fixes`` and ``command_fix``, as the
dashboard and the headless commands say them); then each alert, the cause first: its
kind, state, first / peak / now messages with their times, the log or kernel lines
that raised it, and for a stall the flight recorder named the per-rank table (each rank's
last completed and last entered collective, a missing dump said); last, the flight
recording that holds it, when one was written or is being written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from gpumon.backends.alerts.incident import Incident, command_fix, screen_fixes
from gpumon.backends.alerts.kinds import kind_title
from gpumon.backends.alerts.store import Alert
from gpumon.backends.untrusted import printable
from gpumon.tui.views.alert_cells import (
    alert_state,
    alert_text,
    alert_time,
    incident_state,
)
from gpumon.tui.views.gpu_cells import Role, health_role
from gpumon.tui.views.palette import Palette

LABEL_WIDTH = 7  # "first", "peak", "now", "lines", "fix": one column


class DetailRow(NamedTuple):
    """One line of the detail: ``label`` in the left column ("" for none), ``text`` beside
    it; ``heading`` rows start a part ("cause: CUDA out of memory")."""

    label: str
    text: str
    role: Role = Role.NORMAL
    heading: bool = False


@dataclass(frozen=True, slots=True)
class DetailView:
    """What the detail shows. ``sources``: alert key -> the lines that raised it
    (``AlertStore.source_lines``); ``recording``: (path, written) of the flight recording
    that holds the incident (``FlightRecorder.recording_of``), None when there is none."""

    incident: Incident
    now: float
    sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    recording: tuple[str, bool] | None = None


def since_text(incident: Incident, now: float) -> str:
    """ "since 08:53:09 (first warning)" when an alert came before the incident's cause
    (the memory filling before the OOM: the history dates the incident by it), else
    "since 08:53:09"."""
    first = min(incident.alerts, key=lambda a: a.time)
    stamp = alert_time(first.time, now)
    if first.time < incident.cause.time:
        return f"since {stamp} (first warning)"
    return f"since {stamp}"


def detail_rows(view: DetailView) -> list[DetailRow]:
    """The detail's rows (see the module docstring); every text is made printable."""
    incident, now = view.incident, view.now
    role = health_role(incident.severity) if incident.active else Role.MUTED
    rows = [DetailRow("", alert_text(incident.headline), role, heading=True)]
    where = [printable(incident.host)]
    if incident.gpu is not None:
        where.append(f"GPU {incident.gpu}")
    if incident.job:
        where.append(printable(incident.job))
    state = incident_state(incident)
    rows.append(
        DetailRow("", f"{'  '.join(where)}  ·  {state.text}  ·  {since_text(incident, now)}")
    )
    # what was done about it, under its cause: "restarted by root at 05:40:13 (new PID ...)"
    rows += [DetailRow("", alert_text(a.message), Role.NORMAL) for a in incident.restarts]
    said, command = screen_fixes(incident), command_fix(incident)
    if said:
        rows.append(DetailRow("fix", alert_text(said), Role.NORMAL))
        if command:
            rows.append(DetailRow("", alert_text(command.removeprefix("fix: ")), Role.MUTED))
    else:
        rows.append(DetailRow("fix", "none that gpumon knows", Role.MUTED))
    rows += _alert_rows(incident.cause, "cause", view)
    for alert in incident.evidence:
        if alert not in incident.restarts:  # said under the headline
            rows += _alert_rows(alert, "evidence", view)
    if view.recording is not None:
        path, written = view.recording
        rows.append(DetailRow("", "recording", Role.NORMAL, heading=True))
        words = printable(path) if written else f"{printable(path)} (being written)"
        rows.append(DetailRow("", words, Role.NORMAL))
    return rows


def _alert_rows(alert: Alert, part: str, view: DetailView) -> list[DetailRow]:
    kind = kind_title(alert.kind)
    state = alert_state(alert)
    head = f"{part}: {kind} ({alert.peak.value}, {state.text})"
    rows = [DetailRow("", head, health_role(alert.peak) if alert.active else Role.MUTED, True)]
    now = view.now
    first, peak, current = (
        alert_text(alert.raised_text),
        alert_text(alert.peak_text),
        alert_text(alert.message),
    )
    rows.append(DetailRow("first", f"{alert_time(alert.time, now)}  {first}"))
    if peak != first or alert.peak_at != alert.time:
        rows.append(DetailRow("peak", f"{alert_time(alert.peak_at, now)}  {peak}"))
    if current != peak or alert.last_seen != alert.peak_at:
        when = alert_time(alert.last_seen, now)
        label = "now" if alert.active else "last"
        rows.append(DetailRow(label, f"{when}  {current}", Role.NORMAL))
    lines = view.sources.get(alert.key, ())
    for i, line in enumerate(lines):
        rows.append(DetailRow("lines" if i == 0 else "", printable(line), Role.MUTED))
    report = alert.facts.collective
    if report is not None:  # the flight recorder's dumps: each rank's last collectives
        if report.detail():
            rows.append(DetailRow("group", printable(report.detail())))
        for i, line in enumerate(report.table()):
            role = Role.MUTED if i == 0 else Role.NORMAL
            rows.append(DetailRow("ranks" if i == 0 else "", printable(line), role))
    return rows


def detail_renderable(rows: list[DetailRow], palette: Palette) -> Group:
    """The rows laid out: each heading on a line of its own (a blank line before every
    heading but the first), the labelled rows under it in a grid whose labels have a
    column of their own, so a wrapped text stays beside its label."""
    parts: list[RenderableType] = []
    grid: Table | None = None
    for row in rows:
        if row.heading:
            if parts:
                parts.append(Text(""))
            parts.append(Text(row.text, palette.text(row.role) + Style(bold=True)))
            grid = None
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 1), expand=True)
            grid.add_column(width=LABEL_WIDTH, no_wrap=True)
            grid.add_column(ratio=1, overflow="fold")
            parts.append(grid)
        label = Text(row.label, palette.text(Role.MUTED))
        grid.add_row(label, Text(row.text, palette.text(row.role)))
    return Group(*parts)


def detail_plain(rows: list[DetailRow]) -> str:
    """The rows as plain lines ("label  text"), unwrapped: what tests and logs read."""
    return "\n".join(f"{r.label:<{LABEL_WIDTH}} {r.text}".rstrip() for r in rows)
