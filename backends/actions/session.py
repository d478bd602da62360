"""``Session``: what one gpumon run (the dashboard, or a headless ``restart``) shares
between its monitors and its actions.

    session = Session()
    session.watch(monitor)                    # before monitor.start()
    run = session.runs.start(plan, target)    # at most one run per job, whoever asks
    ...
    await session.close()                     # before the monitors stop

It owns the run registry (the dashboard's keys, the headless restart and the automatic
restarts all start their runs there, so they never race), and a ``JobWatch`` per watched
monitor that the registry tells about every finished run, once: the job's alerts clear
and its tracker follows the outcome, whoever started the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.actions.job_watch import JobWatch
from gpumon.backends.actions.run import Gather, RunRegistry

if TYPE_CHECKING:
    from gpumon.backends.monitor.state import HostMonitor

__all__ = ["Session"]


class Session:
    def __init__(self, evidence: Gather | None = None) -> None:
        # evidence: how a run keeps the job's evidence before its stop (the bundle layer's
        # keep_evidence, given by the runtime; None: runs keep none)
        self.runs = RunRegistry(evidence)
        self.watches: list[JobWatch] = []

    def watch(self, monitor: HostMonitor) -> JobWatch | None:
        """Follow ``monitor``'s jobs (auto-restart included); None for a source that
        reaches no machine (a replay): it has no jobs to act on."""
        if not monitor.source.capabilities.actions:
            return None
        watch = JobWatch(monitor, self.runs)
        watch.attach()
        self.watches.append(watch)
        return watch

    async def unwatch(self, monitor: HostMonitor) -> None:
        """Stop following ``monitor``'s jobs (it stops alone: a host a reload dropped, the
        fleet's node left); its automatic restarts still waiting are cancelled."""
        for watch in [w for w in self.watches if w.monitor is monitor]:
            self.watches.remove(watch)
            await watch.detach()

    def restarting(self, host: str, job: str) -> bool:
        """Whether a restart of ``job`` runs now, or an automatic one waits out its delay
        (the crash's incident must not resolve as "recovered" before it ran)."""
        if self.runs.running(host, job) is not None:
            return True
        for watch in self.watches:
            auto = watch.auto.get(job) if watch.monitor.name == host else None
            if auto is not None and auto.pending is not None and not auto.pending.done():
                return True
        return False

    async def close(self) -> None:
        """Stop watching: automatic restarts still waiting out their delay are cancelled.
        Runs in progress go on to their end (their outcome is audited)."""
        watches, self.watches = self.watches, []
        for watch in watches:
            await watch.detach()
