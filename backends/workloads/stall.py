"""The ``job_stalled`` verdict: a running job whose GPUs are held and whose progress stopped.

A job is stalled when it is running (not finished, stopped or crashed), processes hold its
GPUs, and either

- its log printed a collective timeout of PyTorch's NCCL watchdog since its last progress
  line (at once: the watchdog already waited its ``Timeout(ms)``), or
- no progress line came for ``stall_after_s`` (the job's key; default
  max(``STALL_STEPS`` x its median step interval, ``STALL_MIN_S``)), counted from its last
  progress line; before its first one, from its last line of any kind or when its GPUs
  were first seen held (a log whose lines the progress preset does not read is not silent).

A checkpoint save or an evaluation the log announced since the last progress line gets
``BUSY_GRACE`` times as long. A job without configured GPUs, or whose GPUs hold no process,
is never stalled (a job that lost its processes is stopped or crashed, not stalled), nor
one without a ``log`` (nothing says whether it progresses).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.workloads.trackers import JobState, JobTracker

__all__ = ["BUSY_GRACE", "STALL_MIN_S", "STALL_STEPS", "Stall", "stall_after", "stall_verdict"]

STALL_STEPS = 5.0
STALL_MIN_S = 120.0
BUSY_GRACE = 4.0


@dataclass(frozen=True, slots=True)
class Stall:
    """A stalled job: ``message`` leads with the job's name; ``gpu`` the physical GPU of the
    rank that timed out, when known; ``silent_s`` seconds since its last progress."""

    message: str
    gpu: int | None
    silent_s: float


def stall_after(job: JobTracker, configured: float | None) -> float:
    """Seconds without progress that make ``job`` stalled (before any pause's grace)."""
    if configured is not None:
        return configured
    median = job.median_interval_s
    return max(STALL_STEPS * median, STALL_MIN_S) if median is not None else STALL_MIN_S


def stall_verdict(
    job: JobTracker, now: float, held_since: float | None, configured: float | None
) -> Stall | None:
    """The stall of ``job`` at local time ``now``, or None. ``held_since``: when its GPUs
    were first seen held by processes in the current stretch (None: not held now)."""
    if job.state is not JobState.RUNNING or held_since is None or not job.gpus:
        return None
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
        parts.append(f"no step for {_duration(silent)}")
    else:
        parts.append(f"no progress line in {_duration(silent)} while its GPUs are held")
    if job.busy is not None:
        parts.append(f"last said {job.busy!r}")
    if job.elastic_restarts:
        parts.append(f"torchrun restarted it {job.elastic_restarts}x")
    return Stall(f"{job.name} stalled: {'; '.join(parts)}", gpu, silent)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
