"""The cursor: it walks every host's GPU rows, then the rows of its jobs pane; what is
under it is what the keys act on (``selected_monitor``, ``selected_job``, the detail view).

``CursorMixin`` is a base of ``DashboardScreen``. ``cursor`` is ``(host, row)``: rows below the
host's GPU count are GPUs, the rest are jobs in the jobs pane's order.

A GPU row can be expanded (``x``, ``expanded`` holds ``(host, GPU index)``): its process
lines show under it and the cursor steps onto each of them (``process_cursor``: which
process, by ``process_key``, never by position, so a process that ends or a list that
reorders never leaves it on another one). ``cursor`` stays on the GPU row meanwhile, so
every key that acts on a GPU row acts on it as before; ``K`` acts on the selected process.
The cursor is back on the GPU row when the row is collapsed or the process is no longer
in the sample on show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from gpumon.backends.config import JobConfig
from gpumon.backends.model import GpuProcess
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.screens import DetailScreen, DetailTarget
from gpumon.tui.views.process_cells import ProcessKey, process_key
from gpumon.tui.widgets import GpuRows, WorkloadPane

Stop = tuple[int, int, ProcessKey | None]  # where the cursor can be: (host, row, process)

if TYPE_CHECKING:
    from gpumon.tui.widgets import HostSection


class CursorMixin(Screen[None]):
    if TYPE_CHECKING:  # provided by the dashboard screen
        monitors: list[HostMonitor]
        sections: list[HostSection]
        cursor: tuple[int, int] | None
        process_cursor: ProcessKey | None  # the process line selected under the cursor's row
        expanded: set[tuple[int, int]]  # (host, GPU index) of the rows that list processes
        row_height: int

        def refresh_dashboard(
            self, hosts: set[int] | None = None, *, rows_of: set[int] | None = None
        ) -> None: ...

        def action_open_detail(self) -> None: ...

    def _positions(self) -> list[tuple[int, int]]:
        """Cursor positions: per host, its GPU rows, then its jobs pane's rows."""
        return [
            (i, p)
            for i, s in enumerate(self.sections)
            for p in range(len(s.gpus) + (len(s.job_names) if s.jobs.display else 0))
        ]

    _cursor_on: tuple[str, object] | None = None  # what the cursor was last on

    def under_cursor(self) -> tuple[str, object] | None:
        """What the cursor is on: ``("gpu", index)``, ``("job", name)`` or None."""
        if self.cursor is None:
            return None
        i, pos = self.cursor
        section = self.sections[i]
        gpus, names = section.gpus, section.job_names
        if pos < len(gpus):
            return ("gpu", gpus[pos].index)
        k = pos - len(gpus)
        return ("job", names[k]) if k < len(names) else None

    def follow_cursor(self) -> None:
        """After rows came or went (the first sample, a lost GPU): keep the cursor on the
        job it was on, back on its GPU row when its process line is gone, and tell the
        footer when what is under it changed."""
        if self.process_cursor is not None and self.selected_process() is None:
            self.process_cursor = None  # the rows drew the cursor on the GPU row already
            self.app.refresh_bindings()
        was, now = self._cursor_on, self.under_cursor()
        if now == was:
            return
        if was is not None and was[0] == "job" and self.cursor is not None:
            i = self.cursor[0]
            section = self.sections[i]
            if was[1] in section.job_names:
                self.cursor = (i, len(section.gpus) + section.job_names.index(str(was[1])))
        self._cursor_on = self.under_cursor()
        self.app.refresh_bindings()

    # --- process lines of expanded GPU rows ----------------------------------------------
    def row_processes(self, host: int, row: int) -> tuple[GpuProcess, ...]:
        """The processes listed under GPU row ``row`` of ``host`` (none unless expanded),
        from the sample the row shows."""
        section = self.sections[host]
        gpus, shown = section.gpus, section.shown
        if row >= len(gpus) or shown is None or (host, gpus[row].index) not in self.expanded:
            return ()
        return shown.processes_for(gpus[row])

    def selected_process(self) -> GpuProcess | None:
        """The process line under the cursor (None: the cursor is on no process line)."""
        if self.cursor is None or self.process_cursor is None:
            return None
        procs = self.row_processes(*self.cursor)
        return next((p for p in procs if process_key(p) == self.process_cursor), None)

    def action_toggle_processes(self) -> None:
        """``x``: show or hide the process lines of the GPU row under the cursor."""
        target = self._cursor_target()
        if target is None or self.cursor is None:
            return
        key = (self.cursor[0], target.gpu_index)
        if key in self.expanded:
            self.expanded.discard(key)
            self.process_cursor = None  # back on its GPU row
        else:
            self.expanded.add(key)
        self.refresh_dashboard({self.cursor[0]})
        self.app.refresh_bindings()

    def _stops(self) -> list[Stop]:
        """Where the cursor can go, in order: each GPU row, then its process lines when it
        is expanded (not while the detail view is on show: its own list selects there),
        then the host's job rows."""
        lines = self.app.screen is self
        out: list[Stop] = []
        for i, s in enumerate(self.sections):
            for row in range(len(s.gpus)):
                out.append((i, row, None))
                if lines:
                    out += [(i, row, process_key(p)) for p in self.row_processes(i, row)]
            if s.jobs.display:
                out += [(i, len(s.gpus) + k, None) for k in range(len(s.job_names))]
        return out

    def _here(self) -> Stop | None:
        return None if self.cursor is None else (*self.cursor, self.process_cursor)

    def _move_cursor(self, delta: int) -> None:
        stops = self._stops()
        if not stops:
            return
        here = self._here()
        if here not in stops and self.cursor is not None:
            here = (*self.cursor, None)  # from the detail view: its process line is no stop
        at = stops.index(here) + delta if here in stops else 0
        self._move_to(stops[min(max(at, 0), len(stops) - 1)])

    def _move_to(self, stop: Stop) -> None:
        old = self.cursor
        if stop == self._here():
            return
        new = (stop[0], stop[1])
        self.cursor, self.process_cursor = new, stop[2]
        self._cursor_on = self.under_cursor()  # moved on purpose: nothing to follow
        touched = {new[0]} | ({old[0]} if old else set())
        self.refresh_dashboard(touched)
        section = self.sections[new[0]]
        if new[1] < len(section.rows):
            section.gpu_rows.scroll_row_visible(new[1])
        elif section.jobs.display:
            section.jobs.scroll_visible(animate=False)
        on_show = self.app.screen
        if old != new and isinstance(on_show, DetailScreen) and (target := self._cursor_target()):
            on_show.show_gpu(target)
        self.app.refresh_bindings()

    def _cursor_target(self) -> DetailTarget | None:
        """The GPU under the cursor (None on a job row)."""
        if self.cursor is None:
            return None
        i, pos = self.cursor
        gpus = self.sections[i].gpus
        if pos >= len(gpus):
            return None
        return DetailTarget(self.monitors[i], gpus[pos].index)

    def selected_monitor(self) -> HostMonitor | None:
        """The host under the cursor (the first host before there is a cursor)."""
        if self.cursor is not None:
            return self.monitors[self.cursor[0]]
        return self.monitors[0] if self.monitors else None

    def selected_job(self) -> tuple[HostMonitor, JobConfig] | None:
        """The job under the cursor: the jobs pane's row when the cursor is on one, else
        the job whose GPUs include the GPU under the cursor (None without one). The job
        comes from ``monitor.host`` (the demo adds its drafter there)."""
        if self.cursor is None:
            return None
        i, pos = self.cursor
        section, monitor = self.sections[i], self.monitors[i]
        gpus = section.gpus
        if pos >= len(gpus):
            names = section.job_names
            k = pos - len(gpus)
            job = monitor.host.job(names[k]) if k < len(names) else None
        else:
            index = gpus[pos].index
            job = next((j for j in monitor.host.jobs if index in j.gpus), None)
        return (monitor, job) if job is not None else None

    def on_gpu_rows_selected(self, message: GpuRows.Selected) -> None:
        host = next((i for i, s in enumerate(self.sections) if message.rows is s.gpu_rows), None)
        if host is None:
            return
        row = message.row
        procs = self.row_processes(host, row)
        line = message.line
        key = process_key(procs[line]) if line is not None and line < len(procs) else None
        self._cursor_to((host, row), key)
        if message.open_detail:
            self.action_open_detail()

    def on_workload_pane_row_selected(self, message: WorkloadPane.RowSelected) -> None:
        host = next((i for i, s in enumerate(self.sections) if message.pane is s.jobs), None)
        if host is not None:
            self._cursor_to((host, len(self.sections[host].gpus) + message.index))

    def _cursor_to(self, target: tuple[int, int], process: ProcessKey | None = None) -> None:
        """The cursor to row ``target`` (on its line of ``process``, if it lists it)."""
        stop = (*target, process)
        if stop in self._stops():
            self._move_to(stop)

    def action_cursor(self, delta: int) -> None:
        self._move_cursor(delta)

    # --- navigation as in k9s and htop ---------------------------------------------------
    def action_cursor_end(self, direction: int) -> None:
        """``g``/Home: the first row; ``G``/End: the last one (of every host)."""
        positions = self._positions()
        if positions:
            self._cursor_to(positions[-1] if direction > 0 else positions[0])

    def action_cursor_page(self, direction: int) -> None:
        """PgDn / PgUp: a screenful of rows (as many as the host list shows) down or up."""
        rows = self.query_one("#hosts").size.height // max(self.row_height, 1)
        self._move_cursor(direction * max(rows - 1, 1))

    def action_jump_gpu(self, index: int) -> None:
        """A digit: the GPU of that index on the host under the cursor (else says why)."""
        host = self.cursor[0] if self.cursor is not None else 0
        if not self.sections:
            return
        gpus = self.sections[host].gpus
        row = next((k for k, g in enumerate(gpus) if g.index == index), None)
        if row is None:
            name = self.monitors[host].name
            self.notify(f"{name} has no GPU {index}", severity="warning", timeout=3)
            return
        self._cursor_to((host, row))

    def alerting_positions(self) -> list[tuple[int, int]]:
        """Cursor positions whose row has an active alert: a GPU row for an alert on that
        GPU, a job row for an alert of that job."""
        out = []
        for i, (section, monitor) in enumerate(zip(self.sections, self.monitors, strict=True)):
            active = monitor.alerts.active()
            gpus = {a.gpu for a in active if a.gpu is not None}
            jobs = {a.job for a in active if a.job is not None}
            out += [(i, p) for p, g in enumerate(section.gpus) if g.index in gpus]
            if section.jobs.display:
                base = len(section.gpus)
                out += [(i, base + k) for k, n in enumerate(section.job_names) if n in jobs]
        return out

    def action_next_alerting(self, direction: int) -> None:
        """``n`` / ``N``: the next (previous) row with an active alert, wrapping around."""
        positions = self._positions()
        alerting = [p for p in positions if p in set(self.alerting_positions())]
        if not alerting:
            self.notify("no row has an active alert", timeout=3)
            return
        at = positions.index(self.cursor) if self.cursor in positions else -1
        n = len(positions)
        order = sorted(alerting, key=lambda p: (positions.index(p) - at) * direction % n)
        ahead = [p for p in order if p != self.cursor]
        self._cursor_to(ahead[0] if ahead else order[0])
