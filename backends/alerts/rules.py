"""Alert thresholds (``AlertRules``, the ``[alerts]`` TOML table) and the per-GPU memory watch.

``GpuWatch`` holds one GPU's recent memory values and decides, sample by sample:

- the memory level, with hysteresis: it rises at once (warning at ``memory_warning_pct`` of
  total or less than ``memory_warning_free_gib`` free, critical at ``memory_critical_pct``);
  it steps down only after ``clear_samples`` samples in a row at least ``clear_margin_pct``
  points below the threshold (and, for the free-memory rule, that many points of total
  above it);
- time to full: only a rise sustained to a new high is a trend (``GpuWatch.time_to_full``,
  ``fit_time_to_full``). Memory that oscillates, an allocator's cache refilling after
  ``empty_cache`` and a server's static pool rise and fall without running out, so an
  estimate needs all of:
  - ``ttf_min_points`` points spanning two thirds of ``ttf_window_s``, that is two windows
    of a third each, back to back, each rising by ``ttf_min_rate_mib_s`` or more (robust
    slopes: medians of the slopes between points half a window apart); a fall between two
    samples by ``TREND_STEP_PCT`` of total (a process gone, a cache emptied) starts the
    window again;
  - every point at or above ``ttf_min_used_pct`` of total, the floor of use (a job loading
    its weights, a GPU far from full, is no trend);
  - memory now above, by ``TREND_STEP_PCT`` of total, every high it held and then fell
    from (by as much) in the last ``HIGH_WATER_S``: climbing back to a level it held and
    left is a refill, not a way to full. A GPU that emptied (under
    ``oom_death_low_pct``) or that a process left starts afresh: the old highs were held
    with memory now gone;
  - a rise that would reach full: one slowing down between the two windows, at the
    slowdown seen, must not stop short of it.

  The rate is the newer window's where that is the lower (a rise that slows predicts by
  its present pace); the prediction runs from memory used now to used + free (what the
  process can get), so "full in ~N s at +R MiB/s (P% used)" says N x R = the headroom at
  P%;
- a likely OOM death: used memory falling from >= ``oom_death_high_pct`` to
  < ``oom_death_low_pct`` within ``oom_death_window_s``.

Stale data (``stale_level``): no GPU data for ``stale_warning_intervals`` sampling
intervals is a warning, for ``stale_critical_intervals`` critical (a frozen agent, a hung
NVML: the link is up and nothing comes).

An unreachable host (``unreachable_level``): ``UNREACHABLE_WARNING_FAILURES`` sessions in a
row that failed (or one, and no GPU data for ``UNREACHABLE_WARNING_S``) is a warning, no GPU
data for ``unreachable_critical_s`` with the host still unreachable is critical (the host
is down, its sshd or its network is gone).

A GPU held and idle (``IdleHeld``, ``GpuWatch.idle_for``): more than ``idle_held_min_mib``
used at under ``idle_util_pct`` utilisation, sample after sample, for
``idle_held_after_s``. One definition for the host alert ``gpu_idle_held`` and the
fleet's ``idle-allocated`` rule (its PromQL is built from the same thresholds). A GPU
whose utilisation is not reported is never idle (None is not 0); a sample at or above the
threshold, below the memory minimum, or after a gap of ``IDLE_GAP_INTERVALS`` sampling
intervals (stale data is not idle time) starts the count again.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from typing import Any

from gpumon.backends.alerts.facts import Held, Holder
from gpumon.backends.model import GpuProcess, GpuSample, Health
from gpumon.backends.parsers.processes import container_label, foreign

MIB_PER_GIB = 1024.0
# A slow nvidia-smi round is not a frozen agent: at a short interval the stale levels
# start no sooner than these.
STALE_WARNING_FLOOR_S = 3.0
STALE_CRITICAL_FLOOR_S = 10.0
# One failed session is a blip (a restarted sshd, a dropped link that comes straight
# back); three in a row, about 4 s of backoff when the host refuses, is a host that is down.
UNREACHABLE_WARNING_FAILURES = 3
# ... and so is one whose tries are slow to fail (a connect timeout) or far apart (a
# refused key or a changed host key is retried every 30 s): blind this long after one.
UNREACHABLE_WARNING_S = 30.0
_FIT_POINTS = 40  # longer windows are thinned to about this many points
# Time to full warns on a new high only: memory now must top, by TREND_STEP_PCT of total,
# every high it fell from (by as much) in the last HIGH_WATER_S. Ten minutes holds many
# cycles of an allocator's sawtooth or an oscillation; a slower cycle rises too slowly to
# be predicted full within the horizon from under its old top. The step is far above a
# sample's noise (tens of MiB) and below what a real ramp climbs in a window; a fall
# between two samples by as much is memory released, not noise.
HIGH_WATER_S = 600.0
TREND_STEP_PCT = 1.0
# A process's exit and its memory's fall can be seen a process poll (5 s) apart, either way.
DEPARTURE_S = 10.0
# GPU held and idle: the defaults of the host rule and of the fleet's idle-allocated rule.
IDLE_HELD_MIN_MIB = 2048  # "held": more than 2 GiB used ...
IDLE_UTIL_PCT = 5.0  # ... at under 5 % utilisation ...
IDLE_HELD_AFTER_S = 600.0  # ... for 10 min
# A gap between two samples longer than this many sampling intervals (the shortest gap
# seen) and ``STALE_WARNING_FLOOR_S`` breaks an idle run: what happened in it is unknown.
IDLE_GAP_INTERVALS = 5.0


@dataclass(frozen=True, slots=True)
class IdleHeld:
    """The held-and-idle test: more than ``min_mib`` used at under ``util_pct`` for
    ``after_s`` (the host rule's and the fleet rule's one definition)."""

    min_mib: float = IDLE_HELD_MIN_MIB
    util_pct: float = IDLE_UTIL_PCT
    after_s: float = IDLE_HELD_AFTER_S

    def sample(self, used_mib: float | None, util_pct: float | None) -> bool:
        """This one sample is held and idle. False when either value is not reported:
        a GPU whose utilisation is unknown is never judged idle."""
        if used_mib is None or util_pct is None:
            return False
        return used_mib > self.min_mib and util_pct < self.util_pct

    def promql(self, used: str, util: str, window_s: int) -> str:
        """The same test over a PromQL range: 1 for a GPU held and idle over the whole of
        the last ``window_s`` (a GPU with less history than the window, its first sample
        inside the last tenth missing, is not judged yet: 0). A GPU without a utilisation
        series is 0 (None is not idle)."""
        w = window_s
        return (
            f"((min_over_time({used}[{w}s]) > bool {self.min_mib:g})"
            f" * (max_over_time({util}[{w}s]) < bool {self.util_pct:g})"
            f" * present_over_time({used}[{w // 10}s] offset {w - w // 10}s)"
            f" or {used} * 0)"
        )


@dataclass(frozen=True, slots=True)
class AlertRules:
    """Thresholds for one host. ``from_mapping`` reads the TOML table form."""

    memory_warning_pct: float = 95.0
    memory_warning_free_gib: float = 2.0  # 0 turns the free-memory rule off
    memory_critical_pct: float = 98.5
    clear_margin_pct: float = 2.0
    clear_samples: int = 3
    ttf_horizon_s: float = 60.0  # 0 turns time-to-full warnings off
    ttf_window_s: float = 30.0
    ttf_min_points: int = 8
    ttf_min_rate_mib_s: float = 10.0
    ttf_min_used_pct: float = 60.0  # the floor of use: no trend while any point is under it
    ttf_confirm: int = 2  # estimates in a row under the horizon before the warning
    oom_death_high_pct: float = 90.0
    oom_death_low_pct: float = 10.0
    oom_death_window_s: float = 10.0
    stale_warning_intervals: float = 5.0  # no data for this many sampling intervals; 0: off
    stale_critical_intervals: float = 30.0
    unreachable_critical_s: float = 120.0  # unreachable this long is critical; 0: never
    idle_held_min_mib: float = IDLE_HELD_MIN_MIB  # gpu_idle_held: more than this used ...
    idle_util_pct: float = IDLE_UTIL_PCT  # ... at under this utilisation ...
    idle_held_after_s: float = IDLE_HELD_AFTER_S  # ... for this long; 0 turns it off
    # holders a GPU may be held and idle by without a gpu_idle_held: shell-style patterns
    # of their program name (``jupyter*``) or their container (``CT201``, ``host``)
    idle_held_ignore: tuple[str, ...] = ()

    @property
    def idle_held(self) -> IdleHeld:
        """The ``gpu_idle_held`` test with these thresholds."""
        return IdleHeld(self.idle_held_min_mib, self.idle_util_pct, self.idle_held_after_s)

    def idle_held_ignored(self, holders: Sequence[GpuProcess]) -> bool:
        """Whether every one of ``holders`` (a GPU's processes, at least one) is one the
        ``idle_held_ignore`` patterns name, by its program name (``jupyter-lab``, as the
        alert names it) or its container (``CT201``, ``host``, as the dashboard writes
        it): such a GPU held and idle is no ``gpu_idle_held``. A GPU whose holders are
        not known is never ignored."""
        patterns = self.idle_held_ignore
        if not patterns or not holders:
            return False
        return all(
            any(fnmatchcase(word, pattern) for pattern in patterns for word in _holder_words(p))
            for p in holders
        )

    def stale_level(self, age_s: float, interval_s: float) -> Health:
        """The ``stale_data`` level of data ``age_s`` old at ``interval_s`` sampling; never
        sooner than ``STALE_WARNING_FLOOR_S`` / ``STALE_CRITICAL_FLOOR_S``."""
        if self.stale_warning_intervals <= 0:
            return Health.OK
        period = max(interval_s, 0.1)
        critical = max(self.stale_critical_intervals * period, STALE_CRITICAL_FLOOR_S)
        if self.stale_critical_intervals > 0 and age_s >= critical:
            return Health.CRITICAL
        if age_s >= max(self.stale_warning_intervals * period, STALE_WARNING_FLOOR_S):
            return Health.WARNING
        return Health.OK

    def unreachable_level(self, failures: int, down_s: float) -> Health:
        """The ``host_unreachable`` level after ``failures`` failed sessions in a row,
        ``down_s`` seconds since the host last delivered (or since the start)."""
        if failures < 1:
            return Health.OK
        if 0 < self.unreachable_critical_s <= down_s:
            return Health.CRITICAL
        if failures >= UNREACHABLE_WARNING_FAILURES or down_s >= UNREACHABLE_WARNING_S:
            return Health.WARNING
        return Health.OK

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], where: str, base: AlertRules | None = None
    ) -> AlertRules:
        """Rules from a TOML table; keys left out keep ``base``'s values (defaults if None).

        Raises ValueError naming ``where.key`` for an unknown key or a bad value.
        """
        base = base or cls()
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                import difflib  # only for a key the config got wrong

                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"{where}.{key}: unknown key{hint}")
            if key == "idle_held_ignore":
                values[key] = _patterns(value, f"{where}.{key}")
                continue
            lo, hi, integer = _LIMITS[key]
            ok = not isinstance(value, bool) and isinstance(value, int if integer else int | float)
            if not ok or not (lo <= value <= hi):
                kind = "an integer" if integer else "a number"
                raise ValueError(
                    f"{where}.{key}: expected {kind} from {lo:g} to {hi:g}, got {value!r}"
                )
            values[key] = int(value) if integer else float(value)
        rules = replace(base, **values)
        if rules.memory_critical_pct < rules.memory_warning_pct:
            raise ValueError(
                f"{where}.memory_critical_pct: must be >= memory_warning_pct "
                f"({rules.memory_warning_pct:g}), got {rules.memory_critical_pct:g}"
            )
        if 0 < rules.stale_critical_intervals < rules.stale_warning_intervals:
            raise ValueError(
                f"{where}.stale_critical_intervals: must be >= stale_warning_intervals "
                f"({rules.stale_warning_intervals:g}) or 0 (off)"
            )
        if rules.oom_death_low_pct >= rules.oom_death_high_pct:
            raise ValueError(f"{where}.oom_death_low_pct: must be below oom_death_high_pct")
        return rules

    def memory_health(self, fraction: float, free_mib: float | None = None) -> Health:
        """The level a memory fill of ``fraction`` (0..1) with ``free_mib`` free reaches by
        the thresholds alone (an alert's level also has hysteresis: ``GpuWatch``)."""
        pct = fraction * 100.0
        if pct >= self.memory_critical_pct:
            return Health.CRITICAL
        low_free = free_mib is not None and free_mib < self.memory_warning_free_gib * MIB_PER_GIB
        if pct >= self.memory_warning_pct or low_free:
            return Health.WARNING
        return Health.OK


def check_rules(rules: AlertRules, window_s: float, interval_s: float) -> AlertRules:
    """``rules`` for a ``gpumon check`` that watches only ``window_s`` seconds at
    ``interval_s``: the time-to-full line may start once half the window has passed (it
    needs two thirds of ``ttf_window_s`` and ``ttf_min_points``), so the two estimates in
    a row that warn fit in the window and a check sees the memory ramp the dashboard has
    been warning about. Other rules stay."""
    if window_s <= 0:
        return rules
    half = window_s / 2.0
    points = max(int(half / max(interval_s, 0.1)) + 1, 4)
    # One estimate is the check's verdict: the trend behind it already rose across two
    # windows to a new high (a second in a row needs a sample the window may not get on a
    # loaded machine: the check then said OK beside its own time_to_full figure).
    # A window short for the interval (1 s at 1 s) still holds the points the rule needs:
    # check watches on, a few windows at most, until it has them. Half an interval more:
    # samples come a little late (exactly (points - 1) intervals kept the oldest point
    # only when every sample was on time to the millisecond; on a loaded machine none is,
    # and a 2 s check of the demo answered UNKNOWN "3 samples in 2 s, 4 needed" window
    # after window: triple run 2).
    need = (points - 0.5) * interval_s
    return replace(
        rules,
        ttf_window_s=min(rules.ttf_window_s, max(1.5 * half, 2.0, need)),
        ttf_min_points=min(rules.ttf_min_points, points),
        ttf_confirm=1,
    )


# key -> (lowest, highest, integer)
_LIMITS: dict[str, tuple[float, float, bool]] = {
    "memory_warning_pct": (1.0, 100.0, False),
    "memory_warning_free_gib": (0.0, 4096.0, False),
    "memory_critical_pct": (1.0, 100.0, False),
    "clear_margin_pct": (0.0, 50.0, False),
    "clear_samples": (1, 1000, True),
    "ttf_horizon_s": (0.0, 86400.0, False),
    "ttf_window_s": (2.0, 3600.0, False),
    "ttf_min_points": (4, 10000, True),  # the two windows need two points each
    "ttf_min_rate_mib_s": (0.0, 1e6, False),
    "ttf_min_used_pct": (0.0, 100.0, False),
    "ttf_confirm": (1, 100, True),
    "oom_death_high_pct": (1.0, 100.0, False),
    "oom_death_low_pct": (0.0, 100.0, False),
    "oom_death_window_s": (0.5, 3600.0, False),
    "stale_warning_intervals": (0.0, 10000.0, False),
    "stale_critical_intervals": (0.0, 100000.0, False),
    "unreachable_critical_s": (0.0, 604800.0, False),
    "idle_held_min_mib": (0.0, 1e7, False),
    "idle_util_pct": (0.1, 100.0, False),
    "idle_held_after_s": (0.0, 604800.0, False),
}


IGNORE_PATTERNS_MAX = 64
IGNORE_PATTERN_CHARS = 255


def _patterns(value: object, where: str) -> tuple[str, ...]:
    """``idle_held_ignore``: a list of non-empty patterns (at most 64, 255 characters each)."""
    items = value if isinstance(value, list) else None
    if (
        items is None
        or len(items) > IGNORE_PATTERNS_MAX
        or not all(isinstance(v, str) and 0 < len(v) <= IGNORE_PATTERN_CHARS for v in items)
    ):
        raise ValueError(
            f"{where}: expected a list of at most {IGNORE_PATTERNS_MAX} patterns (program "
            f'names or containers, e.g. ["jupyter*", "CT201"]), got {str(value)[:60]!r}'
        )
    return tuple(str(v) for v in items)


def _holder_words(p: GpuProcess) -> tuple[str, ...]:
    """What an ``idle_held_ignore`` pattern is matched against: the program's name and
    the process's container as the dashboard writes it."""
    return tuple(w for w in (p.short_name, p.name, container_label(p.container)) if w)


def fit_time_to_full(
    times: list[float], used: list[float], now: float, full: float, min_rate: float
) -> tuple[float, float] | None:
    """(seconds until ``used`` reaches ``full``, MiB/s) for a rise sustained across the
    series, or None.

    The series is cut in two at its middle time: the older and the newer window must each
    rise by ``min_rate`` or more (a rise seen in one window only, a jump then flat, is no
    trend). The rate is the whole series' slope, or the newer window's where that is lower
    (a rise that slows predicts by its present pace; an accelerating one keeps the whole's,
    which the newest points cannot sway alone). Slopes are robust (``_slope``). The time is
    from the newest value carried to ``now``: the headroom the reading says, never a line's
    level above it.
    """
    n = len(times)
    if n > _FIT_POINTS:
        step = math.ceil(n / _FIT_POINTS)
        times, used = times[::-1][::step][::-1], used[::-1][::step][::-1]  # keep the newest
    if len(times) < 4 or times[-1] <= times[0]:
        return None
    middle = (times[0] + times[-1]) / 2.0
    cut = next(i for i, t in enumerate(times) if t > middle)
    whole = _slope(times, used)
    if whole is None or whole < min_rate or whole <= 0:  # flat or falling: the usual case
        return None
    older = _slope(times[:cut], used[:cut])
    newer = _slope(times[cut:], used[cut:])
    if older is None or newer is None or min(older, newer) < min_rate or min(older, newer) <= 0:
        return None
    rate = min(whole, newer)
    level = used[-1] + rate * (now - times[-1])
    if newer < older:
        # Slowing down: at the slowdown seen between the windows' middles the rise stops
        # rate**2 / (2 * slowdown) higher. Short of full, nothing will fill it.
        apart = (times[-1] + times[cut]) / 2.0 - (times[cut - 1] + times[0]) / 2.0
        slowdown = (older - newer) / apart
        if level + rate * rate / (2.0 * slowdown) < full:
            return None
    return max(full - level, 0.0) / rate, rate


def _slope(times: Sequence[float], used: Sequence[float]) -> float | None:
    """MiB/s of a robust line through the points: the median of the slopes between points
    half the series apart and one less (two lags, so an alternating wobble cancels; a few
    outliers do not move it; O(n)). None for fewer than two points apart in time."""
    n = len(times)
    h = n // 2
    if h < 1:
        return None
    slopes = sorted(
        (used[i + lag] - used[i]) / (times[i + lag] - times[i])
        for lag in {h, max(h - 1, 1)}
        for i in range(n - lag)
        if times[i + lag] > times[i]
    )
    return _median(slopes) if slopes else None


def _median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


class GpuWatch:
    """Memory state of one GPU across samples (see the module docstring for the rules)."""

    __slots__ = (
        "alert_ttf",
        "calm",
        "emptied_at",
        "health_calm",
        "high_at",
        "high_water",
        "holders",
        "idle_at",
        "idle_high",
        "idle_joules",
        "idle_last",
        "idle_last_read",
        "idle_low",
        "index",
        "left_at",
        "level",
        "peak",
        "rate",
        "times",
        "top",
        "ttf",
        "ttf_calm",
        "ttf_hits",
        "used",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.times: deque[float] = deque()
        self.used: deque[float] = deque()
        # (time, used) of the highs memory fell from in the last HIGH_WATER_S, each above
        # every later one: the first is the highest it held and left
        self.high_water: deque[tuple[float, float]] = deque()
        self.top = (0.0, 0.0)  # (time, used) of the highest since the last fall
        self.holders: frozenset[int] = frozenset()  # PIDs on the GPU at the last sample
        self.left_at: float | None = None  # when one of them was last seen gone
        self.level = Health.OK  # memory level after hysteresis
        self.calm = 0  # samples in a row below the current level's clear line
        self.ttf: float | None = None
        self.rate = 0.0  # MiB/s of the last estimate
        self.alert_ttf: float | None = None  # the estimate its time_to_full alert says
        self.ttf_hits = 0
        self.ttf_calm = 0
        self.high_at: float | None = None
        self.peak = 0.0
        self.emptied_at: float | None = None
        self.health_calm = 0
        self.idle_at: float | None = None  # when the current held-and-idle run began
        self.idle_last: float | None = None  # its last sample
        self.idle_last_read: float | None = None  # ... by the time it was read
        self.idle_low = 0.0  # utilisation range of the run (the headline says it)
        self.idle_high = 0.0
        # energy drawn in the run, power x time (None: the GPU reports no power)
        self.idle_joules: float | None = None

    def idle_for(
        self,
        now: float,
        gpu: GpuSample,
        test: IdleHeld,
        gap_s: float,
        *,
        read: float | None = None,
        holding: bool = False,
    ) -> float | None:
        """Seconds ``gpu`` has been held and idle up to this sample (0 for the first such
        sample), or None when it is not (``IdleHeld.sample``). A gap of more than
        ``gap_s`` since the run's last sample starts the run again: stale data is not
        idle time. A gap is one on both clocks: ``now`` (when the sample came) and
        ``read`` (when it was read, where known): samples read on time that a stalled
        monitor takes late are no gap in the data, and a wall-clock step between reads
        is none in their arrival. ``holding``: an alert is up for this run; a gap shorter
        than the rule's own ``after_s`` keeps the run (missing data says the data is
        stale, not that the GPU was busy; ending the alert would raise it again as new
        after ``after_s``), its time not counted in the energy."""
        util = gpu.utilization_pct
        if not test.sample(gpu.memory_used_mib, util):
            self.idle_at = self.idle_last = self.idle_last_read = None
            return None
        assert util is not None
        last, last_read = self.idle_last, self.idle_last_read
        gap = last is not None and now - last > gap_s
        if gap and read is not None and last_read is not None and read - last_read <= gap_s:
            gap = False  # read on time, taken late
        if gap and holding and last is not None and now - last < test.after_s:
            gap = False  # an alert up outlasts a short gap; its energy is not known
            last = now
        if self.idle_at is None or last is None or gap:
            self.idle_at, self.idle_low, self.idle_high = now, util, util
            self.idle_joules = None if gpu.power_w is None else 0.0
        else:
            self.idle_low, self.idle_high = min(self.idle_low, util), max(self.idle_high, util)
            if gpu.power_w is not None:
                self.idle_joules = (self.idle_joules or 0.0) + gpu.power_w * (now - last)
        self.idle_last, self.idle_last_read = now, read
        return now - self.idle_at

    def memory_level(self, gpu: GpuSample, fraction: float, rules: AlertRules) -> Health:
        """Update and return the memory level for this sample."""
        pct = fraction * 100.0
        total = gpu.memory_total_mib or 0
        free = gpu.memory_free_mib
        free_line = rules.memory_warning_free_gib * MIB_PER_GIB
        target = rules.memory_health(fraction, free)
        if target.rank >= self.level.rank:
            self.level, self.calm = target, 0
            return target
        margin = rules.clear_margin_pct
        if pct >= rules.memory_critical_pct - margin:
            lower = Health.CRITICAL
        elif pct >= rules.memory_warning_pct - margin or (
            free is not None and free < free_line + margin / 100.0 * total and free_line > 0
        ):
            lower = Health.WARNING
        else:
            lower = Health.OK
        if lower.rank >= self.level.rank:
            self.calm = 0
        else:
            self.calm += 1
            if self.calm >= rules.clear_samples:
                self.level, self.calm = lower, 0
        return self.level

    def held_by(self, now: float, pids: frozenset[int]) -> None:
        """The PIDs on the GPU at ``now``. A process that left took its memory with it: the
        highs held with it say nothing of those still there, so the high water starts
        again, and the fall seen within ``DEPARTURE_S`` of it is no high left (a job
        ramping on after the other container's jupyter is stopped is warned of again two
        windows after the fall)."""
        if self.holders - pids:
            self.left_at = now
            self.high_water.clear()
        self.holders = pids

    def time_to_full(
        self, now: float, gpu: GpuSample, fraction: float, rules: AlertRules
    ) -> float | None:
        """Add this sample to the window and return the estimate (also kept in ``ttf``):
        None unless the rise is sustained to a new high (the module docstring)."""
        used = float(gpu.memory_used_mib or 0)
        times, values, high = self.times, self.used, self.high_water
        total = gpu.memory_total_mib or 0
        step = TREND_STEP_PCT / 100.0 * total
        top_at, top = self.top
        if used > top:
            self.top = (now, used)
        elif used < top - step:  # fallen from its top: a high held and left
            if self.left_at is None or now - self.left_at > DEPARTURE_S:
                while high and high[-1][1] <= top:
                    high.pop()
                high.append((top_at, top))
            self.top = (now, used)
        if values and used < values[-1] - step:
            times.clear()  # a fall between two samples (a process gone, a cache emptied)
            values.clear()  # ends the trend: the window starts again after it
        while high and high[0][0] < now - HIGH_WATER_S:
            high.popleft()
        if used < rules.oom_death_low_pct / 100.0 * total:
            high.clear()  # emptied: the old highs were held by processes now gone
        times.append(now)
        values.append(used)
        horizon = now - rules.ttf_window_s
        while times[0] < horizon:
            times.popleft()
            values.popleft()
        self.ttf = None
        floor = rules.ttf_min_used_pct / 100.0 * total
        if (
            len(times) < rules.ttf_min_points
            or now - times[0] < rules.ttf_window_s * 2.0 / 3.0
            or fraction * total < floor
            or min(values) < floor
            or (high and used < high[0][1] + step)
        ):
            return None
        free = gpu.memory_free_mib
        full = used + free if free is not None else total - (gpu.memory_reserved_mib or 0)
        fit = fit_time_to_full(list(times), list(values), now, full, rules.ttf_min_rate_mib_s)
        if fit is not None:
            self.ttf, self.rate = fit
        return self.ttf

    def death(
        self, now: float, fraction: float, rules: AlertRules, *, at: float | None = None
    ) -> tuple[float, float] | None:
        """(peak fraction, seconds) when memory just fell from near-full to near-empty.
        ``at``: the sample's own time, which ``emptied_at`` keeps (it is compared with
        alerts' dates; None: ``now``)."""
        if fraction >= rules.oom_death_high_pct / 100.0:
            fresh = self.high_at is not None and now - self.high_at <= rules.oom_death_window_s
            self.peak = max(self.peak, fraction) if fresh else fraction
            self.high_at = now
            return None
        if fraction >= rules.oom_death_low_pct / 100.0:
            return None
        self.emptied_at = now if at is None else at
        high_at, self.high_at = self.high_at, None
        if high_at is not None and now - high_at <= rules.oom_death_window_s:
            return self.peak, now - high_at
        return None


def foreign_held(processes: tuple[GpuProcess, ...], watched: int | None) -> Held | None:
    """The memory processes of another container or of the host hold on a GPU whose
    ``processes`` these are (``Held``: in all, the biggest holder, how many others); None
    when none do (or nothing is known of them)."""
    others = [p for p in foreign(processes, watched) if p.memory_mib]
    if not others:
        return None
    others.sort(key=lambda p: -(p.memory_mib or 0))
    total = sum(p.memory_mib or 0 for p in others)
    first = others[0]
    holder = Holder(first.container, first.host_pid, first.short_name)
    return Held(total, holder, len(others) - 1)


def foreign_memory(
    gpu: GpuSample, processes: tuple[GpuProcess, ...], watched: int | None
) -> str | None:
    """The ``foreign_process`` text for ``gpu`` (``GPU 6: 20.1 GiB held by CT 201
    jupyter``) when processes of another container or of the host hold memory on it,
    the biggest holder named; None when none do (or nothing is known of them)."""
    held = foreign_held(processes, watched)
    return None if held is None else held_on(gpu.index, held)


def held_on(index: int, held: Held) -> str:
    """``GPU 6: 20.1 GiB held by CT 201 jupyter``: the ``foreign_process`` alert's text."""
    return f"GPU {index}: {held}"
