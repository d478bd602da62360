"""The dashboard screen: one section per host (GPU rows, SGLang and jobs panes), the alert
strip, the footer; its keys, from the action table; one refresh timer.

Monitor listeners only mark a host dirty (and react at once to a change of connection
state); a timer at about 1 Hz redraws what changed, batched. The screen owns its keys, so
they go away by themselves under another screen; the detail view over it
(``DashboardDetailScreen``) takes the ones the table shares with it and passes them back
here. It owns plain objects and passes each what it needs: the cursor model (``cursor``),
the job-actions controller (``actions``: the keys that act on a machine), the alert
presenter (``alerts``) and, on a recording, the replay controls (``replay``). Its action
methods are the keys' entry points (Textual looks them up on the screen) and stay one line
where one of those does the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import ClassVar

from textual import actions, events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.timer import Timer

from gpumon.backends.actions import Session
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import JobConfig
from gpumon.backends.model import ConnState, GpuProcess, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.dashboard.action_table import (
    BY_NAME,
    DashboardAction,
    PaletteEntry,
    Where,
    actions_on,
    bindings,
    palette_entries,
)
from gpumon.tui.dashboard.actions import RECORDING, JobActions
from gpumon.tui.dashboard.alerts import AlertPresenter
from gpumon.tui.dashboard.cursor import CursorModel, Stop
from gpumon.tui.dashboard.notices import ConnectionWatch
from gpumon.tui.dashboard.replay import ReplayControls, replay_header, replay_of
from gpumon.tui.screens import (
    AlertDetailScreen,
    AlertHistoryScreen,
    DetailScreen,
    DetailTarget,
    key_text,
)
from gpumon.tui.screens.detail import fitting_window
from gpumon.tui.state import remember_window, remembered_window
from gpumon.tui.views import Palette
from gpumon.tui.views.layout import plan_layout
from gpumon.tui.views.process_cells import ProcessKey, process_key
from gpumon.tui.widgets import (
    GpuRows,
    HostSection,
    KeyFooter,
    StripView,
    ViewContext,
    WorkloadPane,
)

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
TICK_S = 1.0


class HostList(VerticalScroll, can_focus=False):
    """The scrolling column of host sections (never takes focus: keys go to the screen)."""


class DashboardScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("dashboard"))

    def __init__(
        self,
        monitors: Sequence[HostMonitor],
        *,
        palette_of: Callable[[], Palette],
        read_only: bool = False,
        bell: bool = True,
        session: Session | None = None,
    ) -> None:
        """``monitors`` are started and stopped by the app; ``palette_of()`` is the current
        theme's colours; ``session`` owns the runs the keys start (the app's)."""
        super().__init__(id="dashboard")
        self._mounted = False
        self.monitors = list(monitors)
        self.session = session if session is not None else Session()
        self.palette_of = palette_of
        self.read_only = read_only
        self.sections = [HostSection(m, i) for i, m in enumerate(self.monitors)]
        self.paused = False
        self.spark_memory = True
        self.row_height = 1
        self.replay = replay_of(self.monitors)  # the recording on show, None for live hosts
        self.cursor_model = CursorModel(self.monitors, self.sections)
        self.actions = JobActions(
            self, self.cursor_model, session=self.session, read_only=read_only
        )
        self.alerts = AlertPresenter(
            self,
            self.monitors,
            bell=bell,
            replay=self.replay,
            palette_of=palette_of,
            refresh=self.refresh_dashboard,
            mounted=lambda: self._mounted,
            fixable=self._fixable,
            on_restart=self.actions.restart_alert_job,
            killable=self._killable,
            acts_on_host=self._acts_on_host,
            stoppable=self._stoppable,
        )
        self.strip = self.alerts.strip
        self.replay_controls = (
            None
            if self.replay is None
            else ReplayControls(
                self.replay, self, refresh=self.refresh_dashboard, moved=self._retime
            )
        )
        self._detail_window = remembered_window()  # the plot window chosen last
        self._dirty: set[int] = set()  # hosts with news since their rows were drawn
        self._watches = [ConnectionWatch(m.name, m.status.state) for m in self.monitors]
        self._timer: Timer | None = None
        for i, m in enumerate(self.monitors):
            m.add_listener(partial(self._on_monitor_change, i))
        # an action's own check: its state and, when it cannot act, why
        self._checks: dict[str, Callable[[], tuple[bool | None, str | None]]] = {
            "faster": partial(self._interval_verdict, faster=True),
            "slower": partial(self._interval_verdict, faster=False),
            "kill_process": self.actions.kill_verdict,
        }

    @property
    def palette(self) -> Palette:
        return self.palette_of()

    @property
    def bells(self) -> int:
        """Times the bell rang (tests read it)."""
        return self.alerts.bells

    # --- lifecycle -----------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HostList(*self.sections, id="hosts")
        yield self.strip
        yield KeyFooter()

    def on_mount(self) -> None:
        self._mounted = True
        self._retime()
        for i, m in enumerate(self.monitors):  # what happened while the screen was set up
            self._on_monitor_change(i, m)
        self.alerts.announce_early_alerts()
        self.refresh_dashboard()
        self.call_after_refresh(self.refresh_bindings)  # a no-op until mounted: now it is

    async def on_unmount(self) -> None:
        self._mounted = False  # the monitors report "stopped" next; nothing to draw it on
        if self._timer is not None:
            self._timer.stop()
        await self.actions.cancel_runs()

    def _retime(self) -> None:
        """One timer, about 1 Hz, faster when a host samples (or a replay plays) faster."""
        fastest = min((m.interval for m in self.monitors), default=1.0)
        if self.replay is not None:
            fastest /= self.replay.speed
        period = min(TICK_S, max(0.25, fastest))
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(period, self._tick, name="refresh")

    # --- monitor events ------------------------------------------------------------------
    def _on_monitor_change(self, i: int, monitor: HostMonitor) -> None:
        """A monitor listener: note the news; react now only to a new connection state
        or the first data (the timer draws the rest)."""
        if not self._mounted:
            return
        self._dirty.add(i)
        watch = self._watches[i]
        changed = monitor.status.state != watch.state
        if changed:
            notice = watch.change(monitor.status.state, monitor.status.error)
            if notice is not None and self.replay is None:
                self.notify(
                    notice.message,
                    title=notice.title,
                    severity=notice.severity,
                    timeout=notice.timeout,
                )
            self.app.refresh_bindings()
        if changed or (monitor.latest is not None and self.sections[i].shown is None):
            self.call_later(self.refresh_dashboard, {i})

    def _tick(self) -> None:
        self.refresh_dashboard(rows_of=set(self._dirty))

    # --- drawing -------------------------------------------------------------------------
    def refresh_dashboard(
        self, hosts: set[int] | None = None, *, rows_of: set[int] | None = None
    ) -> None:
        """Bring the sections (all, or ``hosts``), the strip and an open detail or alert
        view up to date.

        Headers always (ages move); rows of every section, or with ``rows_of`` only of
        those hosts (the timer passes the ones with news; stale marks are kept right).
        """
        if not self._mounted:
            return
        self.alerts.refresh_strip()
        plan = plan_layout(
            self.size.height, [s.needs() for s in self.sections], strip=self.strip.display
        )
        self.row_height = plan.row_height
        with self.app.batch_update():
            for i, section in enumerate(self.sections):
                if hosts is not None and i not in hosts:
                    continue
                rows = rows_of is None or i in rows_of
                if rows:
                    self._dirty.discard(i)
                ctx = replace(
                    self._view_context(i),
                    max_servers=plan.max_servers[i],
                    max_processes=plan.max_processes[i],
                    host_line=plan.host_line,
                )
                section.refresh_view(ctx, rows=rows)
            if self.cursor is None and any(s.gpus for s in self.sections):
                self._move_cursor(0)
            if self.cursor_model.follow():
                self.app.refresh_bindings()
            on_show = self.app.screen
            if isinstance(on_show, DetailScreen | AlertHistoryScreen | AlertDetailScreen):
                on_show.refresh_view()

    def _view_context(self, i: int) -> ViewContext:
        cursor = job_cursor = process = None
        if self.cursor and self.cursor[0] == i:
            gpus = len(self.sections[i].gpus)
            pos = self.cursor[1]
            cursor, job_cursor = (pos, None) if pos < gpus else (None, pos - gpus)
            process = self.process_cursor
        monitor = self.monitors[i]
        return ViewContext(
            now=monitor.clock(),
            paused=self.paused,
            palette=self.palette,
            spark_memory=self.spark_memory,
            row_height=self.row_height,
            cursor=cursor,
            job_cursor=job_cursor,
            replay=replay_header(monitor),
            expanded=frozenset(g for h, g in self.expanded if h == i),
            process_cursor=process,
        )

    def shown_sample(self, monitor: HostMonitor) -> HostSample | None:
        """The sample the dashboard shows for ``monitor`` (frozen while paused)."""
        return self.sections[self.monitors.index(monitor)].shown

    def strip_view(self) -> StripView | None:
        """The alert strip's view (None: hidden)."""
        return self.alerts.strip_view()

    # --- the cursor (what is under it: ``cursor_model``) --------------------------------
    @property
    def cursor(self) -> tuple[int, int] | None:
        """``(host, row)``: rows below the host's GPU count are GPUs, then its job rows."""
        return self.cursor_model.cursor

    @property
    def process_cursor(self) -> ProcessKey | None:
        """The process line selected under the cursor's GPU row (None: the row itself)."""
        return self.cursor_model.process_cursor

    @property
    def expanded(self) -> set[tuple[int, int]]:
        """(host, GPU index) of the rows that list their processes."""
        return self.cursor_model.expanded

    def _positions(self) -> list[tuple[int, int]]:
        return self.cursor_model.positions()

    def under_cursor(self) -> tuple[str, object] | None:
        return self.cursor_model.under_cursor()

    def row_processes(self, host: int, row: int) -> tuple[GpuProcess, ...]:
        return self.cursor_model.row_processes(host, row)

    def selected_process(self) -> GpuProcess | None:
        return self.cursor_model.selected_process()

    def selected_monitor(self) -> HostMonitor | None:
        return self.cursor_model.selected_monitor()

    def selected_job(self) -> tuple[HostMonitor, JobConfig] | None:
        return self.cursor_model.selected_job()

    def alerting_positions(self) -> list[tuple[int, int]]:
        return self.cursor_model.alerting_positions()

    def _move_cursor(self, delta: int) -> None:
        stop = self.cursor_model.step(delta, lines=self.app.screen is self)
        if stop is not None:
            self._move_to(stop)

    def _cursor_to(self, target: tuple[int, int], process: ProcessKey | None = None) -> None:
        """The cursor to row ``target`` (on its line of ``process``, if it lists it)."""
        stop = (*target, process)
        if stop in self.cursor_model.stops(lines=self.app.screen is self):
            self._move_to(stop)

    def _move_to(self, stop: Stop) -> None:
        """The cursor to ``stop``: the rows it left and reached redrawn, its row scrolled
        into view, an open detail view on its GPU."""
        old = self.cursor
        if not self.cursor_model.place(stop):
            return
        new = (stop[0], stop[1])
        self.refresh_dashboard({new[0]} | ({old[0]} if old else set()))
        section = self.sections[new[0]]
        if new[1] < len(section.rows):
            section.gpu_rows.scroll_row_visible(new[1])
        elif section.jobs.display:
            section.jobs.scroll_visible(animate=False)
        on_show = self.app.screen
        target = self.cursor_model.target()
        if old != new and isinstance(on_show, DetailScreen) and target is not None:
            on_show.show_gpu(target)
        self.app.refresh_bindings()

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

    def action_cursor(self, delta: int) -> None:
        self._move_cursor(delta)

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

    def action_next_alerting(self, direction: int) -> None:
        """``n`` / ``N``: the next (previous) row with an active alert, wrapping around;
        in a replay, the recording's next (previous) alert."""
        if self.replay_controls is not None:
            self.replay_controls.jump(forward=direction > 0)
            return
        position = self.cursor_model.alerting_next(direction)
        if position is None:
            self.notify("no row has an active alert", timeout=3)
            return
        self._cursor_to(position)

    def action_toggle_processes(self) -> None:
        """``x``: show or hide the process lines of the GPU row under the cursor."""
        host = self.cursor_model.toggle_processes()
        if host is not None:
            self.refresh_dashboard({host})
            self.app.refresh_bindings()

    def on_key(self, event: events.Key) -> None:
        """In a replay the keys that act on a machine are hidden (no binding runs them);
        pressed, they say that this is a recording. A key that cannot act now (greyed out,
        or hidden as read-only) says why (``explain_key``)."""
        replay = self.replay_controls
        if (replay is not None and replay.refuse_key(event.key)) or self.explain_key(event.key):
            event.stop()

    # --- what may run now ----------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        entry = BY_NAME.get(action)
        if entry is None or entry.app:
            return super().check_action(action, parameters)
        return self.action_state(entry)

    def action_state(self, entry: DashboardAction) -> bool | None:
        """Whether ``entry`` can act now: True, greyed out (None) or hidden (False), from
        what the action table says it needs."""
        return self.action_verdict(entry)[0]

    def action_verdict(self, entry: DashboardAction) -> tuple[bool | None, str | None]:
        """``action_state`` and, when it is not True, why (in the user's words: what is
        under the cursor, what the host or the config lacks)."""
        replay = self.replay_controls
        if entry.replay:
            if replay is None:
                return False, "this is not a recording"
            return replay.verdict(entry.action)
        if entry.name == "next_alerting" and replay is not None:
            # in a replay n/N go to the recording's next / previous alert
            if replay.replay.has_next_alert() or replay.replay.has_previous_alert():
                return True, None
            return None, "the recording has no other incident"
        monitor = self.selected_monitor()
        can = monitor.source.capabilities if monitor is not None else None
        if entry.machine and can is not None and not can.actions:
            return False, RECORDING  # a recording has no machine to act on
        if entry.live and can is not None and not can.interval:
            return None, "a recording has no sampling interval"  # nor a sampling interval
        if entry.dangerous and (reason := self.actions.read_only_reason(monitor)) is not None:
            return False, reason
        if entry.needs_gpu and self.cursor_model.target() is None:
            return None, self._no_gpu_reason()
        if entry.needs_job:
            selected = self.actions.job_for(entry)
            if selected is None:
                # The key stays: pressed, it says why it has nothing to act on (a silent
                # greyed-out key on GPU 0 reads as broken at 3 a.m.).
                return self._host_verdict(entry, monitor)
            monitor, job = selected
            if self.actions.running_run(monitor, job) is not None:
                return True, None  # shows the run's progress, connected or not
            if entry.starts_job and not job.start:
                return None, f"{job.name} has no start command in the config"
        return self._host_verdict(entry, monitor)

    def _host_verdict(
        self, entry: DashboardAction, monitor: HostMonitor | None
    ) -> tuple[bool | None, str | None]:
        """Greyed out while the host it needs is not connected, else its own check."""
        if entry.needs_host and monitor is None:
            return None, "no host"
        if entry.needs_host and monitor is not None and monitor.status.state != ConnState.CONNECTED:
            return None, f"{monitor.name} is not connected ({monitor.status.state.value})"
        check = self._checks.get(entry.name)
        return (True, None) if check is None else check()

    def _no_gpu_reason(self) -> str:
        """Why a key that acts on a GPU has none: the cursor is on a job's row, or on none."""
        where = self.cursor_model.under_cursor()
        if where is not None and where[0] == "job":
            monitor = self.selected_monitor()
            job = monitor.host.job(str(where[1])) if monitor is not None else None
            gpus = f" ({', '.join(map(str, job.gpus))})" if job and job.gpus else ""
            return f"the cursor is on job {where[1]}'s row: move to one of its GPUs{gpus}"
        return "no GPU under the cursor"

    def explain_key(self, key: str, where: Where = "dashboard") -> bool:
        """``key`` pressed for an action that cannot act now (greyed out, or hidden as
        read-only): say why in a toast, never nothing (a refused change is audited, as the
        action's own refusal is). Returns whether it did (the key is then spent)."""
        entry = next((a for a in actions_on(where) if not a.app and key in a.keys.split(",")), None)
        if entry is None:
            return False
        state, reason = self.action_verdict(entry)
        if state is True or reason is None or (state is False and not entry.dangerous):
            return False
        if state is False:  # hidden as read-only: the action refuses, says why, audits it
            getattr(self, f"action_{entry.name}")()
            return True
        what = f"{key_text(key)} ({entry.label.lower()})"
        self.notify(f"{what}: {reason}", severity="warning", timeout=6, markup=False)
        return True

    def _fixable(self) -> tuple[HostMonitor, JobConfig] | None:
        """The job ``r`` restarts now, when it can (the strip offers it)."""
        if self.action_state(BY_NAME["restart_job"]) is not True:
            return None
        return self.actions.restart_target()

    def _acts_on_host(self, name: str, host: str) -> bool:
        """Whether the host action ``name`` (``doctor``, ``swap_torch``) acts on ``host``
        now: the host under the cursor, and the action can run there (the strip offers
        "d check torch", "w swap back to cu128")."""
        monitor = self.selected_monitor()
        if monitor is None or monitor.name != host:
            return False
        return self.action_state(BY_NAME[name]) is True

    def _stoppable(self, host: str, job: str) -> bool:
        """Whether ``s`` stops ``job`` of ``host`` now (the strip offers "s stop drafter
        (frees GPUs 5-7)" for its GPUs held idle)."""
        if self.action_state(BY_NAME["stop_job"]) is not True:
            return False
        target = self.actions.stop_target()
        return target is not None and (target[0].name, target[1].name) == (host, job)

    def _killable(self, host: str) -> bool:
        """Whether ``K`` may act on ``host`` now (the strip offers "K stop jupyter-lab"): not
        read-only, connected."""
        monitor = next((m for m in self.monitors if m.name == host), None)
        if self.replay is not None or monitor is None:
            return False
        if self.actions.read_only_reason(monitor) is not None:
            return False
        return monitor.status.state == ConnState.CONNECTED

    def palette_entries(self, where: Where = "dashboard") -> list[PaletteEntry]:
        """The command palette's entries for the actions of this screen (or of the detail
        view over it) that can run now; the app's own come from the app."""
        ready = [a for a in actions_on(where) if not a.app and self.action_state(a) is True]
        monitor = self.selected_monitor()
        host = monitor.name if monitor is not None else "the host"
        out = []
        for a in ready:  # restart names the incident's job when the cursor is on none
            selected = self.actions.job_for(a)
            job = selected[1].name if selected is not None else None
            out += palette_entries([a], where, job=job, host=host)
        return out

    # --- the keys that act on a machine (``actions``) -----------------------------------
    def restart_target(self) -> tuple[HostMonitor, JobConfig] | None:
        """What ``r`` restarts: the job under the cursor, else the incident's job."""
        return self.actions.restart_target()

    def restart_alert_job(self, monitor: HostMonitor, alert: Alert) -> None:
        """``r`` in the alert history: restart the job of ``alert`` (else say why)."""
        self.actions.restart_alert_job(monitor, alert)

    def action_restart_job(self) -> None:
        self.actions.restart_job()

    def action_stop_job(self) -> None:
        self.actions.open_job_action("stop", self.actions.stop_target())

    def action_start_job(self) -> None:
        self.actions.open_job_action("start")

    def action_kill_process(self) -> None:
        self.actions.kill_process()

    def action_doctor(self) -> None:
        self.actions.doctor()

    def action_usage(self) -> None:
        self.actions.usage()

    def action_swap_torch(self) -> None:
        self.actions.swap_torch()

    # --- alerts (``alerts``) and the replay (``replay_controls``) -----------------------
    def action_alerts(self) -> None:
        self.alerts.open_history()

    def action_replay_step(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.step()

    def action_replay_step_back(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.step_back()

    def action_replay_next_alert(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.jump(forward=True)

    def action_replay_previous_alert(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.jump(forward=False)

    def action_replay_faster(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.speed(faster=True)

    def action_replay_slower(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.speed(faster=False)

    # --- the view keys -------------------------------------------------------------------
    def detail_window(self, target: DetailTarget) -> float:
        """The detail view's plot window: the one chosen last (this run or an earlier one),
        else the shortest that holds the GPU's history."""
        if self._detail_window is not None:
            return self._detail_window
        hist = target.monitor.histories.get(target.gpu_index)
        span = hist.times[-1] - hist.times[0] if hist is not None and hist.times else 0.0
        return fitting_window(span)

    def remember_detail_window(self, seconds: float) -> None:
        self._detail_window = seconds
        remember_window(seconds)

    def action_open_detail(self) -> None:
        target = self.cursor_model.target()
        if target is None or self.app.screen is not self:
            return
        detail = DashboardDetailScreen(self, target)
        process = self.selected_process()
        if process is not None:  # opened from its process line: that one stays selected
            detail.select(process)
        self.app.push_screen(detail)
        self.app.refresh_bindings()
        self.call_after_refresh(self.refresh_dashboard)

    def action_toggle_pause(self) -> None:
        if self.replay_controls is not None:
            self.replay_controls.toggle_pause()
            return
        self.paused = not self.paused
        self.refresh_dashboard()

    def _next_interval(self, faster: bool) -> float | None:
        m = self.selected_monitor()
        if m is None:
            return None
        cur = m.interval
        if faster:
            options = [x for x in INTERVALS if x < cur - 1e-9]
            return max(options) if options else None
        options = [x for x in INTERVALS if x > cur + 1e-9]
        return min(options) if options else None

    def _interval_verdict(self, *, faster: bool) -> tuple[bool | None, str | None]:
        """Greyed out at the fastest (slowest) interval there is."""
        if self._next_interval(faster) is not None:
            return True, None
        edge = INTERVALS[0] if faster else INTERVALS[-1]
        return None, f"already the {'shortest' if faster else 'longest'} interval ({edge:g} s)"

    def _change_interval(self, faster: bool) -> None:
        new = self._next_interval(faster)
        if new is None:
            return
        for m in self.monitors:
            m.set_interval(new)
        self._retime()
        self.app.refresh_bindings()
        self.refresh_dashboard()

    def action_faster(self) -> None:
        self._change_interval(faster=True)

    def action_slower(self) -> None:
        self._change_interval(faster=False)

    def action_toggle_spark(self) -> None:
        self.spark_memory = not self.spark_memory
        self.refresh_dashboard()


class DashboardDetailScreen(DetailScreen):
    """The detail view of the GPU under the dashboard's cursor. The keys the action table
    shares with it (alerts, pause, restart, the cursor...) act on the dashboard behind it:
    the cursor moves the view to the next GPU."""

    BINDINGS: ClassVar[list[BindingType]] = list(bindings("detail"))

    def __init__(self, dashboard: DashboardScreen, target: DetailTarget) -> None:
        super().__init__(
            target,
            sample_of=dashboard.shown_sample,
            palette_of=dashboard.palette_of,
            window=dashboard.detail_window(target),
            on_window=dashboard.remember_detail_window,
        )
        self.dashboard = dashboard
        self.can_kill = lambda: dashboard.action_state(BY_NAME["kill_process"]) is True
        self.read_environment = self._read_environment

    async def _read_environment(self, process: GpuProcess) -> list[str]:
        from gpumon.backends.bundle import read_environment

        m = self.target.monitor
        return await read_environment(
            m.transport,
            process,
            host_access=m.host_side_fresh(),
            host_proc=m.transport.host_proc_root,
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "dashboard" and parameters:
            _, name, params = actions.parse(str(parameters[0]))
            return self.dashboard.check_action(name, params)
        return super().check_action(action, parameters)

    def on_key(self, event: events.Key) -> None:
        """A key of the dashboard's that cannot act now says why, here too."""
        if self.dashboard.explain_key(event.key, "detail"):
            event.stop()

    async def action_dashboard(self, action: str) -> None:
        """Run the dashboard's ``action`` there."""
        await self.app.run_action(action, self.dashboard)

    def palette_entries(self) -> list[PaletteEntry]:
        return self.dashboard.palette_entries("detail")
