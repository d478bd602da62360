"""The ``job_slow`` verdict: a running job's throughput far below its baseline for a while.

A job is slow when its rate (tokens/s, else steps/s: ``JobTracker.rate_unit``) has stayed
below ``slow_below`` (default 0.5) of its baseline for ``slow_for_s`` (default 300 s). The
baseline is the job's ``expect_tokens_per_s`` when configured, else learned: the median of
its previous good runs on that host (``RunBaselines``, a JSON file in the state
directory, so it survives restarts of the job and of gpumon). A run counts once it has
``MIN_RUN_S`` of rates after its warm-up (the first ``WARMUP_S``: compilation, loading,
the allocator settling) and was not slow itself; its median rate and its GPUs' median
utilisation and power are kept, the newest ``RUNS_KEPT`` per job. A run is not judged
in its warm-up either, when gpumon saw it begin (``JobTracker.run_start_seen``); a run
already going when gpumon came, whose age is unknown, is judged at once (else every
restart of gpumon would hide a slow run for ``WARMUP_S``).

The message leads with the job and says both rates and both ETAs: ``drafter at 4.6
Ktok/s, 23 % of its usual 20.1 Ktok/s (ETA 37 d instead of 8.4 d)``, then its GPUs now
against the baseline run's where known, then the clocks NVML says are held down on them
(``clocks_held``: "clocks held down: hardware thermal slowdown on GPU 6 (SM at 1.1 of 2.6
GHz)", whose incident then says to check cooling and power first), then what changed on
the host: gpumon's own swap
of torch since the baseline run started (``swaps``: the audit log, ``changes.py``; a
configured rate has no run to date it, so within ``SWAP_WINDOW_S`` before the job went
slow), which is also the alert's fact (``TorchSwap``); else a torch the doctor found
changed since the baseline run (``changes``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpumon.backends import untrusted
from gpumon.backends.alerts.facts import SWAP_WINDOW_S, TorchSwap
from gpumon.backends.alerts.health import slowdowns
from gpumon.backends.model import GpuSample
from gpumon.backends.parsers.processes import index_ranges
from gpumon.backends.workloads.trackers import JobState, JobTracker

__all__ = [
    "MIN_RUN_S",
    "RUNS_KEPT",
    "WARMUP_S",
    "RunBaselines",
    "RunRecord",
    "Slow",
    "SlowWatch",
    "clocks_held",
    "judge_slow",
    "rate_words",
]

WARMUP_S = 180.0
MIN_RUN_S = 600.0
RUNS_KEPT = 20
SAVE_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One good run: its median rate (``unit``) after warm-up, its GPUs' median
    utilisation (%) and power (W) over that time (None: not reported)."""

    start: float
    rate: float
    unit: str
    util_pct: float | None = None
    power_w: float | None = None


class RunBaselines:
    """The good runs of one host's jobs, kept in ``path`` (JSON). A file that cannot be
    read or parsed is an empty history (and is overwritten at the next save): a lost
    baseline only delays the rule until runs are learned again."""

    def __init__(self, path: Path | None, *, learn: bool = True) -> None:
        self.path = path
        self.learn = learn  # False: read only (a replay must not teach the live baseline)
        self._runs: dict[str, list[RunRecord]] | None = None

    def runs(self, job: str) -> list[RunRecord]:
        return list(self._load().get(job, []))

    def baseline(self, job: str, unit: str, current: float | None) -> RunRecord | None:
        """The median good run of ``job`` in ``unit`` other than the one started at
        ``current``; None before one was learned."""
        runs = sorted(
            (r for r in self.runs(job) if r.unit == unit and r.start != current),
            key=lambda r: r.rate,
        )
        return runs[(len(runs) - 1) // 2] if runs else None

    def record(self, job: str, run: RunRecord) -> None:
        """Add or update (same ``start``) one run and save."""
        data = self._load()
        runs = [r for r in data.get(job, []) if r.start != run.start]
        data[job] = [*runs, run][-RUNS_KEPT:]
        self._save(data)

    def _load(self) -> dict[str, list[RunRecord]]:
        if self._runs is None:
            self._runs = {}
            if self.path is not None:
                with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
                    raw = untrusted.loads(self.path.read_bytes())  # a file anyone may edit
                    self._runs = {
                        str(job): [RunRecord(**r) for r in runs] for job, runs in raw.items()
                    }
        return self._runs

    def _save(self, data: dict[str, list[RunRecord]]) -> None:
        if self.path is None or not self.learn:
            return
        out = {job: [asdict(r) for r in runs] for job, runs in data.items()}
        with contextlib.suppress(OSError):  # a full disk must not stop monitoring
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=1), encoding="utf-8")
            os.replace(tmp, self.path)


