"""The alert history (``a``): the incidents of every host, the most urgent first, each its
headline's row with its evidence (its other alerts) folded under it ("└"); Enter opens the
row's incident in full (``AlertDetailScreen``: the columns cut its messages), Space
acknowledges the row under the cursor (an incident's row: all of its alerts), ``A`` all;
``b`` writes the evidence of the incident under the cursor (``gpumon bundle``) to
``$XDG_STATE_HOME/gpumon/bundles/`` and says where.
Rows show what was true when an alert was raised and at its peak; "now" its current value.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static

from gpumon.backends.alerts.incident import Incident, by_urgency, incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.textfit import cut as cut_text
from gpumon.backends.untrusted import printable
from gpumon.tui.screens.alert_detail import AlertDetailScreen, detail_view
from gpumon.tui.views import Cell, Palette, Role, alert_count
from gpumon.tui.views.alert_cells import (
    alert_text,
    evidence_cells,
    history_layout,
    incident_cells,
)
from gpumon.tui.views.alert_detail import DetailView
from gpumon.tui.widgets import KeyFooter

NOTES_SHOWN = 3  # the newest notes under the history's table (the rest: the JSON's)


class AlertHistoryScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,a", "app.pop_screen", "Back", tooltip="Back to the dashboard"),
        Binding(
            "enter",
            "show_incident",
            "Detail",
            key_display="⏎",
            priority=True,
            tooltip="The incident under the cursor in full: messages, log lines, fix",
        ),
        Binding(
            "space",
            "acknowledge",
            "Ack",
            key_display="Space",
            priority=True,
            tooltip="Acknowledge the alert under the cursor",
        ),
        Binding("A", "acknowledge_all", "Ack all", tooltip="Acknowledge every active alert"),
        Binding("r", "restart", "Restart job", tooltip="Restart the job of the selected alert"),
        Binding(
            "b",
            "bundle",
            "Bundle",
            tooltip="Write the evidence of the selected incident to a scrubbed .tar.gz "
            "(gpumon bundle)",
        ),
    ]

    def __init__(
        self,
        monitors: Sequence[HostMonitor],
        *,
        palette_of: Callable[[], Palette],
        on_change: Callable[[], None],
        on_restart: Callable[[HostMonitor, Alert], None] | None = None,
    ) -> None:
        """``on_change()`` runs after an acknowledgement (the dashboard redraws);
        ``on_restart(monitor, alert)`` is ``r`` on an alert (the dashboard restarts its
        job, or says why it cannot)."""
        super().__init__(id="alerts")
        self.monitors = list(monitors)
        self.palette_of = palette_of
        self.on_change = on_change
        self.on_restart = on_restart
        self.title_line = Static(id="alerts-title", markup=False)
        # what gpumon could not see here, or did about it (the agent's and the monitor's
        # notes: "kernel log not readable here ..."), the newest under the table
        self.notes_line = Static(id="alerts-notes", markup=False)
        self.table: DataTable[Text] = DataTable(
            id="alerts-table", cursor_type="row", zebra_stripes=False
        )
        self._shown: tuple[object, ...] | None = None
        self.keys: list[tuple[int, str]] = []  # (host index, alert key) of each table row
        self.row_incidents: list[Incident] = []  # the incident of each table row
        self.heads: list[bool] = []  # whether each row is an incident's headline row

    def compose(self) -> ComposeResult:
        yield self.title_line
        yield self.table
        yield self.notes_line
        yield KeyFooter()

    def on_mount(self) -> None:
        self.refresh_view()
        self.table.focus()

    def on_resize(self) -> None:
        self._shown = None  # the columns fit the new width
        self.call_after_refresh(self.refresh_view)

    def alerts(self) -> list[tuple[int, Alert]]:
        """(host index, alert) of every host, newest first."""
        out = [(i, a) for i, m in enumerate(self.monitors) for a in m.alerts.history()]
        out.sort(key=lambda ia: ia[1].time, reverse=True)
        return out

    def incidents(self) -> list[tuple[int, Incident]]:
        """(host index, incident) of every host's history, the most urgent first: active
        ones, then the ended ones newest first."""
        index = {m.name: i for i, m in enumerate(self.monitors)}
        found = [x for m in self.monitors for x in _host_incidents(m)]
        return [(index.get(i.host, 0), i) for i in by_urgency(found)]

    def refresh_view(self) -> bool:
        """Rebuild the table if any alert changed (or the width); returns whether it did.
        The cursor stays on the alert it was on. The columns fit the table's width
        (``history_layout``): a message that does not fit ends in "…", an incident's cut
        before its fixes, and "now" stays on screen. Not before the screen is mounted: the
        dashboard's refresh can reach a screen that is pushed but not yet mounted."""
        if not self.is_mounted:
            return False
        alerts = self.alerts()
        pal = self.palette_of()
        notes = tuple((m.name, t, text) for m in self.monitors for t, text in m.alerts.notes())
        key = (tuple(alerts), pal, self.table.size.width, notes)
        if key == self._shown:
            return False
        self._shown = key
        self._show_notes(notes, pal)
        counts = alert_count([a for _, a in alerts])
        found = self.incidents()
        title = Text()
        title.append(" Alerts ", pal.badge(counts.role if counts.new else Role.MUTED))
        title.append(
            f"  {counts.text}, {len(alerts)} in the history in {len(found)} "
            f"incident{'s' if len(found) != 1 else ''}",
            pal.text(Role.MUTED),
        )
        title.append(
            "   ⏎ detail  Space acknowledge  A all  r restart its job  b bundle  Esc back",
            pal.text(Role.MUTED),
        )
        self.title_line.update(title)
        table = self.table
        at = self.keys[table.cursor_row] if 0 <= table.cursor_row < len(self.keys) else None
        rows: list[tuple[int, Alert, Incident, bool, tuple[Cell, ...]]] = []
        for i, incident in found:
            now = self.monitors[i].clock()
            rows.append((i, incident.cause, incident, True, incident_cells(incident, now)))
            rows += [(i, a, incident, False, evidence_cells(a, now)) for a in incident.evidence]
        width = table.size.width or self.app.size.width
        if len(rows) + 1 > table.size.height:  # the rows scroll: the scrollbar takes its columns
            width -= table.styles.scrollbar_size_vertical
        layout = history_layout(
            [r[4] for r in rows], width, hosts=len(self.monitors), padding=table.cell_padding
        )
        table.clear(columns=True)
        for name, column_width in zip(layout.titles, layout.widths(), strict=True):
            table.add_column(name, key=name or "severity", width=column_width)
        self.keys, self.row_incidents, self.heads = [], [], []
        for i, alert, incident, head, cells in rows:
            shown, height = layout.row(cells, incident if head else None)
            table.add_row(*(Text(c.text, pal.text(c.role)) for c in shown), height=height)
            self.keys.append((i, alert.key))
            self.row_incidents.append(incident)
            self.heads.append(head)
        if at in self.keys:
            table.move_cursor(row=self.keys.index(at), animate=False)
        return True

    def _show_notes(self, notes: tuple[tuple[str, float, str], ...], pal: Palette) -> None:
        """The newest ``NOTES_SHOWN`` notes, each on its line ("note 17:02:11 kernel log not
        readable here ..."; the host first where there are several), the count of older
        ones before them; hidden when there is none."""
        line = self.notes_line
        line.display = bool(notes)
        if not notes:
            return
        hosts = len(self.monitors) > 1
        shown = sorted(notes, key=lambda n: n[1])[-NOTES_SHOWN:]
        text = Text()
        older = len(notes) - len(shown)
        if older:
            text.append(f" +{older} older notes: gpumon snapshot --json\n", pal.text(Role.MUTED))
        for i, (host, t, said) in enumerate(shown):
            stamp = time.strftime("%H:%M:%S", time.localtime(t))
            where = f"{host}: " if hosts else ""
            text.append(f" note {stamp}  ", pal.text(Role.MUTED))
            room = max(self.app.size.width - 16, 20)  # one line each: the rest in the JSON
            said = cut_text(f"{where}{alert_text(said)}", room)
            text.append(said + ("\n" if i < len(shown) - 1 else ""))
        line.update(text)

    def selected(self) -> tuple[int, str] | None:
        row = self.table.cursor_row
        return self.keys[row] if 0 <= row < len(self.keys) else None

    def selected_incident(self) -> Incident | None:
        """The incident of the row under the cursor (its headline or its evidence)."""
        row = self.table.cursor_row
        return self.row_incidents[row] if 0 <= row < len(self.row_incidents) else None

    def action_show_incident(self) -> None:
        """The incident under the cursor in full, over the history (Esc comes back)."""
        picked, incident = self.selected(), self.selected_incident()
        if picked is None or incident is None:
            return
        monitor = self.monitors[picked[0]]
        keys = {a.key for a in incident.alerts}

        def follow() -> DetailView | None:  # the incident that holds any of its alerts now
            found = (x for x in by_urgency(_host_incidents(monitor)) if keys.intersection(x.keys))
            now = next(found, None)
            if now is None:
                return None
            keys.update(now.keys)
            return detail_view(monitor, now)

        view = detail_view(monitor, incident)
        self.app.push_screen(AlertDetailScreen(view, self.palette_of(), follow=follow))

    def action_acknowledge(self) -> None:
        picked = self.selected()
        if picked is None:
            return
        host, key = picked
        row = self.table.cursor_row
        incident = self.row_incidents[row] if self.heads[row] else None
        keys = [a.key for a in incident.alerts if a.active] if incident else [key]
        done = sum(self.monitors[host].alerts.acknowledge(k) for k in keys)
        if not done:
            self.notify("already acknowledged or over", timeout=2)
            return
        self.refresh_view()
        self.on_change()

    def action_acknowledge_all(self) -> None:
        done = sum(m.alerts.acknowledge_all() for m in self.monitors)
        self.notify(f"{done} alert{'s' if done != 1 else ''} acknowledged", timeout=3)
        self.refresh_view()
        self.on_change()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "restart":
            return self.on_restart is not None
        return True

    def action_restart(self) -> None:
        """Restart the job of the alert under the cursor (the dashboard's dialog)."""
        picked = self.selected()
        if picked is None or self.on_restart is None:
            return
        host, key = picked
        monitor = self.monitors[host]
        alert = next((a for a in monitor.alerts.history() if a.key == key), None)
        if alert is not None:
            self.on_restart(monitor, alert)

    def action_bundle(self) -> None:
        """Write the bundle of the incident under the cursor, in the background; say
        where it went (or why it did not) when it is written."""
        picked, incident = self.selected(), self.selected_incident()
        if picked is None or incident is None:
            return
        monitor = self.monitors[picked[0]]
        self.notify(f"writing the bundle of {incident.headline} …", timeout=4)
        self.run_worker(self._bundle(monitor, incident.cause.key), group="bundle")

    async def _bundle(self, monitor: HostMonitor, key: str) -> None:
        from gpumon.backends.bundle import bundle_incident
        from gpumon.backends.errors import GpumonError

        # The dashboard's notifiers (their secrets are scrubbed by value), where it has any.
        settings = getattr(getattr(self.app, "hub", None), "settings", None)
        try:
            result = await bundle_incident(monitor, key, settings)
        except (GpumonError, OSError) as e:
            self.notify(f"no bundle: {e}", title="Bundle", severity="error", timeout=10)
            return
        self.notify(bundle_written(result.path, result.missing), title="Bundle", timeout=15)


BUNDLE_LEFT_OUT_NAMED = 3  # parts the toast names; the index names them all


def bundle_written(path: Path, missing: Sequence[tuple[str, str]]) -> str:
    """The toast of a written bundle: where, and the parts left out by name ("bundle
    written: PATH; left out: py-spy, kernel.txt and 2 more (its index.txt says why)"):
    ``index.txt`` is where the reasons are, never one of the parts missing."""
    if not missing:
        return f"bundle written: {path}"
    names = list(dict.fromkeys(printable(name) for name, _ in missing))
    shown = ", ".join(names[:BUNDLE_LEFT_OUT_NAMED])
    if len(names) > BUNDLE_LEFT_OUT_NAMED:
        shown += f" and {len(names) - BUNDLE_LEFT_OUT_NAMED} more"
    return f"bundle written: {path}; left out: {shown} (its index.txt says why)"


def _host_incidents(monitor: HostMonitor) -> list[Incident]:
    """The incidents of ``monitor``'s alert history, their fixes only for the jobs the
    config can restart."""
    restartable = {j.name for j in monitor.host.jobs if j.start}
    return incidents(monitor.alerts.history(), restartable=restartable)
