"""Restarting, stopping and starting a job: the confirmation plan, the run with its steps,
and the registry that keeps one run per job.

    target = JobTarget.from_monitor(monitor, read_only=app_read_only)
    plan = await make_plan(target, "drafter", "restart", state="crashed", last_alert=text)
    plan = plan.with_params({"token_budget": "32768"})    # ParamError on a bad name/value
    run = session.runs.start(plan, target, progress=lambda step, message: ...)
    run.cancel()                                           # CancelResult; refused from start
    outcome = await run.wait()                             # Outcome: ok/failed/cancelled/refused

A restart is: keep the evidence (``Gather``: the job's stacks and flight-recorder dumps
into a bundle, at most the job's ``evidence_s``; ``skip_evidence()`` goes on without it),
stop (the job's ``stop`` command, else SIGTERM to its process group, SIGKILL
after ``stop_timeout``), wait until the job's GPUs use less than ``free_mib``, start it
detached, then verify that it is alive after ``verify_s`` and its log grew. Every run,
refused ones included, is appended to the audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from gpumon.backends.actions import audit
from gpumon.backends.actions.jobs import (
    JobError,
    JobStatus,
    job_status,
    launch_job,
    log_tail,
    run_stop_command,
    server_health,
    signal_job,
)
from gpumon.backends.actions.params import ParamError
from gpumon.backends.actions.plan import (
    STEPS,
    Action,
    ActionPlan,
    Blocker,
    GpuReadings,
    GpuUse,
    JobTarget,
    Readings,
    Step,
    evidence_off,
    find_job,
    gpu_summary,
    make_plan,
    monitor_readings,
    room_verdict,
    workers_text,
)
from gpumon.backends.actions.plan import join_pids as _join
from gpumon.backends.actions.plan import mib as _mib
from gpumon.backends.actions.rows import Level
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.listeners import Listeners
from gpumon.backends.transport.base import TransportError

log = logging.getLogger(__name__)

OutcomeStatus = Literal["ok", "failed", "cancelled", "refused"]
OUTCOME_LEVELS: dict[OutcomeStatus, Level] = {
    "ok": "ok",
    "failed": "problem",
    "cancelled": "warning",
    "refused": "warning",
}
DEFAULT_FREE_TIMEOUT_S = 120.0  # waiting for the GPUs to release memory
KILL_WAIT_S = 10.0  # after SIGKILL, how long processes may take to disappear
POLL_S = 0.5
Progress = Callable[[Step, str], None]


@dataclass(frozen=True, slots=True)
class Kept:
    """What the evidence step kept: the bundle written (None: none was) and what it holds
    or lacks, in words ("2 py-spy stacks, 1 flight-recorder dump; ...")."""

    bundle: str | None
    summary: str
    verdict: str | None = None  # the rank the flight recorder names, in words


class Gather(Protocol):
    """Keeps the evidence of the job's processes (``pids``) within ``seconds``, saying its
    progress; the bundle layer's ``keep_evidence`` (actions cannot import it: the session
    is given it by whoever builds it). ``alert``: the key of the alert whose incident the
    bundle is of (``K`` of a process that is no job's: the alert it came from); None: the
    job's newest incident. ``host_pids``: processes known only by their Proxmox host's
    PID (``K`` of another container's or the host's own), their stacks taken there."""

    def __call__(
        self,
        target: JobTarget,
        job: JobConfig,
        pids: tuple[int, ...],
        seconds: float,
        say: Callable[[str], None],
        *,
        alert: str | None = None,
        host_pids: tuple[int, ...] = (),
    ) -> Awaitable[Kept]: ...


# --- the run --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended. ``step`` is the step it ended in when that was not success: the one
    that failed or was cancelled (None for a refusal, a success, or a run cancelled before
    its first step)."""

    status: OutcomeStatus
    message: str
    detail: str = ""  # on failure: the tail of the job's log / the command's stderr
    pid: int | None = None  # the job's new PID, when it was started
    signalled: tuple[int, ...] = ()
    duration_s: float = 0.0
    audit_error: str | None = None  # the audit log could not be written
    step: Step | None = None
    bundle: str | None = None  # the evidence kept before the stop

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def level(self) -> Level:
        return OUTCOME_LEVELS[self.status]


@dataclass(frozen=True, slots=True)
class CancelResult:
    cancelled: bool
    message: str


class StepFailed(GpumonError):
    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message, self.detail = message, detail


@dataclass
class _Progress:
    # a broken progress display must not break the restart: Listeners logs it
    listeners: Listeners[[Step, str]] = field(default_factory=lambda: Listeners("progress"))
    history: list[tuple[Step, str]] = field(default_factory=list)

    def emit(self, step: Step, message: str) -> None:
        self.history.append((step, message))
        self.listeners.emit(step, message)


class JobRun:
    """One run of a plan (restart, stop or start). ``start()`` it on the event loop (the
    registry does), follow it with ``add_listener`` / ``history``, ``await wait()``."""

    def __init__(
        self,
        plan: ActionPlan,
        target: JobTarget,
        *,
        progress: Progress | None = None,
        free_timeout: float = DEFAULT_FREE_TIMEOUT_S,
        automatic: str | None = None,
        poll_s: float = POLL_S,
        evidence: Gather | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.plan, self.target = plan, target
        self.evidence = evidence
        self.free_timeout, self.poll_s = free_timeout, poll_s
        self.clock, self.sleep = clock, sleep  # the wait for free GPUs (tests: FakeClock)
        self.automatic = automatic  # why an automatic run started (None: a person asked)
        self.step: Step | None = None
        self.outcome: Outcome | None = None
        self._progress = _Progress()
        if progress is not None:
            self._progress.listeners.add(progress)
        self._task: asyncio.Task[Outcome] | None = None
        self._cancel_requested = False
        self._signalled: list[int] = []
        self._stopped_at: float | None = None  # epoch time the stop finished, if it acted
        self._new_pid: int | None = None
        self._started_at: float | None = None  # epoch time of the launch
        self._workers = ""  # "its workers 15200-15202 hold GPUs 5-7", when it says more
        self._baseline: tuple[int | None, float | None] = (None, None)
        self._steps_task: asyncio.Future[None] | None = None
        self._evidence_task: asyncio.Task[Kept] | None = None
        self._evidence_skipped = False
        self._kept: Kept | None = None

    @property
    def history(self) -> list[tuple[Step, str]]:
        return list(self._progress.history)

    @property
    def done(self) -> bool:
        return self.outcome is not None or (self._task is not None and self._task.done())

    def add_listener(self, progress: Progress) -> None:
        self._progress.listeners.add(progress)

    def start(self) -> JobRun:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._main())
        return self

    async def wait(self) -> Outcome:
        """The outcome (waiting does not cancel the run when the waiter is cancelled)."""
        task = self.start()._task
        assert task is not None
        return await asyncio.shield(task)

    def skip_evidence(self) -> bool:
        """Go on to the stop without waiting for the rest of the evidence (the dialog's
        Esc); False when the run is not keeping evidence now."""
        task = self._evidence_task
        if self.step is not Step.EVIDENCE or task is None or task.done():
            return False
        self._evidence_skipped = True
        task.cancel()
        return True

    def cancel(self) -> CancelResult:
        """Stop the run before its start step; from the start step on it is refused."""
        if self.outcome is not None:
            return CancelResult(False, f"already finished: {self.outcome.message}")
        if self.step in (Step.START, Step.VERIFY):
            return CancelResult(
                False,
                f"{self.plan.job.name} is being started; cancelling now would leave it "
                "half started. Let it finish, then stop it.",
            )
        self._cancel_requested = True
        if self._steps_task is not None:
            self._steps_task.cancel()
        return CancelResult(True, "cancelling")

    async def _main(self) -> Outcome:
        t0 = time.monotonic()
        plan = self.plan
        try:
            if plan.refusal:
                outcome = Outcome("refused", plan.refusal)
            elif self._cancel_requested:
                raise asyncio.CancelledError
            else:
                # The steps run in their own task so that cancel() interrupts them and
                # this one still records the outcome.
                self._steps_task = asyncio.ensure_future(self._steps())
                await self._steps_task
                outcome = Outcome("ok", self._success_text(), pid=self._new_pid)
        except asyncio.CancelledError:
            if not self._cancel_requested:  # gpumon is shutting down: take the steps along
                if self._steps_task is not None:
                    self._steps_task.cancel()
                raise
            done = f"; PIDs {_join(self._signalled)} were signalled" if self._signalled else ""
            outcome = Outcome("cancelled", f"cancelled during {self.step or 'stop'}{done}")
        except StepFailed as e:
            outcome = Outcome("failed", f"{self.step}: {e.message}", e.detail, self._new_pid)
        except (JobError, TransportError, OSError) as e:
            outcome = Outcome("failed", f"{self.step}: {e}", pid=self._new_pid)
        except Exception as e:  # a bug must still end the run with an audited outcome
            log.exception("restart of %s failed", plan.job.name)
            outcome = Outcome("failed", f"{self.step}: internal error: {e!r}", pid=self._new_pid)
        ended_in = None if outcome.status in ("ok", "refused") else self.step
        outcome = replace(
            outcome,
            signalled=tuple(self._signalled),
            duration_s=time.monotonic() - t0,
            step=ended_in,
            bundle=self._kept.bundle if self._kept else None,
        )
        self.outcome = self._audit(outcome)
        self.step = Step.DONE
        self._progress.emit(Step.DONE, self.outcome.message)
        return self.outcome

    async def _steps(self) -> None:
        steps = {
            Step.EVIDENCE: self._evidence,
            Step.STOP: self._stop,
            Step.WAIT_FREE: self.wait_free,
            Step.START: self._start,
            Step.VERIFY: self._verify,
        }
        for step in self.plan.steps:
            self.step = step
            await steps[step]()

    def _success_text(self) -> str:
        name = self.plan.job.name
        if self.plan.action == "stop":
            return f"{name} stopped"
        workers = f" ({self._workers})" if self._workers else ""
        if self.plan.job.server is not None:
            return f"{name} {self.plan.action}ed: PID {self._new_pid} running{workers}"
        return f"{name} {self.plan.action}ed: PID {self._new_pid} running{workers}, log advancing"

    def _audit(self, outcome: Outcome) -> Outcome:
        plan = self.plan
        detail = outcome.message
        if self.automatic:
            detail = f"automatic ({self.automatic}): {detail}"
        if outcome.detail:
            detail += "\n" + outcome.detail
        try:
            audit.record(
                f"auto-{plan.action}" if self.automatic else plan.action,
                plan.host,
                outcome.status,
                job=plan.job.name,
                parameters=dict(plan.params),
                commands=plan.commands,
                pids=list(outcome.signalled),
                duration_s=outcome.duration_s,
                detail=detail,
                bundle=outcome.bundle,
            )
        except OSError as e:
            note = f" (audit log not written: {e})"
            return replace(outcome, audit_error=str(e), message=outcome.message + note)
        return outcome

    def _say(self, message: str) -> None:
        self._progress.emit(self.step or Step.STOP, message)

    # --- steps (each raises StepFailed, JobError or TransportError) -------------------
    async def _evidence(self) -> None:
        """Keep what explains the failure before the stop ends it, within ``evidence_s``;
        whatever happens here, the stop follows (a failed, cut or skipped gathering is
        said, never a reason not to restart)."""
        job = self.plan.job
        if (off := evidence_off(job)) is not None:
            self._say(off)
            return
        if self.evidence is None or self.target.monitor is None:
            self._say("skipped: no monitor of the host to keep evidence from")
            return
        status = await job_status(self.target.transport, job)
        if not status.running:
            self._say(f"nothing to keep: {status.describe()}")
            return
        seconds = job.evidence_s
        self._say(f"keeping evidence of PIDs {_join(status.pids)} (at most {seconds:g} s)")
        t0 = time.monotonic()
        gather = self.evidence(self.target, job, status.pids, seconds, self._say)
        self._evidence_task = asyncio.ensure_future(gather)
        try:
            # The gatherer ends its own steps before ``seconds``; this bound holds when one
            # of them does not (a read stuck past its kill).
            async with asyncio.timeout(seconds):
                self._kept = await self._evidence_task
        except asyncio.CancelledError:
            if not self._evidence_skipped:
                raise  # the run itself is cancelled
            self._say(f"skipped after {time.monotonic() - t0:.1f} s (Esc): nothing kept")
            return
        except TimeoutError:
            self._say(f"cut at {seconds:g} s: nothing kept (the evidence took too long)")
            return
        except Exception as e:
            log.warning("evidence of %s failed", job.name, exc_info=True)
            self._say(f"failed ({e}): going on without it")
            return
        took = time.monotonic() - t0
        where = f" in {self._kept.bundle}" if self._kept.bundle else ""
        self._say(f"kept{where} after {took:.1f} s: {self._kept.summary}")
        if self._kept.verdict:
            self._say(self._kept.verdict)

    async def _stop(self) -> None:
        job, transport = self.plan.job, self.target.transport
        status = await job_status(transport, job)
        if not status.running:
            self._say(f"nothing to stop: {status.describe()}")
            return
        self._say(f"stopping {status.describe()}")
        if self.plan.stop_command:
            self._signalled += status.pids  # what the stop command is asked to end
            res = await run_stop_command(
                transport, job, self.plan.stop_command, status, job.stop_timeout
            )
            if res.exit_code != 0:
                why = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
                self._say(f"stop command failed ({why}); sending SIGTERM")
                self._signalled += await signal_job(transport, job, "TERM")
        else:
            self._signalled += await signal_job(transport, job, "TERM")
        left = await self._wait_exit(job.stop_timeout)
        if left:
            self._say(f"PIDs {_join(left)} still running after {job.stop_timeout:g} s: SIGKILL")
            self._signalled += await signal_job(transport, job, "KILL")
            left = await self._wait_exit(KILL_WAIT_S)
            if left:
                raise StepFailed(
                    f"PIDs {_join(left)} did not exit {KILL_WAIT_S:g} s after "
                    "SIGKILL (stuck in the kernel, often the GPU driver)"
                )
        self._signalled = list(dict.fromkeys(self._signalled))
        self._stopped_at = time.time()
        self._say(f"stopped (signalled PIDs {_join(self._signalled) or 'none'})")

    async def _wait_exit(self, seconds: float) -> tuple[int, ...]:
        """Poll until the job has no live processes; returns those left after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            status = await job_status(self.target.transport, self.plan.job)
            if not status.running:
                return ()
            if time.monotonic() >= deadline:
                return status.pids
            await asyncio.sleep(min(self.poll_s, max(deadline - time.monotonic(), 0.05)))

    async def wait_free(self) -> None:
        """The wait-free step: until each of the job's GPUs has room for it
        (``room_verdict``): what it needs free, else its own memory gone; another
        container's memory that leaves it too little is named as it waits, and after
        ``free_timeout`` the step fails naming it (unless the plan goes on despite it).
        Never waits for ever, never passes blind. Raises StepFailed."""
        job, plan = self.plan.job, self.plan
        if not job.gpus:
            self._say("no GPUs configured for the job: not waiting")
            return
        read = self.target.readings
        if read is None:
            raise StepFailed(f"no GPU readings for {plan.host}: cannot see GPUs free up")
        deadline = self.clock() + self.free_timeout
        shown, shown_at = "", -math.inf
        while True:
            readings = read()
            fresh = readings is not None and (
                self._stopped_at is None or readings.time >= self._stopped_at
            )
            if readings is not None and fresh:
                waiting, blocked = self._not_ready(readings)
                if not waiting:
                    self._say(f"GPUs free: {gpu_summary(readings, job.gpus)}{self._despite()}")
                    return
                if blocked:
                    text = "; ".join(self._blocked_text(b) for b in blocked) + ": stop it to go on"
                else:
                    text = f"waiting for memory to be released: {gpu_summary(readings, job.gpus)}"
            else:
                text = "waiting for a GPU sample taken after the stop"
            if self.clock() >= deadline:
                raise StepFailed(self._not_free_text(readings if fresh else None))
            if text != shown and self.clock() - shown_at >= 1.0:
                self._say(text)
                shown, shown_at = text, self.clock()
            await self.sleep(self.poll_s)

    def _not_ready(self, readings: GpuReadings) -> tuple[list[int], list[Blocker]]:
        """The job's GPUs not ready for it, and the holders in the way among them."""
        plan = self.plan
        waiting, blocked = [], []
        for index in plan.job.gpus:
            ready, blocker = room_verdict(
                index,
                readings.gpus.get(index),
                plan.needs.get(index),
                plan.job.free_mib,
                despite=plan.despite,
            )
            if not ready:
                waiting.append(index)
                if blocker is not None:
                    blocked.append(blocker)
        return waiting, blocked

    def _blocked_text(self, blocker: Blocker) -> str:
        """ "GPU 6: drafter needs 90.9 GiB, 85.0 GiB free: CT 201 jupyter-lab holds 6.0 GiB"."""
        name = self.plan.job.name
        who = blocker.who if blocker.holders else "no other container's process listed"
        pids = f" ({blocker.pids})" if blocker.pids else ""
        return (
            f"GPU {blocker.gpu}: {name} needs {_mib(blocker.need_mib)}, "
            f"{_mib(blocker.room_mib)} free: {who}{pids}"
        )

    def _despite(self) -> str:
        """What the user chose to restart beside (said once the GPUs count as free)."""
        if not self.plan.despite:
            return ""
        said = "; ".join(b.text() for b in self.plan.in_the_way)
        return f" (restarting anyway: {said})"

    def _not_free_text(self, readings: GpuReadings | None) -> str:
        job = self.plan.job
        waited = f"after {self.free_timeout:g} s"
        if readings is None:
            return f"no fresh GPU sample {waited}; the GPUs' memory is unknown"
        waiting, blocked = self._not_ready(readings)
        held = {b.gpu: b for b in blocked}
        parts = []
        for index in waiting:
            use = readings.gpus.get(index)
            if index in held:
                parts.append(self._blocked_text(held[index]) + "; stop it, then restart")
                continue
            if use is None or use.used_mib is None:
                parts.append(f"GPU {index} memory not reported")
                continue
            if use.pids:
                holders = "PIDs " + _join(use.pids) + " hold it"
                if use.holders:  # who they are: "874 train.py in CT200"
                    holders += ": " + ", ".join(use.holders)
            else:
                holders = "no process listed (inside a container nvidia-smi may not show them)"
            parts.append(f"GPU {index} still uses {_mib(use.used_mib)}: {holders}")
        if held:
            return f"GPUs have no room for {job.name} {waited}: " + "; ".join(parts)
        return f"GPUs not free (< {_mib(job.free_mib)}) {waited}: " + "; ".join(parts)

    async def _start(self) -> None:
        job, transport = self.plan.job, self.target.transport
        assert self.plan.start_command is not None  # a plan without one is refused
        before = await job_status(transport, job)
        if before.running:
            raise StepFailed(f"{job.name} is already {before.describe()}")
        self._baseline = (before.log_size, before.log_mtime)
        self._say(f"starting: {self.plan.start_command}")
        self._started_at = time.time()
        record = await launch_job(transport, job, self.plan.start_command)
        self._new_pid = record.pid
        how = f"tmux session {record.session}" if record.session else record.method
        self._say(f"started PID {record.pid} ({how}); log {record.log}")

    async def _still_running(self) -> JobStatus:
        """The job's status while it runs; StepFailed with its log's tail once it exited."""
        job = self.plan.job
        status = await job_status(self.target.transport, job)
        if not status.running:
            code = f" with code {status.exit_code}" if status.exit_code is not None else ""
            tail = await log_tail(self.target.transport, status.log_path)
            raise StepFailed(f"{job.name} exited{code} right after starting", tail)
        return status

    async def _verify(self) -> None:
        job, transport = self.plan.job, self.target.transport
        if job.server is not None:
            await self._verify_server(job.server)
            return
        deadline = time.monotonic() + job.verify_s
        self._say(f"checking PID {self._new_pid} stays up for {job.verify_s:g} s")
        while True:
            status = await self._still_running()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(self.poll_s, left))
        size, mtime = self._baseline
        if status.log_size is None:
            grew = False
        elif size is None:  # no log before the start: the launcher creates it empty
            grew = status.log_size > 0
        else:  # a job may truncate and rewrite its log: a newer mtime counts as well
            grew = status.log_size != size or (status.log_mtime or 0) > (mtime or 0)
        if job.verify_s > 0 and not grew:
            tail = await log_tail(transport, status.log_path)
            raise StepFailed(
                f"PID {self._new_pid} is alive but its log {status.log_path} did not grow "
                f"in {job.verify_s:g} s",
                tail,
            )
        gpus = ""
        if job.gpus and self.target.readings is not None:
            readings = self.target.readings()
            gpus = "; " + gpu_summary(readings, job.gpus)
            if readings is not None and readings.time >= (self._started_at or 0.0):
                self._workers = workers_text(readings, job.gpus, self._new_pid)
        self._say(f"PID {self._new_pid} alive after {job.verify_s:g} s, log growing{gpus}")

    async def _verify_server(self, port: int) -> None:
        """A server job serves once its probe answers 200 (``plan.server_health``:
        SGLang's ``/health_generate``, a token came out; vLLM's ``/health``, its engine
        core up), not once its process is up: a model still loading, or a server that
        hangs at once, is no success. Asked until ``verify_s`` has passed, while the job
        runs."""
        job, transport = self.plan.job, self.target.transport
        probe = f":{port}{self.plan.server_health}"
        deadline = time.monotonic() + job.verify_s
        self._say(f"waiting up to {job.verify_s:g} s for {probe} to answer 200")
        said = "no answer"
        while True:
            status = await self._still_running()
            left = deadline - time.monotonic()
            answer, why = await server_health(
                transport, port, max(1.0, min(left, 25.0)), self.plan.server_health
            )
            if answer == 200:
                break
            said = f"answered {answer}" if answer is not None else why
            left = deadline - time.monotonic()
            if left <= 0:
                tail = await log_tail(transport, status.log_path)
                raise StepFailed(
                    f"PID {self._new_pid} is up but {probe} did not answer "
                    f"200 in {job.verify_s:g} s (last: {said})",
                    tail,
                )
            await asyncio.sleep(min(self.poll_s, left))
        self._workers = f"{probe} answered 200"
        self._say(f"PID {self._new_pid} serves: {probe} answered 200")


