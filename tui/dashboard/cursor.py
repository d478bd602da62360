"""The cursor: it walks every host's GPU rows, then the rows of its jobs pane; what is
under it is what the keys act on (``selected_monitor``, ``selected_job``, the detail view).

``CursorModel`` is the dashboard screen's: it reads the host sections and says where the
cursor can go and what is under it; the screen moves it and draws. ``cursor`` is ``(host,
row)``: rows below the host's GPU count are GPUs, the rest are jobs in the jobs pane's
order.

A GPU row can be expanded (``x``, ``expanded`` holds ``(host, GPU index)``): its process
lines show under it and the cursor steps onto each of them (``process_cursor``: which
process, by ``process_key``, never by position, so a process that ends or a list that
reorders never leaves it on another one). ``cursor`` stays on the GPU row meanwhile, so
every key that acts on a GPU row acts on it as before; ``K`` acts on the selected process.
The cursor is back on the GPU row when the row is collapsed or the process is no longer
in the sample on show.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon.backends.config import JobConfig
from gpumon.backends.model import GpuProcess
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.screens import DetailTarget
from gpumon.tui.views.process_cells import ProcessKey, process_key
from gpumon.tui.widgets import HostSection

Stop = tuple[int, int, ProcessKey | None]  # where the cursor can be: (host, row, process)


class CursorModel:
    """The cursor over ``sections`` (one per monitor, in the same order)."""

    def __init__(self, monitors: Sequence[HostMonitor], sections: Sequence[HostSection]) -> None:
        self.monitors = monitors
        self.sections = sections
        self.cursor: tuple[int, int] | None = None  # (host, row): GPU rows, then job rows
        self.process_cursor: ProcessKey | None = None  # on a process line of the cursor's row
        self.expanded: set[tuple[int, int]] = set()  # (host, GPU index): process lines shown
        self._on: tuple[str, object] | None = None  # what the cursor was last on

    def positions(self) -> list[tuple[int, int]]:
        """Cursor positions: per host, its GPU rows, then its jobs pane's rows."""
        return [
            (i, p)
            for i, s in enumerate(self.sections)
            for p in range(len(s.gpus) + (len(s.job_names) if s.jobs.display else 0))
        ]

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

    def follow(self) -> bool:
        """After rows came or went (the first sample, a lost GPU): keep the cursor on the
        job it was on, back on its GPU row when its process line is gone. Returns whether
        what is under it changed (the footer's keys then change too)."""
        changed = False
        if self.process_cursor is not None and self.selected_process() is None:
            self.process_cursor = None  # the rows drew the cursor on the GPU row already
            changed = True
        was, now = self._on, self.under_cursor()
        if now == was:
            return changed
        if was is not None and was[0] == "job" and self.cursor is not None:
            i = self.cursor[0]
            section = self.sections[i]
            if was[1] in section.job_names:
                self.cursor = (i, len(section.gpus) + section.job_names.index(str(was[1])))
        self._on = self.under_cursor()
        return True

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

    def toggle_processes(self) -> int | None:
        """Show or hide the process lines of the GPU row under the cursor; returns its
        host (None: the cursor is on no GPU row)."""
        target = self.target()
        if target is None or self.cursor is None:
            return None
        key = (self.cursor[0], target.gpu_index)
        if key in self.expanded:
            self.expanded.discard(key)
            self.process_cursor = None  # back on its GPU row
        else:
            self.expanded.add(key)
        return self.cursor[0]

    # --- moving --------------------------------------------------------------------------
    def stops(self, *, lines: bool) -> list[Stop]:
        """Where the cursor can go, in order: each GPU row, then (``lines``: not while the
        detail view is on show, its own list selects there) its process lines when it is
        expanded, then the host's job rows."""
        out: list[Stop] = []
        for i, s in enumerate(self.sections):
            for row in range(len(s.gpus)):
                out.append((i, row, None))
                if lines:
                    out += [(i, row, process_key(p)) for p in self.row_processes(i, row)]
            if s.jobs.display:
                out += [(i, len(s.gpus) + k, None) for k in range(len(s.job_names))]
        return out

    def here(self) -> Stop | None:
        return None if self.cursor is None else (*self.cursor, self.process_cursor)

    def step(self, delta: int, *, lines: bool) -> Stop | None:
        """The stop ``delta`` stops away (clamped to the first and last; None: no stop)."""
        stops = self.stops(lines=lines)
        if not stops:
            return None
        here = self.here()
        if here not in stops and self.cursor is not None:
            here = (*self.cursor, None)  # from the detail view: its process line is no stop
        at = stops.index(here) + delta if here in stops else 0
        return stops[min(max(at, 0), len(stops) - 1)]

    def place(self, stop: Stop) -> bool:
        """The cursor to ``stop``; returns whether it moved."""
        if stop == self.here():
            return False
        self.cursor, self.process_cursor = (stop[0], stop[1]), stop[2]
        self._on = self.under_cursor()  # moved on purpose: nothing to follow
        return True

    def alerting_next(self, direction: int) -> tuple[int, int] | None:
        """The next (previous) position with an active alert, wrapping around."""
        positions = self.positions()
        alerting = [p for p in positions if p in set(self.alerting_positions())]
        if not alerting:
            return None
        at = positions.index(self.cursor) if self.cursor in positions else -1
        n = len(positions)
        order = sorted(alerting, key=lambda p: (positions.index(p) - at) * direction % n)
        ahead = [p for p in order if p != self.cursor]
        return ahead[0] if ahead else order[0]

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

    # --- what the keys act on ------------------------------------------------------------
    def target(self) -> DetailTarget | None:
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
