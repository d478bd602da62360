"""The ``job_stalled`` verdict: a running job whose GPUs are held and whose progress stopped.

A job is stalled when it is running (not finished, stopped or crashed), processes hold its
GPUs, and either

- its log printed a collective timeout of PyTorch's NCCL watchdog since its last progress
  line (at once: the watchdog already waited its ``Timeout(ms)``), or
- no progress line came for ``stall_after_s`` (the job's key; default
  max(``STALL_STEPS`` x its median step interval, ``STALL_MIN_S``)), counted from its last
  progress line; before its first one, from its last line of any kind or when its GPUs
  were first seen held (a log whose lines the progress preset does not read is not silent).

Before that, a job whose progress is overdue (``overdue_s``: no step for ``OVERDUE_STEPS`` of
its usual step intervals, at least ``OVERDUE_MIN_S``) while its GPUs show the NCCL-spin
signature (every rank at full utilisation on little power: a rank waits in a collective
for a peer that never comes) is stalled at the warning level once the silence passes
``SPIN_EARLY_S``: the watchdog's own timeout (10 min by default in PyTorch) is far too long
to wait for the first word.

A checkpoint save or an evaluation the log announced since the last progress line gets
``BUSY_GRACE`` times as long. A job without configured GPUs, or whose GPUs hold no process,
is never stalled (a job that lost its processes is stopped or crashed, not stalled), nor
one without a ``log`` (nothing says whether it progresses).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.model import Health
from gpumon.backends.parsers.units import duration_words
from gpumon.backends.workloads.trackers import JobState, JobTracker

__all__ = [
    "BUSY_GRACE",
    "OVERDUE_MIN_S",
    "OVERDUE_STEPS",
    "SPIN_EARLY_S",
    "STALL_MIN_S",
    "STALL_STEPS",
    "Stall",
    "overdue_s",
    "stall_after",
    "stall_verdict",
]

STALL_STEPS = 5.0
STALL_MIN_S = 120.0
BUSY_GRACE = 4.0
# A step is overdue past this many usual intervals, and never sooner than the floor: the
# log is read every poll, so a 1 s step arrives in bursts a few seconds apart.
OVERDUE_STEPS = 3.0
OVERDUE_MIN_S = 10.0
SPIN_EARLY_S = 20.0  # overdue this long with the GPUs spinning: the early warning


@dataclass(frozen=True, slots=True)
class Stall:
    """A stalled job: ``message`` leads with the job's name; ``gpu`` the physical GPU of the
    rank that timed out, when known; ``silent_s`` seconds since its last progress."""

    message: str
    gpu: int | None
    silent_s: float
    severity: Health = Health.CRITICAL


def stall_after(job: JobTracker, configured: float | None) -> float:
    """Seconds without progress that make ``job`` stalled (before any pause's grace)."""
    if configured is not None:
        return configured
    median = job.median_interval_s
    return max(STALL_STEPS * median, STALL_MIN_S) if median is not None else STALL_MIN_S


def overdue_s(job: JobTracker, now: float) -> float | None:
    """Seconds since the last progress line of a running ``job`` whose next step is
    overdue (longer than ``OVERDUE_STEPS`` usual step intervals, at least
    ``OVERDUE_MIN_S``), else None: its last rate and ETA no longer say how it goes."""
    if job.state is not JobState.RUNNING or job.last_update is None:
        return None
    median = job.median_interval_s
    bound = max(OVERDUE_STEPS * median, OVERDUE_MIN_S) if median is not None else STALL_MIN_S
    if job.busy is not None:
        bound *= BUSY_GRACE
    silent = now - job.last_update
    return silent if silent > bound else None


def stall_verdict(
    job: JobTracker,
    now: float,
    held_since: float | None,
    configured: float | None,
    spin: str | None = None,
) -> Stall | None:
    """The stall of ``job`` at ``now``, or None. ``held_since``: when its GPUs were first
    seen held by processes in the current stretch (None: not held now). Both on the
    tracker's clock (``Workloads.now``: monotonic, never the wall clock). ``spin``: the
    NCCL-spin signature on its GPUs now, in words (None: not seen)."""
    if job.state is not JobState.RUNNING or held_since is None or not job.gpus:
        return None
    early = _early(job, now, configured, spin)
    if early is not None:
        return early
    since = job.last_update
    if since is None:  # no progress line yet: a log that speaks is not silent
        since = max(held_since, job.last_line_at or held_since)
    silent = max(now - since, 0.0)
    timeout = job.collective
    if timeout is None:
        limit = stall_after(job, configured)
        if job.busy is not None:
            limit *= BUSY_GRACE
        if silent < limit:
            return None
    if timeout is not None and timeout.timeout_s is not None:
        # the watchdog waited this long for a collective: no step came in that time either
        # (a log read from its backlog arrives at once and says nothing of when)
        silent = max(silent, timeout.timeout_s)
    gpu = None
    if timeout is not None and timeout.rank is not None and timeout.rank < len(job.gpus):
        gpu = job.gpus[timeout.rank]  # a rank's own watchdog line: local rank k = k-th GPU
    parts = []
    if timeout is not None:
        text = timeout.text
        if gpu is not None:
            text = text.replace(f"rank {timeout.rank}", f"rank {timeout.rank} (GPU {gpu})", 1)
        parts.append(text)
    if job.last_update is not None:
        parts.append(f"no step for {duration_words(silent)}")
    else:
        parts.append(f"no progress line in {duration_words(silent)} while its GPUs are held")
    if job.busy is not None:
        parts.append(f"last said {job.busy!r}")
    if job.elastic_restarts:
        parts.append(f"torchrun restarted it {job.elastic_restarts}x")
    if timeout is None and spin is not None:
        parts.append(spin)
    return Stall(f"{job.name} stalled: {'; '.join(parts)}", gpu, silent)


def _early(job: JobTracker, now: float, configured: float | None, spin: str | None) -> Stall | None:
    """The warning before the verdict: progress overdue past ``SPIN_EARLY_S`` while the
    GPUs spin (None once the watchdog spoke or ``stall_after`` passed: those are critical)."""
    silent = overdue_s(job, now)
    if spin is None or silent is None or silent < SPIN_EARLY_S or job.collective is not None:
        return None
    limit = stall_after(job, configured) * (BUSY_GRACE if job.busy is not None else 1.0)
    if silent >= limit:
        return None
    text = f"{job.name} stalled: no step for {duration_words(silent)}; {spin}"
    return Stall(text, None, silent, Health.WARNING)