def record_not_confirmed(plan: ActionPlan, why: str = "not confirmed: cancelled") -> None:
    """Audit a plan that was shown and not confirmed (the dialog closed without ``y``) as
    "cancelled", as a declined torch swap is audited. Raises OSError."""
    audit.record(
        plan.action,
        plan.host,
        "cancelled",
        job=plan.job.name,
        parameters=dict(plan.params),
        commands=plan.commands,
        detail=why,
    )


# --- one run per job --------------------------------------------------------------------


class RunRegistry:
    """The runs in progress in one session, at most one per (host, job).

    ``finished`` listeners get every run once it ended (its ``outcome`` is set): the one
    place where the job's alerts are cleared and its tracker follows the outcome, for
    manual and automatic runs alike (``JobWatch``)."""

    def __init__(self, evidence: Gather | None = None) -> None:
        self._runs: dict[tuple[str, str], JobRun] = {}
        self.evidence = evidence  # how each run keeps its evidence (None: it keeps none)
        self.finished: Listeners[[JobRun]] = Listeners("finished-run listener")

    def running(self, host: str, job: str) -> JobRun | None:
        run = self._runs.get((host, job))
        return run if run is not None and not run.done else None

    def last(self, host: str, job: str) -> JobRun | None:
        """The job's latest run in this session, running or finished."""
        return self._runs.get((host, job))

    def _on_progress(self, run: JobRun, step: Step) -> None:
        if step is Step.DONE:
            self.finished.emit(run)

    def start(
        self,
        plan: ActionPlan,
        target: JobTarget,
        *,
        progress: Progress | None = None,
        free_timeout: float = DEFAULT_FREE_TIMEOUT_S,
        automatic: str | None = None,
    ) -> JobRun:
        """Start ``plan``, or return the run already in progress for the same job (never
        a second one; ``progress`` then follows that run, and its ``plan`` is not this
        one). Call on the event loop."""
        key = (plan.host, plan.job.name)
        current = self.running(*key)
        if current is not None:
            if progress is not None:
                current.add_listener(progress)
            return current
        run = JobRun(
            plan,
            target,
            progress=progress,
            free_timeout=free_timeout,
            automatic=automatic,
            evidence=self.evidence,
        )
        run.add_listener(lambda step, _message: self._on_progress(run, step))
        self._runs[key] = run
        run.start()
        return run

    async def close(self) -> None:
        """Cancel what can be cancelled and wait for every run to finish."""
        for run in list(self._runs.values()):
            run.cancel()
            with contextlib.suppress(Exception):
                await run.wait()


__all__ = [
    "OUTCOME_LEVELS",
    "STEPS",
    "Action",
    "ActionPlan",
    "CancelResult",
    "Gather",
    "GpuReadings",
    "GpuUse",
    "JobRun",
    "JobTarget",
    "Kept",
    "Outcome",
    "ParamError",
    "Readings",
    "RunRegistry",
    "Step",
    "find_job",
    "gpu_summary",
    "make_plan",
    "monitor_readings",
    "record_not_confirmed",
]
