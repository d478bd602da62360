"""Trackers for what runs on the GPUs: SGLang servers (``SglangTracker``, in
``sglang_tracker``) and training / batch jobs followed through their logs (``JobTracker``).

A ``JobTracker`` is fed log lines with the time they arrived on the monitor's judging clock
(``Workloads.now``: monotonic, so a wall-clock step changes neither a derived rate nor a
stall's silence; in a test or a replay, the one clock it has); every time it keeps is on
that clock, and ``snapshot_json`` says them on the wall clock. It keeps the latest step,
totals, loss and rates; a rate that the log does not print is derived from the counts it
does print (two arrivals at least a second apart). Its state is ``running``
until a line says the job finished (step == total, a final summary line) or the caller
says otherwise: ``mark_crashed(reason, gpu=, facts=)`` (the caller's OOM/crash matcher
decided; its ``crash_reason`` is rendered from them, never parsed back),
``mark_stopped()`` (the process is gone without a crash), ``restarted()``.

It also keeps what a stall verdict (``stall.py``) needs: the intervals between progress
lines (their median), the last collective timeout of PyTorch's NCCL watchdog since the
last progress, a checkpoint save or evaluation the log announced, and torchrun's elastic
restarts and the first failure of its ``ChildFailedError`` (``parsers/collective.py``).

A step counter that goes back (a run resumed from a checkpoint: 709, then 650) is kept as
``step_back`` with the checkpoint's step when the log said where it resumed ("resumed
from checkpoint step 650", "Continuing training from global step 650"): ``step_back_text``
says it in words, so that the lower step does not read as lost work nobody explains.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import GpuRef, iso_time
from gpumon.backends.parsers.collective import CollectiveScanner, StallLine
from gpumon.backends.parsers.progress import ProgressParser, ProgressUpdate
from gpumon.backends.workloads.sglang import SglangTotals, SglangTracker, sglang_totals

__all__ = [
    "JobState",
    "JobTracker",
    "SglangTotals",
    "SglangTracker",
    "StepBack",
    "iso_time",
    "sglang_totals",
    "step_back_text",
]

RATE_WINDOW_S = 30.0  # derived rates: count delta over about the last 30 s
MIN_RATE_SPAN_S = 1.0  # ... and never over less than this
BURST_S = 0.05  # lines arriving together (a backlog) count as one observation
REVIVE_AFTER_S = 15.0  # progress this long after a crash/stop means the job runs again
HISTORY_LEN = 120
INTERVALS_KEPT = 64  # progress intervals the median step interval is taken over
# A log line announcing a pause in progress that is not a stall: HF Trainer's "Saving model
# checkpoint to ...", "***** Running Evaluation *****", and the plain words most loops print.
_BUSY = lazy_pattern(
    r"(?i)\b(?:sav(?:e|ing)|writ(?:e|ing))\b[^|]{0,40}?\bcheckpoint"
    r"|\bcheckpoint(?:ing)?\b[^|]{0,20}?\bsav(?:e|ing)\b"
    r"|running evaluation|\bevaluating\b|\bstart(?:ing)? eval"
)

# Where a run resumed: "run 1 resumed from checkpoint step 650", "Resuming from checkpoint
# at step 650", HF Trainer's "Continuing training from global step 650".
_RESUMED = lazy_pattern(
    r"(?i)\bresum\w*\b[^|\n]{0,40}?\bcheckpoint\b[^|\n]{0,20}?\bstep\s*[=:]?\s*(\d+)"
    r"|\bcontinuing training from (?:global )?step\s*(\d+)"
)


@dataclass(frozen=True, slots=True)
class StepBack:
    """The step counter went back from ``before`` to ``after`` (at ``time``, on the
    tracker's clock);
    ``checkpoint``: the step the log said the run resumed from (None: it did not say)."""

    before: int
    after: int
    time: float
    checkpoint: int | None = None


def step_back_text(back: StepBack) -> str:
    """ "the step counter went back from 709 to 650: resumed from the checkpoint at step
    650", or "...: resumed from an earlier checkpoint" when the log did not say where."""
    where = (
        f"the checkpoint at step {back.checkpoint}"
        if back.checkpoint is not None
        else "an earlier checkpoint"
    )
    return f"the step counter went back from {back.before} to {back.after}: resumed from {where}"


class JobState(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    CRASHED = "crashed"


class _Counter:
    """A cumulative count seen over time -> its rate (units per second) over a window."""

    def __init__(self) -> None:
        self.points: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> float | None:
        """Record ``value`` at ``t``; returns the rate, or None while it is unknown."""
        points = self.points
        if points and value < points[-1][1]:
            points.clear()  # went back (resumed from a checkpoint): start over
        if points and t - points[-1][0] < BURST_S:
            points[-1] = (points[-1][0], value)  # same burst: only its last state counts
        else:
            points.append((t, value))
        while len(points) > 2 and points[1][0] <= t - RATE_WINDOW_S:
            points.popleft()
        (t0, v0), (t1, v1) = points[0], points[-1]
        if t1 - t0 < MIN_RATE_SPAN_S:
            return None
        return (v1 - v0) / (t1 - t0)

    def clear(self) -> None:
        self.points.clear()


class JobTracker:
    """One job's progress from its log. ``progress`` is a preset name or a regex (raises
    ``ProgressSpecError`` when it is neither)."""

    def __init__(
        self,
        name: str,
        progress: str = "kv",
        gpus: tuple[int, ...] = (),
        *,
        history_len: int = HISTORY_LEN,
    ) -> None:
        self.name = name
        self.gpus = gpus
        self.parser = ProgressParser(progress)
        self.state = JobState.RUNNING
        # The crash verdict (``mark_crashed``) as facts: what ("OOM"), the GPU it happened
        # on, what the log said of it, and who else held memory there (``crash_holder``).
        self.crash_what: str | None = None
        self.crash_gpu: GpuRef | None = None
        self.crash_facts: tuple[str, ...] = ()
        self.crash_holder: str | None = None
        self.ended_at: float | None = None
        self.last_update: float | None = None
        self.run_started_at: float | None = None  # first progress of this run
        # whether gpumon saw this run begin: its first progress came after gpumon began
        # following the log (a run already going when gpumon came has an unknown age)
        self.run_start_seen = False
        self._first_read_at: float | None = None
        self.last_line_at: float | None = None  # any line, progress or not
        self.step: int | None = None
        self.total_steps: int | None = None
        self.done: int | None = None
        self.total: int | None = None
        self.failed: int | None = None
        self.loss: float | None = None
        self.tokens: float | None = None
        self.tokens_per_s: float | None = None  # logged, else derived from ``tokens``
        self.items_per_s: float | None = None  # steps/s or prompts/s: logged or derived
        self.logged_eta_s: float | None = None
        self.rate_history: deque[tuple[float, float]] = deque(maxlen=history_len)
        self.rate_unit: str | None = None  # "tok/s", "steps/s", "items/s" or a bar's "B/s"
        self.items_unit: str | None = None  # what a bar counts when it names it ("B")
        self._steps, self._done, self._tokens = _Counter(), _Counter(), _Counter()
        self._logged_tokens_rate = self._logged_items_rate = False
        self._finished_by_count = False  # step == total (a per-epoch bar can do that)
        self._finished_at: tuple[int | None, int | None] = (None, None)  # (step, done) then
        self.intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)  # between progress lines
        self.collective: StallLine | None = None  # a collective timeout since the last progress
        self.busy: str | None = None  # a checkpoint save / evaluation announced since then
        self.busy_at: float | None = None
        self.elastic_restarts = 0  # torchrun's "will restart worker group" lines
        self.root_cause: StallLine | None = None  # torchrun's first observed failure
        self._collective_scan = CollectiveScanner()
        self.step_back: StepBack | None = None  # the last time the step counter went back
        self._resumed_from: int | None = None  # a resume line since the last progress

    # ------------------------------------------------------------------ feeding it
    def feed(self, line: str, t: float, *, backlog: bool = True) -> bool:
        """One log line (``\\r``-separated bar updates inside are fine) that arrived at
        ``t`` (the judging clock); returns whether it carried progress. ``backlog``: the line was
        in the log before gpumon followed it, or that is not known; a first line that was
        not (a log that began after gpumon came) means gpumon followed it from its start."""
        self.last_line_at = t
        if self._first_read_at is None:
            self._first_read_at = t if backlog else -math.inf
        self._note_events(line, t)
        update = self.parser.parse(line)
        if update is None:
            return False
        self.apply(update, t)
        return True

    def feed_lines(self, lines: list[str], t: float, *, backlog: bool = True) -> int:
        """Lines that arrived together; returns how many carried progress."""
        return sum(self.feed(line, t, backlog=backlog) for line in lines)

    def _note_events(self, line: str, t: float) -> None:
        """A collective timeout, an elastic restart, a root cause, a save or evaluation."""
        found = self._collective_scan.scan(line)
        if found is not None:
            if found.kind == "timeout":
                # the first timeout names the collective; later ones are its echoes
                if self.collective is None or self.collective.seq is None:
                    self.collective = found
            elif found.kind == "restart":
                self.elastic_restarts += 1
            else:
                self.root_cause = found
            return
        resumed = _RESUMED.search(line)
        if resumed is not None:
            self._resumed_from = int(resumed.group(1) or resumed.group(2))
        m = _BUSY.search(line)
        if m is not None:
            self.busy, self.busy_at = m.group(0).strip().lower(), t

    @property
    def median_interval_s(self) -> float | None:
        """The median time between progress lines (None before two)."""
        import statistics  # with fractions and decimal: not on the one-shot's import path

        return statistics.median(self.intervals) if self.intervals else None

    def apply(self, u: ProgressUpdate, t: float) -> None:
        """Take in one parsed update (what ``feed`` does after parsing)."""
        if self.state in (JobState.CRASHED, JobState.STOPPED):
            if self.ended_at is None or t < self.ended_at + REVIVE_AFTER_S:
                return  # other ranks still printing while the job goes down
            self.restarted(t)
        if self.run_started_at is None:
            self.run_started_at = t
            self.run_start_seen = self._first_read_at is not None and t > self._first_read_at
        if self.last_update is not None and t - self.last_update >= BURST_S:
            self.intervals.append(t - self.last_update)
        self.last_update = t
        self.collective = self.busy = self.busy_at = None  # progress: no stall, no pause
        if u.total_steps is not None and self.total_steps and u.total_steps < self.total_steps:
            # a shorter bar beside the main one (HF's evaluation loop): not the job's steps
            u = replace(u, step=None, total_steps=None, items_per_s=None, eta_s=None)
        step_rate = done_rate = token_rate = None
        if u.step is not None:
            if self.step is not None and u.step < self.step:
                self.step_back = StepBack(self.step, u.step, t, self._resumed_from)
            self.step = u.step
            step_rate = self._steps.add(t, u.step)
        self._resumed_from = None  # it explains the first progress after it, no later one
        if u.done is not None:
            self.done = u.done
            done_rate = self._done.add(t, u.done)
        if u.tokens is not None:
            self.tokens = u.tokens
            token_rate = self._tokens.add(t, u.tokens)
        self.total_steps = u.total_steps if u.total_steps is not None else self.total_steps
        self.total = u.total if u.total is not None else self.total
        self.failed = u.failed if u.failed is not None else self.failed
        self.loss = u.loss if u.loss is not None else self.loss
        # a rate the log prints wins; one derived from counts only stands in for it
        self._logged_tokens_rate |= u.tokens_per_s is not None
        self._logged_items_rate |= u.items_per_s is not None
        if u.tokens_per_s is not None:
            self.tokens_per_s = u.tokens_per_s
        elif token_rate is not None and not self._logged_tokens_rate:
            self.tokens_per_s = token_rate
        derived = step_rate if step_rate is not None else done_rate
        if u.items_per_s is not None:
            self.items_per_s = u.items_per_s
            self.items_unit = u.unit
        elif derived is not None and not self._logged_items_rate:
            self.items_per_s = derived
        if u.eta_s is not None or u.step is not None or u.done is not None:
            self.logged_eta_s = u.eta_s  # a progress line without an ETA drops the old one
        self._record_rate(t)
        if self.state is JobState.RUNNING and (u.finished or self._complete()):
            self.state, self.ended_at = JobState.FINISHED, t
            self._finished_by_count = not u.finished
            self._finished_at = (self.step, self.done)
        elif self._runs_again(u):
            # the next epoch's bar began, or the "final" line was not the end
            self.state, self.ended_at = JobState.RUNNING, None

    def _runs_again(self, u: ProgressUpdate) -> bool:
        """Whether ``u`` shows a FINISHED job still making progress."""
        if self.state is not JobState.FINISHED or u.finished or self._complete():
            return False
        return self._finished_by_count or self._moved_since_finish(u)

    def _moved_since_finish(self, u: ProgressUpdate) -> bool:
        """A progress count other than the one the job finished at: it still runs."""
        step, done = self._finished_at
        return (u.step is not None and u.step != step) or (u.done is not None and u.done != done)

    def _complete(self) -> bool:
        steps = self.step is not None and self.total_steps and self.step >= self.total_steps
        items = self.done is not None and self.total and self.done >= self.total
        return bool(steps or items)

    def _record_rate(self, t: float) -> None:
        if self.tokens_per_s is not None:
            unit, value = "tok/s", self.tokens_per_s
        elif self.items_per_s is not None:
            unit = "steps/s" if self.step is not None else "items/s"
            unit = f"{self.items_unit}/s" if self.items_unit else unit
            value = self.items_per_s
        else:
            return
        if unit != self.rate_unit:
            self.rate_history.clear()
            self.rate_unit = unit
        self.rate_history.append((t, value))

    # ------------------------------------------------------------------ caller verdicts
    @property
    def running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def crashed(self) -> bool:
        return self.state is JobState.CRASHED

    def mark_crashed(
        self,
        reason: str,
        t: float | None = None,
        *,
        gpu: GpuRef | None = None,
        facts: tuple[str, ...] = (),
    ) -> None:
        """The job died: ``reason`` in words ("OOM", "crash"), from the caller's matcher;
        ``gpu``: the GPU it happened on; ``facts``: what else the log said of it."""
        self.state, self.ended_at = JobState.CRASHED, t if t is not None else self.last_update
        self.crash_what, self.crash_gpu, self.crash_facts = reason, gpu, facts
        self.crash_holder = None

    @property
    def crash_reason(self) -> str | None:
        """The crash verdict in words: "OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201
        jupyter-lab)", "crash (first failure: rank 3 exited with -6 (SIGABRT); after 1
        torchrun restart)"; None unless it crashed."""
        if self.crash_what is None:
            return None
        where = f" on {self.crash_gpu}" if self.crash_gpu is not None else ""
        facts = [*self.crash_facts, *((self.crash_holder,) if self.crash_holder else ())]
        told = f" ({'; '.join(facts)})" if facts else ""
        return f"{self.crash_what}{where}{told}"

    def mark_stopped(self, t: float | None = None) -> None:
        """The job's process is gone without a crash; a finished or crashed job stays so."""
        if self.state is JobState.RUNNING:
            self.state = JobState.STOPPED
            self.ended_at = t if t is not None else self.last_update

    def restarted(self, t: float | None = None) -> None:
        """The job runs again (restarted by gpumon or seen making progress again)."""
        self.state, self.ended_at = JobState.RUNNING, None
        self.crash_what, self.crash_gpu, self.crash_facts, self.crash_holder = None, None, (), None
        self.logged_eta_s = self.run_started_at = None
        for counter in (self._steps, self._done, self._tokens):
            counter.clear()

    # ------------------------------------------------------------------ output
    @property
    def eta_s(self) -> float | None:
        """Seconds to go: as logged, else what remains over the step/item rate. None
        unless running."""
        if self.state is not JobState.RUNNING:
            return None
        if self.logged_eta_s is not None:
            return self.logged_eta_s
        rate = self.items_per_s
        if self.step is not None and self.total_steps:
            remaining = self.total_steps - self.step
        elif self.done is not None and self.total:
            remaining = self.total - self.done
        else:
            return None
        if rate is None or not rate > 0 or not math.isfinite(rate):
            return None
        return max(remaining, 0) / rate

    def snapshot_json(self, wall_of: Callable[[float], float] | None = None) -> dict[str, Any]:
        """The snapshot object of this job; ``null`` where unknown. ``tokens_per_s`` is the
        last known rate (for a finished or crashed job: its rate when it ended).
        ``wall_of``: a time of the judging clock on the wall clock (None: the same)."""
        eta = self.eta_s
        rate = self.tokens_per_s
        last = self.last_update
        if last is not None and wall_of is not None:
            last = wall_of(last)
        return {
            "name": self.name,
            "state": self.state.value,
            "gpus": list(self.gpus),
            "step": self.step,
            "total_steps": self.total_steps,
            "done": self.done,
            "total": self.total,
            "failed": self.failed,
            "loss": self.loss,
            "tokens_per_s": None if rate is None else round(rate, 1),
            "eta_s": None if eta is None else round(eta, 1),
            "last_update": None if last is None else iso_time(last),
            "crash_reason": self.crash_reason,
            "elastic_restarts": self.elastic_restarts,
            "root_cause": None if self.root_cause is None else self.root_cause.text,
        }