@dataclass(frozen=True, slots=True)
class Slow:
    """A ``job_slow`` verdict: its ``message``, and the job's ``rate`` and ``baseline`` in
    ``unit`` and the torch ``swap`` before it (its alert's facts)."""

    message: str
    rate: float
    baseline: float
    unit: str
    swap: TorchSwap | None = None
    clocks: str | None = None  # ``clocks_held``'s words, where the GPUs' clocks are held


# What the incident of a slow job whose clocks are held says first (``health``'s advice)
CLOCKS_ADVICE = "check its GPUs' cooling, power and the node's event log (clocks held down)"


def clocks_held(gpus: Sequence[GpuSample]) -> str | None:
    """ "hardware thermal slowdown on GPU 6 (SM at 1.1 of 2.6 GHz)": the slowdown reasons
    NVML reports active on a job's ``gpus`` (``clocks_event_reasons``: thermal, power
    brake, hardware; not the power cap or idle, which a busy GPU shows normally), by
    reason, then the SM clock of those GPUs against their maximum where both are
    reported; None when none is held down or none reports its reasons."""
    by_reason: dict[str, list[int]] = {}
    held: list[GpuSample] = []
    for gpu in gpus:
        reasons = slowdowns(gpu.clocks_event_reasons)
        if reasons:
            held.append(gpu)
        for reason in reasons:
            by_reason.setdefault(reason, []).append(gpu.index)
    if not by_reason:
        return None
    text = ", ".join(
        f"{reason} on GPU{'s' if len(ix) > 1 else ''} {index_ranges(ix)}"
        for reason, ix in by_reason.items()
    )
    clocks = [
        (g.sm_clock_mhz, g.max_sm_clock_mhz)
        for g in held
        if g.sm_clock_mhz is not None and g.max_sm_clock_mhz
    ]
    if clocks:
        now = sum(c for c, _ in clocks) / len(clocks) / 1000
        top = max(m for _, m in clocks if m is not None) / 1000
        text += f" (SM at {now:.1f} of {top:.1f} GHz)"
    return text


@dataclass
class SlowWatch:
    """One job's slow-rule state across samples: times on the judging clock (the job
    tracker's), but ``run_start_wall``, the run's start on the wall clock, which names the
    run in the baselines file (kept across restarts, dated against the audit log)."""

    run_start: float | None = None
    run_start_wall: float | None = None
    slow_since: float | None = None
    rates: list[float] = field(default_factory=list)  # this run, after warm-up
    utils: list[float] = field(default_factory=list)
    powers: list[float] = field(default_factory=list)
    was_slow: bool = False
    saved_at: float | None = None

    def new_run(self, start: float, start_wall: float) -> None:
        self.run_start, self.run_start_wall, self.slow_since = start, start_wall, None
        self.rates, self.utils, self.powers = [], [], []
        self.was_slow, self.saved_at = False, None


