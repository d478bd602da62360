"""What a monitor does about its jobs' restarts: after any restart, stop or start of one
of its jobs (by a person, headless, or automatic) it clears the job's OOM alerts and
tells the job tracker; for jobs with ``auto_restart = true`` it restarts them after an
OOM crash, within the job's limits, raising an alert for each automatic restart.

A ``Session`` makes one per watched monitor, on the session's run registry: every run of
that registry reaches ``on_finished`` exactly once, whoever started it.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from gpumon.backends.actions.audit import local_user
from gpumon.backends.actions.run import JobRun, RunRegistry
from gpumon.backends.alerts.engine import log_key_prefix
from gpumon.backends.alerts.facts import AlertFacts, Restart
from gpumon.backends.alerts.incident import failure_kind
from gpumon.backends.alerts.kinds import Tag, tagged
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health

if TYPE_CHECKING:
    from gpumon.backends.actions.autorestart import AutoRestarter
    from gpumon.backends.monitor.state import HostMonitor

# A job died: its OOM or crash line, or its GPU's memory collapsing (``oom_death``, before
# or without any line in its log): restarted at once, as its alert is raised.
CRASH_KINDS = tagged(Tag.CRASH)
# Of those, the OOMs: the only crashes an automatic restart follows (the job's own crash
# would crash it again).
OOM_CRASHES = tagged(Tag.CRASH, Tag.OOM)


class JobWatch:
    """Follows ``monitor``'s jobs through ``runs`` (``attach``/``detach`` around its life)."""

    def __init__(self, monitor: HostMonitor, runs: RunRegistry) -> None:
        self.monitor = monitor
        self.runs = runs
        self.auto: dict[str, AutoRestarter] = {}

    def attach(self) -> None:
        self.runs.finished.add(self.on_finished)
        jobs = [j for j in self.monitor.host.jobs if j.auto_restart and j.start]
        if not jobs:
            return
        from gpumon.backends.actions.autorestart import AutoRestarter
        from gpumon.backends.actions.plan import JobTarget

        target = JobTarget.from_monitor(self.monitor, read_only=self.monitor.host.read_only)
        for job in jobs:
            self.auto[job.name] = AutoRestarter(
                target, job.name, alert=partial(self._auto_alert, job.name), registry=self.runs
            )
        self.monitor.alerts.add_listener(self._on_alert)

    async def detach(self) -> None:
        self.runs.finished.remove(self.on_finished)
        self.monitor.alerts.remove_listener(self._on_alert)
        for auto in self.auto.values():
            await auto.close()

    def on_finished(self, run: JobRun) -> None:
        """A finished run: when it is one of this host's jobs, the job's alerts and
        tracker follow its outcome."""
        outcome, plan, monitor = run.outcome, run.plan, self.monitor
        if outcome is None or plan.host != monitor.name or not outcome.ok:
            return
        job = plan.job
        tracker = monitor.workloads.jobs.get(job.name)
        now = monitor.workloads.now()  # the tracker's clock
        if plan.action == "stop":
            if tracker is not None:
                tracker.mark_stopped(now)
            return
        if job.log:  # running again: its OOM / crash alerts are over
            monitor.alerts.clear(log_key_prefix(job.log))
        monitor.alerts.job_runs_again(job.name)  # nor down since its log's last failure
        for gpu in job.gpus:
            monitor.alerts.clear(f"oom_death:{gpu}:")
        if tracker is not None:
            tracker.restarted(now)
        monitor.workloads.restarted(job.name)
        wall = monitor.clock()  # alerts are dated on the wall clock, the trackers are not
        monitor.alerts.raise_alert(  # the incident's record (``Incident.restarts``)
            "job_restarted",
            Health.INFO,
            restart_record(run, wall),
            job=job.name,
            at=wall,
            active=False,
        )
        auto = self.auto.get(job.name)
        if auto is not None and run.automatic is None:
            auto.reset()  # a person restarted it: automatic restarts are re-armed

    def _on_alert(self, alert: Alert) -> None:
        # Only live crashes: a job found crashed in its log's backlog at start is not
        # restarted behind the user's back (listeners never see backlog alerts).
        auto = self.auto.get(alert.job or "")
        if auto is not None and alert.kind in CRASH_KINDS:
            oom = failure_kind(alert) in OOM_CRASHES  # a job down since its log's OOM too
            auto.notify(True, alert.message, oom=oom, crash_key=alert.key)

    def _auto_alert(self, job: str, severity: Health, message: str, restart: Restart) -> None:
        facts = AlertFacts(restart=restart)
        self.monitor.alerts.raise_alert("auto_restart", severity, message, job=job, facts=facts)


def restart_record(run: JobRun, at: float) -> str:
    """What the incident keeps of a successful restart or start: "restarted by root at
    05:40:13 (new PID 2433201)"; an automatic one says so ("restarted by gpumon
    (auto_restart) at ...")."""
    done = "started" if run.plan.action == "start" else "restarted"
    who = "gpumon (auto_restart)" if run.automatic else local_user()
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    pid = run.outcome.pid if run.outcome is not None else None
    new = f" (new PID {pid})" if pid is not None else ""
    return f"{done} by {who} at {stamp}{new}"
