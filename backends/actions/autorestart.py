"""Automatic restart after an OOM crash (per job ``auto_restart = true``; off by default).

``AutoRestartPolicy`` is the pure decision: restart or not, after what delay, or give up
(at most ``max_restarts`` automatic restarts per ``restart_window`` seconds, with doubling
backoff). ``AutoRestarter`` is the small driver the monitor calls with what it sees
(``notify(crashed, reason, oom=..., crash_key=...)``: whether the crash was an OOM comes
typed, from the alert's kind, never read out of ``reason``'s words); it raises an alert for
every automatic restart (WARNING) and when it gives up (CRITICAL) through the ``alert``
callback, with what it decided as the alert's facts (``Restart``), and runs the restart
through the session's run registry, so it never races a restart a person started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpumon.backends.actions import audit
from gpumon.backends.actions.jobs import JobError
from gpumon.backends.actions.params import ParamError
from gpumon.backends.actions.plan import JobTarget, find_job, make_plan
from gpumon.backends.actions.run import Outcome, RunRegistry
from gpumon.backends.alerts.facts import Restart
from gpumon.backends.backoff import backoff_s
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import Health
from gpumon.backends.transport.base import TransportError

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 10.0
BACKOFF_CAP_S = 300.0

# The alert's severity, its message and what the restart decided or met (its facts).
AlertSink = Callable[[Health, str, Restart], None]


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(frozen=True, slots=True)
class Decision:
    restart: bool
    delay_s: float
    give_up: bool  # True once, when the limit is reached (raise a critical alert)
    message: str
    attempt: int | None = None  # which automatic restart of its window this is


class AutoRestartPolicy:
    """Decides, from crash reports alone, whether to restart a job automatically.

    No I/O and no clock of its own: ``now`` comes in with each call. ``decide`` with
    ``restart=True`` counts that restart. After giving up it stays off until ``reset()``
    (a person restarting the job by hand re-arms it).
    """

    def __init__(
        self,
        job: JobConfig,
        *,
        backoff_first_s: float = BACKOFF_FIRST_S,
        backoff_cap_s: float = BACKOFF_CAP_S,
    ) -> None:
        self.job = job.name
        self.enabled = job.auto_restart
        self.max_restarts = job.max_restarts
        self.window = job.restart_window
        self.backoff_first_s, self.backoff_cap_s = backoff_first_s, backoff_cap_s
        self.restarts: list[float] = []  # times of automatic restarts decided
        self.gave_up = False

    def reset(self) -> None:
        self.restarts.clear()
        self.gave_up = False

    def decide(
        self, now: float, crashed: bool, reason: str | None, *, oom: bool = False
    ) -> Decision:
        """Whether to restart a job that ``crashed`` of ``reason`` (words, said in the
        decision's message); ``oom``: the crash was an OOM, the only one it follows."""
        if not crashed:
            return Decision(False, 0.0, False, f"{self.job} is not crashed")
        what = reason or "no reason known"
        if not self.enabled:
            return Decision(False, 0.0, False, f"{self.job} crashed ({what}); auto-restart is off")
        if not oom:
            return Decision(
                False, 0.0, False, f"{self.job} crashed ({what}); auto-restart follows OOMs only"
            )
        if self.gave_up:
            return Decision(
                False, 0.0, False, f"{self.job} crashed ({what}); auto-restart gave up earlier"
            )
        self.restarts = [t for t in self.restarts if now - t < self.window]
        done = len(self.restarts)
        if done >= self.max_restarts:
            self.gave_up = True
            return Decision(
                False,
                0.0,
                True,
                f"{self.job} crashed again ({what}) after {done} automatic restarts in "
                f"{_span(self.window)}; auto-restart gives up: restart it by hand",
            )
        delay = backoff_s(done, first=self.backoff_first_s, cap=self.backoff_cap_s)
        self.restarts.append(now)
        return Decision(
            True,
            delay,
            False,
            f"{self.job} crashed ({what}); automatic restart {done + 1}/{self.max_restarts} "
            f"in {delay:g} s",
            done + 1,
        )


_EDGE = object()


class AutoRestarter:
    """Drives one job's automatic restarts. Call ``notify`` whenever the job's state is
    known (every sample is fine: a crash counts once, by ``crash_key`` when given, else by
    the change from not crashed to crashed). Must be used on the event loop."""

    def __init__(
        self,
        target: JobTarget,
        job_name: str,
        *,
        alert: AlertSink,
        registry: RunRegistry,
        policy: AutoRestartPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.target = target
        self.job = find_job(target.host, job_name)
        self.alert = alert
        self.registry = registry
        self.policy = policy or AutoRestartPolicy(self.job)
        self.clock = clock
        self.pending: asyncio.Task[Outcome | None] | None = None
        self._in_crash = False
        self._last_key: object = None

    def notify(
        self,
        crashed: bool,
        reason: str | None = None,
        *,
        oom: bool = False,
        crash_key: object = None,
    ) -> Decision | None:
        """Tell the driver what the monitor sees (``oom``: the crash was an OOM). Returns
        the decision taken for a new crash, None when there was nothing new to decide."""
        if not crashed:
            self._in_crash = False
            return None
        key = _EDGE if crash_key is None else crash_key
        if (key is _EDGE and self._in_crash) or (key is not _EDGE and key == self._last_key):
            return None
        self._in_crash, self._last_key = True, key
        if self.pending is not None and not self.pending.done():
            return None  # a restart is already on its way
        if self.registry.running(self.target.host.name, self.job.name) is not None:
            return None  # someone is restarting it right now
        decision = self.policy.decide(self.clock(), True, reason, oom=oom)
        most = self.policy.max_restarts
        if decision.restart:
            due = Restart("due", decision.attempt, most, decision.delay_s)
            self.alert(Health.WARNING, f"auto-restart: {decision.message}", due)
            self.pending = asyncio.get_running_loop().create_task(
                self._restart_later(decision.delay_s, reason or "crash")
            )
        elif decision.give_up:
            gave_up = Restart("gave_up", attempts=most)
            self.alert(Health.CRITICAL, f"auto-restart: {decision.message}", gave_up)
        return decision

    def reset(self) -> None:
        """Re-arm after a person restarted the job by hand."""
        self.policy.reset()

    async def close(self) -> None:
        """Cancel a restart that is still waiting out its delay."""
        task, self.pending = self.pending, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _restart_later(self, delay: float, reason: str) -> Outcome | None:
        await asyncio.sleep(delay)
        name, host = self.job.name, self.target.host.name
        try:
            plan = await make_plan(self.target, name, "restart", state=f"crashed: {reason}")
        except (JobError, ParamError, TransportError, OSError) as e:
            not_started = Restart("not_started", why=str(e))
            self.alert(Health.WARNING, f"auto-restart of {name} could not start: {e}", not_started)
            with contextlib.suppress(OSError):
                audit.record(
                    "auto-restart", host, "failed", job=name, detail=f"automatic ({reason}): {e}"
                )
            return None
        run = self.registry.start(plan, self.target, automatic=f"crash: {reason}")
        outcome = await run.wait()
        if outcome.ok:
            self._in_crash = False  # the next crash is a new one even without a key
        else:
            ended = Restart("ended", why=f"{outcome.status}: {outcome.message}")
            self.alert(
                Health.WARNING, f"auto-restart of {name} {outcome.status}: {outcome.message}", ended
            )
        return outcome
