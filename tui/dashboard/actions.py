"""The dashboard's actions on a machine: restart / stop / start a job, the doctor, a torch swap.

``JobActions`` is the dashboard screen's controller for them: it acts on what its
``CursorModel`` has under the cursor, opens its dialogs and notifies through the screen,
and follows the runs it starts; whether a key may act now is decided from the action
table (``action_table``: dangerous, needs a job, a connected host...).

k9s is the model: a key acts on what is under the cursor, a dialog says exactly what will
happen before anything does, the result is reported in place, a key that cannot act is
greyed out, and in read-only mode (``--read-only`` or the host's ``read_only``) every key
that changes a machine is gone from the footer and the palette (the doctor stays: it
only reads). Every action is audited by the backends; a refused attempt is audited here.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.notifications import SeverityLevel
from textual.screen import Screen

from gpumon.backends.actions import (
    Action,
    ActionPlan,
    JobRun,
    JobTarget,
    Outcome,
    Session,
    audit,
)
from gpumon.backends.actions.kill import (
    KillError,
    KillPlan,
    api_server,
    hung_scheduler,
    kill_alert,
    kill_plan,
)
from gpumon.backends.actions.plan import Blocker, monitor_readings, workers_text
from gpumon.backends.alerts.incident import (
    RESTART_FIXES,
    holder,
    hung_server_fixes,
    incidents,
    screen_fix,
)
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.usage import UsageSettings
from gpumon.backends.model import GpuProcess, Health
from gpumon.backends.parsers.processes import foreign
from gpumon.backends.workloads import step_back_text
from gpumon.backends.workloads.watch import scheduler_pids
from gpumon.tui.dashboard.action_table import DashboardAction
from gpumon.tui.dashboard.cursor import CursorModel
from gpumon.tui.screens import DetailScreen

# The dialogs (kill, a job's action, the doctor, the swap) are imported when one opens: the
# doctor's and the swap's bring torchenv and the agent's own modules, memory a dashboard
# whose dialogs never open does not need.

if TYPE_CHECKING:
    from gpumon.backends.config import JobConfig
    from gpumon.backends.monitor import HostMonitor
    from gpumon.tui.screens.kill import Evidence

UNMOUNT_WAIT_S = 5.0  # on exit, for cancelled runs to record their outcome
RECORDING = "this is a recording: there is no machine behind it to act on"


class JobActions:
    """The keys that act on a machine, for the dashboard ``screen`` (its dialogs and
    notifications), on what ``cursor`` has under it; ``session`` owns the runs (the app's)."""

    def __init__(
        self, screen: Screen[None], cursor: CursorModel, *, session: Session, read_only: bool
    ) -> None:
        self.screen = screen
        self.cursor = cursor
        self.monitors = cursor.monitors
        self.session = session
        self.read_only = read_only
        self._job_runs: list[JobRun] = []  # the runs this dashboard started
        self.usage_settings = UsageSettings()  # ``u``'s price (the config's [usage])

    def notify(self, message: str, **kwargs: Any) -> None:
        self.screen.notify(message, **kwargs)

    # --- what may run now ---------------------------------------------------------------
    def read_only_reason(self, monitor: HostMonitor | None) -> str | None:
        """Why nothing may change ``monitor``'s host (None when changes are allowed): a
        recording first (``gpumon replay`` runs read-only too, but that is not why)."""
        if monitor is not None and not monitor.source.capabilities.actions:
            return RECORDING
        if self.read_only:
            return "gpumon runs with --read-only"
        if monitor is not None and monitor.host.read_only:
            return f"host {monitor.host.name} is read_only in the config"
        return None

    def running_run(self, monitor: HostMonitor, job: JobConfig) -> JobRun | None:
        """The run going for ``job`` (its key then shows its progress, connected or not)."""
        return self.session.runs.running(monitor.host.name, job.name)

    def refuse(self, what: str, reason: str, host: str, job: str | None = None) -> None:
        """Say no, and audit the attempt (on a recording there is no machine to audit an
        attempt on: only say so)."""
        if reason == RECORDING:
            self.notify(f"{what}: {reason}", title="Recording", severity="warning")
            return
        self.notify(f"{what} refused: {reason}", title="Read-only", severity="warning")
        try:
            audit.record(what, host, "refused", job=job, detail=f"read-only: {reason}")
        except OSError as e:
            self.notify(f"audit log not written: {e}", severity="error")

    # --- terminate a GPU process ----------------------------------------------------------
    def process_to_kill(self) -> tuple[HostMonitor, GpuProcess, str | None] | None:
        """The process ``K`` acts on, with how it was chosen when nobody selected it: the
        one selected in the detail view on show, else the process line under the cursor,
        else another container's biggest holder of the GPU under the cursor, else the
        process an incident's K stops (``incident_holder``: the strip offers "K stop
        jupyter-lab", "K stop its API server (PID 4312)": from a job's row or a GPU
        without such a process too), else the biggest process of the GPU under the
        cursor."""
        screen = self.screen.app.screen
        if isinstance(screen, DetailScreen):
            process = screen.selected_process()
            return None if process is None else (screen.target.monitor, process, None)
        monitor = self.cursor.selected_monitor()
        target = self.cursor.target()
        if monitor is None or target is None:  # a job's row: the strip's "K stop jupyter-lab"
            return self.incident_holder()
        if self.cursor.process_cursor is not None:  # a process line: that one, or none
            selected = self.cursor.selected_process()
            return None if selected is None else (monitor, selected, None)
        sample = monitor.latest
        gpu = (
            next((g for g in sample.gpus if g.index == target.gpu_index), None) if sample else None
        )
        procs = sample.processes_for(gpu) if sample is not None and gpu is not None else ()
        others = foreign(procs, monitor.host.container)
        if not others and (held := self.incident_holder()) is not None:
            return held  # the strip's "K stop jupyter-lab", from a GPU with no process too
        if not procs:
            return None
        pick = max(others or procs, key=lambda p: p.memory_mib or 0)
        row = f"the cursor is on GPU {target.gpu_index}'s row"
        first = " (another container's first)" if others else ""
        why = (
            f"{row}: its only process"
            if len(procs) == 1
            else f"{row}: the biggest of its {len(procs)} processes{first}; x lists them"
        )
        return monitor, pick, why

    def incident_holder(self) -> tuple[HostMonitor, GpuProcess, str] | None:
        """The process an active incident's ``K`` stops, with why it was chosen, the most
        urgent incident's first: the one it names as its cause, another container's
        memory on the GPU that ran out ("6.0 GiB held by CT 201 jupyter-lab"), a vLLM
        server's API server its fix names ("K stop its API server (PID 4312)"), or a hung
        SGLang server's first scheduler ("K stop its scheduler (PID 1020)"). None when no
        incident names one or the holder is no longer listed."""
        for m in self.monitors:
            sample = m.latest
            if sample is None:
                continue
            for incident in incidents(m.alerts.active()):
                cause = incident.cause
                fix = next((f for f in incident.fixes if f.key == "K"), None)
                named = api_server(cause, m.host.container) or hung_scheduler(cause, sample)
                if named is not None and fix is not None:
                    engine = "sglang" if cause.kind == "sglang_hung" else "vllm"
                    port = cause.facts.port
                    of = f" of {engine} :{port}" if port is not None else ""
                    return m, named, f"the incident's fix{of}: {fix.words} (the strip's K)"
                gpu_index = cause.gpu
                held = holder(cause, incident.alerts)
                gpu = next((g for g in sample.gpus if g.index == gpu_index), None)
                if held is None or gpu is None:
                    continue
                others = foreign(sample.processes_for(gpu), m.host.container)
                if others:
                    pick = max(others, key=lambda p: p.memory_mib or 0)
                    why = f"the incident's cause: {held} on GPU {gpu_index} (the strip's K)"
                    return m, pick, why
        return None

    def kill_verdict(self) -> tuple[bool | None, str | None]:
        """Whether ``K`` has a process to act on (True), else greyed out (None) and why."""
        if self.process_to_kill() is not None:
            return True, None
        screen = self.screen.app.screen
        target = screen.target if isinstance(screen, DetailScreen) else self.cursor.target()
        if target is None:
            return None, "no GPU under the cursor"
        if target.monitor.latest is None:
            return None, f"no process list from {target.monitor.name} yet"
        return None, f"GPU {target.gpu_index} runs no compute process: nothing to terminate"

    def kill_process(self) -> None:
        chosen = self.process_to_kill()
        if chosen is None:
            self.notify(f"terminate: {self.kill_verdict()[1]}", severity="warning")
            return
        self.open_kill(*chosen)

    def stop_blocker(self, monitor: HostMonitor, blocker: Blocker) -> None:
        """``K`` in the restart dialog: the kill dialog for the process in the way of the
        restart (another container's, on the GPU the job ran out on), the biggest first."""
        sample = monitor.latest
        gpu = next((g for g in sample.gpus if g.index == blocker.gpu), None) if sample else None
        procs = sample.processes_for(gpu) if sample is not None and gpu is not None else ()
        others = foreign(procs, monitor.host.container)
        wanted = {h.host_pid for h in blocker.holders}
        found = [p for p in others if p.host_pid in wanted] or list(others)
        if not found:
            self.notify(f"{blocker.text()}: it is no longer listed", severity="warning")
            return
        pick = max(found, key=lambda p: p.memory_mib or 0)
        self.open_kill(monitor, pick, f"in the way of the restart: {blocker.text()}")

    def open_kill(self, monitor: HostMonitor, process: GpuProcess, why: str | None) -> None:
        """The kill dialog for ``process`` (``why``: how it was chosen), where allowed."""
        reason = self.read_only_reason(monitor)
        if reason is not None:
            self.refuse("kill", reason, monitor.host.name)
            return
        try:
            plan = kill_plan(
                monitor.host.name,
                process,
                host_access=monitor.host_side_fresh(),
                container=monitor.host.container,
                host_proc=monitor.transport.host_proc_root,
            )
        except KillError as e:
            self.notify(str(e), title="Cannot terminate", severity="warning", markup=False)
            return
        from gpumon.tui.screens.kill import KillScreen

        seconds, evidence = self.kill_evidence(monitor, process, plan)
        dialog = KillScreen(monitor.transport, plan, why=why, evidence=evidence, evidence_s=seconds)
        self.screen.app.push_screen(dialog)

    def kill_evidence(
        self, monitor: HostMonitor, process: GpuProcess, plan: KillPlan
    ) -> tuple[float, Evidence | None]:
        """How K keeps the process's evidence before its signal, as a restart keeps a
        job's (the session's gatherer, the default ``evidence_s``): its stacks and
        flight-recorder dumps by its PID where it has one in the watched container (the
        host-side plan signals that one by its host PID too); another container's or the
        host's own, known by its host PID only, has its stacks taken on the Proxmox host
        and the rest kept without it."""
        gather = self.session.runs.evidence
        if gather is None:
            return 0.0, None
        from gpumon.backends.config import JobConfig

        label = "".join(c if c.isalnum() or c in "._-" else "_" for c in process.name or "")
        job = JobConfig(name=f"{label or 'process'}-{plan.pid}")
        pids = (process.pid,) if process.pid is not None else ()
        host_pids = () if pids or not plan.on_host else (plan.pid,)
        target = JobTarget.from_monitor(monitor, read_only=self.read_only)
        # No job's incident: the bundle is of the alert the kill answers (its holder's)
        refs = monitor.latest.gpu_refs.of_process(process) if monitor.latest else ()
        gpus = {*process.gpus, *(r.index for r in refs if r.index is not None)}
        alert = kill_alert(monitor.alerts.history(), process, gpus)
        seconds = job.evidence_s
        keep = partial(gather, target, job, pids, seconds, alert=alert, host_pids=host_pids)
        return seconds, keep

    # --- the incident's fix: one key from anywhere ----------------------------------------
    def incident_job(self) -> tuple[HostMonitor, JobConfig, Alert] | None:
        """The job of the newest active critical alert that names one (by its job, else by
        its GPU), else of the newest warning that a restart fixes (a stall seen early by
        its NCCL spin: the strip offers "r restart drafter" from its warning on, issue 36),
        with its monitor and the alert; None without such an alert."""
        found = []
        for m in self.monitors:
            for a in m.alerts.active():
                critical = a.severity is Health.CRITICAL
                if not critical and a.kind not in RESTART_FIXES:
                    continue
                if (job := alert_job(m, a)) is not None:
                    found.append((critical, a.time, a.last_seen, m, job, a))
        if not found:
            return None
        *_, monitor, job, alert = max(found, key=lambda f: (f[0], f[1], f[2]))
        return monitor, job, alert

    def restart_target(self) -> tuple[HostMonitor, JobConfig] | None:
        """What ``r`` restarts: the job under the cursor, else the incident's job."""
        selected = self.cursor.selected_job()
        if selected is not None:
            return selected
        incident = self.incident_job()
        return None if incident is None else (incident[0], incident[1])

    def idle_job(self) -> tuple[HostMonitor, JobConfig] | None:
        """The job of the newest active ``gpu_idle_held`` that names one (its GPUs held
        and idle: stopping it frees them, the strip offers ``s``), with its monitor; None
        without one."""
        found = [
            (a.time, m, job)
            for m in self.monitors
            for a in m.alerts.active()
            if a.kind == "gpu_idle_held" and a.job is not None
            if (job := m.host.job(a.job)) is not None
        ]
        if not found:
            return None
        _, monitor, job = max(found, key=lambda f: f[0])
        return monitor, job

    def stop_target(self) -> tuple[HostMonitor, JobConfig] | None:
        """What ``s`` stops: the job under the cursor, else the job holding its GPUs idle
        (``idle_job``)."""
        return self.cursor.selected_job() or self.idle_job()

    def job_for(self, entry: DashboardAction) -> tuple[HostMonitor, JobConfig] | None:
        """The job ``entry`` acts on now (with its monitor): the one under the cursor, or
        for an action on the incident's job without one there, that job (``s``: the job
        holding its GPUs idle)."""
        if entry.name == "stop_job":
            return self.stop_target()
        return self.restart_target() if entry.incident_job else self.cursor.selected_job()

    def no_job_reason(self, action: Action) -> str:
        """Why ``action`` has nothing to act on here (the cursor is on a GPU without a job)."""
        monitor = self.cursor.selected_monitor()
        where = self.cursor.under_cursor()
        row = f"GPU {where[1]}" if where is not None and where[0] == "gpu" else "this row"
        if monitor is None:
            return f"{action}: no host"
        jobs = monitor.host.jobs
        if not jobs:
            return f"{action}: {monitor.name} has no configured job"
        owners = ", ".join(f"{j.name} (GPUs {', '.join(map(str, j.gpus))})" for j in jobs)
        return f"{action}: {row} runs no configured job; move to {owners}"

    # --- restart / stop / start ---------------------------------------------------------
    def restart_job(self) -> None:
        target = self.restart_target()
        if target is None:
            self.notify(self.no_job_reason("restart"), severity="warning", timeout=6)
            return
        self.open_job_action("restart", target)

    def restart_alert_job(self, monitor: HostMonitor, alert: Alert) -> None:
        """``r`` in the alert history: restart the job of ``alert`` (else say why)."""
        job = alert_job(monitor, alert)
        if job is None:
            self.notify(f"restart: {owner_words(monitor, alert)}", severity="warning", timeout=8)
            return
        self.open_job_action("restart", (monitor, job))

    def open_job_action(
        self, action: Action, selected: tuple[HostMonitor, JobConfig] | None = None
    ) -> None:
        """The dialog for ``action`` on ``selected`` (default: the job under the cursor), or
        the progress view of the run already going for that job (never a second run)."""
        selected = selected or self.cursor.selected_job()
        if selected is None:
            self.notify(self.no_job_reason(action), severity="warning", timeout=6)
            return
        monitor, job = selected
        reason = self.read_only_reason(monitor)
        if reason is not None:
            self.refuse(action, reason, monitor.host.name, job.name)
            return
        target = JobTarget.from_monitor(monitor, read_only=self.read_only)
        start = partial(self._start_run, monitor, target)
        explain = AfterRun(monitor, job, monitor.clock())
        stop = partial(self.stop_blocker, monitor)
        running = self.running_run(monitor, job)
        from gpumon.tui.screens import JobActionScreen

        if running is not None:
            screen = JobActionScreen(
                target, job, running.plan.action, start_run=start, run=running, explain=explain
            )
        else:
            state, alert = job_context(monitor, job)
            screen = JobActionScreen(
                target,
                job,
                action,
                start_run=start,
                state=state,
                last_alert=alert,
                explain=explain,
                stop_holder=stop,
            )
        self.screen.app.push_screen(screen)

    def _start_run(self, monitor: HostMonitor, target: JobTarget, plan: ActionPlan) -> JobRun:
        """Start ``plan`` in the session's registry (or join the run already going) and
        follow it to its end, whether or not its view stays open."""
        run = self.session.runs.start(plan, target)
        if run.plan is plan:
            self._job_runs = [r for r in self._job_runs if not r.done] + [run]
            self.screen.run_worker(
                self._after_run(monitor, run), group="job-runs", exit_on_error=False
            )
        return run

    async def _after_run(self, monitor: HostMonitor, run: JobRun) -> None:
        outcome = await run.wait()  # the session's job watch has seen it finish
        plan = run.plan
        job = plan.job
        severity: SeverityLevel = "warning"
        if outcome.status in ("ok", "failed"):
            severity = "information" if outcome.ok else "error"
        self.notify(
            outcome.message, title=f"{plan.action} {job.name}: {outcome.status}", severity=severity
        )
        self.screen.app.refresh_bindings()

    async def cancel_runs(self) -> None:
        """Leaving gpumon: cancel the runs started here that can still be cancelled (before
        their start step) and give them a moment to write their outcome to the audit."""
        pending = [r for r in self._job_runs if not r.done]
        for run in pending:
            run.cancel()
        if pending:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(
                    asyncio.gather(*(r.wait() for r in pending), return_exceptions=True),
                    UNMOUNT_WAIT_S,
                )

    # --- doctor and torch swap ----------------------------------------------------------
    def doctor(self) -> None:
        monitor = self.cursor.selected_monitor()
        if monitor is None:
            self.notify("doctor: no host under the cursor", severity="warning")
            return
        from gpumon.tui.screens import DoctorScreen

        self.screen.app.push_screen(DoctorScreen(monitor.host, monitor.transport))

    def usage(self) -> None:
        monitor = self.cursor.selected_monitor()
        if monitor is None:
            self.notify("usage: no host under the cursor", severity="warning")
            return
        from gpumon.tui.screens import UsageScreen

        self.screen.app.push_screen(UsageScreen(monitor.name, self.usage_settings))

    def swap_torch(self) -> None:
        monitor = self.cursor.selected_monitor()
        if monitor is None:
            self.notify("torch swap: no host under the cursor", severity="warning")
            return
        reason = self.read_only_reason(monitor)
        if reason is not None:
            self.refuse("swap-torch", reason, monitor.host.name)
            return
        from gpumon.tui.screens import SwapScreen

        back = swap_back_variant(monitor)
        swap = SwapScreen(monitor.host, monitor.transport, read_only=self.read_only, variant=back)
        self.screen.app.push_screen(swap)


def swap_back_variant(monitor: HostMonitor) -> str | None:
    """The variant an active alert of ``monitor``'s host says torch was swapped from (a job
    slow or idle after the swap: its incident's ``w swap back to cu128``); None: none."""
    swaps = [a.facts.torch_swap for a in monitor.alerts.active() if a.facts.torch_swap]
    latest = max(swaps, key=lambda s: s.at, default=None)
    return None if latest is None else latest.variant


def alert_job(monitor: HostMonitor, alert: Alert) -> JobConfig | None:
    """The configured job ``alert`` is about: the one it names, else the one whose GPUs
    include its GPU (None: neither)."""
    if alert.job is not None:
        return monitor.host.job(alert.job)
    if alert.gpu is None:
        return None
    return next((j for j in monitor.host.jobs if alert.gpu in j.gpus), None)


def owner_words(monitor: HostMonitor, alert: Alert) -> str:
    """What can be done for the owner of ``alert`` that is no configured job, as the GPU
    row's owner column names it: a server (``sglang:30000``: its stacks and ``K`` on its
    scheduler), another container's or the host's process holding the GPU, the program
    running on it (``K`` stops either); else that nothing runs there."""
    sample = monitor.latest
    facts = alert.facts
    if facts.port is not None:
        engine = "vllm" if alert.kind.startswith("vllm") else "sglang"
        if engine == "vllm":
            where = f" on GPU {alert.gpu}'s row" if alert.gpu is not None else ""
            return f"vllm:{facts.port} is a server, not a configured job: K{where} stops it"
        gpus = monitor.workloads.server_gpus(sample).get(facts.port, ())
        pids = facts.schedulers or scheduler_pids(sample, gpus)
        said = ", ".join(screen_fix(f) for f in hung_server_fixes(pids, facts.command))
        return f"sglang:{facts.port} is a server, not a configured job: {said}"
    if facts.held is not None:
        on = f"GPU {alert.gpu}" if alert.gpu is not None else "the GPU"
        return f"{on} is held by {facts.held.holder}, not a job: K stops it"
    gpu = None
    if sample is not None and alert.gpu is not None:
        gpu = next((g for g in sample.gpus if g.index == alert.gpu), None)
    procs = sample.processes_for(gpu) if sample is not None and gpu is not None else ()
    if procs:
        top = max(procs, key=lambda p: p.memory_mib or 0)
        pid = top.shown_pid
        name = top.short_name or "a process"
        said = f"{name} (PID {pid})" if pid is not None else name
        return f"GPU {alert.gpu} runs {said}, not a configured job: K on its row stops it"
    where = f"GPU {alert.gpu}" if alert.gpu is not None else monitor.name
    return f"this alert names no job ({where} runs none)"


class AfterRun:
    """What the monitor saw of ``job`` after its run succeeded, for the dialog: the
    launcher's workers on the GPUs ("started PID 13025 (its workers 15200-15202 hold GPUs
    5-7)", when the outcome did not say it) and the step counter going back since
    ``opened`` (the dialog's opening); None while there is nothing to say."""

    def __init__(self, monitor: HostMonitor, job: JobConfig, opened: float) -> None:
        self.monitor, self.job, self.opened = monitor, job, opened
        self._ok_at: float | None = None  # when the success was first seen

    def __call__(self, outcome: Outcome) -> str | None:
        if self._ok_at is None:
            self._ok_at = self.monitor.clock()
        notes = []
        if outcome.pid is not None and "its worker" not in outcome.message:
            readings = monitor_readings(self.monitor)()
            if readings is not None and readings.time >= self._ok_at:  # after the start
                workers = workers_text(readings, self.job.gpus, outcome.pid)
                if workers:
                    notes.append(f"started PID {outcome.pid} ({workers})")
        back = step_back_since(self.monitor, self.job, self.opened)
        if back is not None:
            notes.append(back)
        return "\n".join(notes) or None


def step_back_since(monitor: HostMonitor, job: JobConfig, since: float) -> str | None:
    """The job's step counter went back after ``since`` (a restart resumed from a
    checkpoint), in words; None if it did not."""
    tracker = monitor.workloads.jobs.get(job.name)
    back = tracker.step_back if tracker is not None else None
    if back is None or monitor.workloads.wall_of(back.time) < since:
        return None
    return step_back_text(back)


def job_context(monitor: HostMonitor, job: JobConfig) -> tuple[str | None, str | None]:
    """(state, last alert) of ``job`` as the monitor sees it: ``crashed: OOM on GPU 6``
    (as the jobs pane says it: a reason with a bracket of its own, "OOM on GPU 6 (GPU 6:
    6.0 GiB held by CT 201 jupyter-lab)", is not nested in another) and the worst, then
    newest, active alert of the job (or of one of its GPUs): its CUDA OOM, not the warning
    that CT 201's jupyter, which outlives it, still holds GPU 6."""
    tracker = monitor.workloads.jobs.get(job.name)
    state = None
    if tracker is not None:
        state = tracker.state.value
        if tracker.crash_reason:
            state += f": {tracker.crash_reason}"
    alerts = [a for a in monitor.alerts.active() if a.job == job.name]
    alerts = alerts or [a for a in monitor.alerts.active() if a.gpu in job.gpus]
    newest = max(alerts, key=lambda a: (a.severity.rank, a.time), default=None)
    return state, newest.message if newest else None