def judge_slow(
    job: JobTracker,
    watch: SlowWatch,
    now: float,
    *,
    wall: float | None = None,
    expect: float | None,
    below: float,
    for_s: float,
    gpu_util: float | None,
    gpu_power: float | None,
    baselines: RunBaselines,
    changes: Callable[[float], str | None] | None = None,
    swaps: Callable[[float], TorchSwap | None] | None = None,
    clocks: str | None = None,
) -> Slow | None:
    """The ``job_slow`` verdict for ``job`` at ``now`` (the tracker's clock; ``wall``: the
    wall clock now, None: the same), or None; feeds ``watch`` (this run's rates after
    warm-up) and records a good run in ``baselines``. ``gpu_util`` /
    ``gpu_power``: the job's GPUs' mean utilisation and power now (None: not reported).
    ``swaps``: gpumon's newest torch swap on the host since an epoch second, asked with a
    learned baseline run's start, else ``SWAP_WINDOW_S`` before the job went slow;
    ``changes``: else what the doctor saw change since a learned baseline run's start
    (None: nothing known). ``clocks``: the job's GPUs' clocks held down now
    (``clocks_held``), said after the GPUs."""
    if job.state is not JobState.RUNNING or job.last_update is None:
        watch.slow_since = None
        return None
    run_start = job.run_started_at
    if run_start is not None and run_start != watch.run_start:
        watch.new_run(run_start, (now if wall is None else wall) - (now - run_start))
    unit = job.rate_unit
    rate = job.tokens_per_s if unit == "tok/s" else job.items_per_s
    if unit is None or rate is None or math.isnan(rate):
        return None
    if watch.run_start is not None and now - watch.run_start >= WARMUP_S:
        watch.rates.append(rate)
        if gpu_util is not None:
            watch.utils.append(gpu_util)
        if gpu_power is not None:
            watch.powers.append(gpu_power)
    if job.run_start_seen and watch.run_start is not None and now - watch.run_start < WARMUP_S:
        watch.slow_since = None  # compiling, loading: a slow start is not a slow run
        return None
    base: RunRecord | None
    if expect is not None and unit == "tok/s":
        base, usual = RunRecord(0.0, expect, unit), "expected"
    else:
        base, usual = baselines.baseline(job.name, unit, watch.run_start_wall), "usual"
    slow = base is not None and base.rate > 0 and rate < below * base.rate
    if not slow:
        watch.slow_since = None
    elif watch.slow_since is None:
        watch.slow_since = now
    verdict = None
    if slow and watch.slow_since is not None and now - watch.slow_since >= for_s:
        assert base is not None
        watch.was_slow = True
        text = _message(job, rate, unit, base, usual, gpu_util, gpu_power)
        if clocks:
            text += f"; clocks held down: {clocks}"
        learned = usual == "usual"
        at = now if wall is None else wall  # the audit log's times are the wall's
        slow_from = at - (now - watch.slow_since)
        since = base.start if learned else slow_from - SWAP_WINDOW_S
        swap = swaps(since) if swaps is not None else None
        changed = swap.words(at) if swap is not None else None
        if changed is None and changes is not None and learned:
            changed = changes(base.start)
        if changed:
            text += f"; since the baseline: {changed}" if learned else f"; after {changed}"
        verdict = Slow(text, rate, base.rate, unit, swap, clocks)
    _maybe_record(job, watch, now, baselines, unit)
    return verdict


def _maybe_record(
    job: JobTracker, watch: SlowWatch, now: float, baselines: RunBaselines, unit: str
) -> None:
    """Keep this run as a good one once it has ``MIN_RUN_S`` after warm-up (and was not
    slow), updated every ``SAVE_EVERY_S``."""
    if watch.was_slow or watch.run_start is None or watch.run_start_wall is None:
        return
    if not watch.rates:
        return
    if now - watch.run_start < WARMUP_S + MIN_RUN_S:
        return
    if watch.saved_at is not None and now - watch.saved_at < SAVE_EVERY_S:
        return
    watch.saved_at = now
    import statistics  # with fractions and decimal: not on the one-shot's import path

    baselines.record(
        job.name,
        RunRecord(
            watch.run_start_wall,
            statistics.median(watch.rates),
            unit,
            statistics.median(watch.utils) if watch.utils else None,
            statistics.median(watch.powers) if watch.powers else None,
        ),
    )


def _message(
    job: JobTracker,
    rate: float,
    unit: str,
    base: RunRecord,
    usual: str,
    util: float | None,
    power: float | None,
) -> str:
    share = rate / base.rate
    text = (
        f"{job.name} at {rate_words(rate, unit)}, {share * 100:.0f} % of its {usual} "
        f"{rate_words(base.rate, unit)}"
    )
    eta = job.eta_s
    if eta is not None:
        text += f" (ETA {_eta(eta)} instead of {_eta(eta * share)})"
    gpus = []
    if util is not None:
        was = f" (baseline run {base.util_pct:.0f} %)" if base.util_pct is not None else ""
        gpus.append(f"{util:.0f} % utilisation{was}")
    if power is not None:
        was = f" (baseline run {base.power_w:.0f} W)" if base.power_w is not None else ""
        gpus.append(f"{power:.0f} W{was}")
    if gpus:
        text += f"; its GPUs at {', '.join(gpus)}"
    return text


def rate_words(rate: float, unit: str) -> str:
    """20100 tok/s -> "20.1 Ktok/s"; 3.2 steps/s -> "3.2 steps/s"."""
    if unit == "tok/s" and rate >= 1000:
        return f"{rate / 1000:.1f} Ktok/s"
    return f"{rate:.3g} {unit}"


def _eta(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} d" if seconds >= 10 * 86400 else f"{seconds / 86400:.1f} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"
