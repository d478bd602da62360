"""One sample's GPU time, split among who holds each GPU: the accounting's arithmetic.

A sample accounts for the time since the host's previous sample (``Tally.add``), at most
``gap_s`` (stale data is not time: a longer gap counts nothing, as ``gpu_idle_held``'s
count starts again after it). Each GPU's seconds go to its holders, in proportion to the
memory each holds on it (equally where none says how much; to nobody, ``-``, where no
process holds it), and each holder's share is:

- *used*: the GPU at or over ``idle_util_pct`` utilisation (busy);
- *held idle*: the GPU held and idle in this sample: ``IdleHeld.sample``, the one test of
  ``gpu_idle_held`` and the fleet's ``idle-allocated`` (more than ``idle_held_min_mib``
  used at under ``idle_util_pct``); a GPU whose utilisation is not reported is neither;
- *energy*: in joules, what the GPU's energy counter (NVML's
  ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded: the
  sample's ``energy_mj``) rose by since the previous sample, *measured*; else the GPU's
  power draw times the seconds, *estimated*: where only nvidia-smi is read (it has no
  energy field), the GPU answers NOT_SUPPORTED, or the counter went down (the driver was
  reloaded between the two samples: what it counted before is gone, and the new count
  started at an unknown moment).

An owner is three words: the process's container (``CT200``, ``host``, as the process
lines write it), its user, and its job: the GPU's owner as the dashboard's owner column
names it (``gpu_owned_by``: a configured job, ``sglang:PORT``, ``vllm:PORT``) for the
watched container's processes, else the process's program (another container's jupyter
on the drafter's GPU is not the drafter's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpumon.backends.alerts.rules import (
    IDLE_GAP_INTERVALS,
    STALE_WARNING_FLOOR_S,
    AlertRules,
)
from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource
from gpumon.backends.parsers.processes import foreign, process_columns
from gpumon.backends.workloads.owners import OwnedBy

__all__ = [
    "ESTIMATED",
    "MAX_OWNERS_PER_GPU",
    "MEASURED",
    "MINUTE",
    "NOBODY",
    "OTHERS",
    "Owner",
    "Tally",
    "energy",
    "gap_for",
]

MINUTE = 60
# How a GPU's energy is known: the exporter's ``method`` label (docs/on-call.md)
MEASURED = "energy_counter"
ESTIMATED = "power_x_time"
NOBODY = "-"  # a GPU no process holds: its time is nobody's
OTHERS = "(others)"  # owners past MAX_OWNERS_PER_GPU on one GPU in one minute
MAX_OWNERS_PER_GPU = 16  # the bound on a minute's rows per GPU (docs/usage.md)
# The sums a row keeps, in the database's column order.
SUMS = ("seconds", "used_s", "idle_s", "energy_j", "memory_mib_s", "util_s")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a GPU: ``container`` (``CT200``, ``host``), ``user``, ``job``."""

    container: str
    user: str
    job: str


Key = tuple[int, int, str, str, str]  # minute, GPU, container, user, job


def energy(gpu: GpuSample, before_mj: int | None, dt: float) -> tuple[float | None, str]:
    """The joules ``gpu`` drew in the ``dt`` seconds since the sample whose energy counter
    read ``before_mj``, and how they are known: ``MEASURED`` (the counter's rise),
    ``ESTIMATED`` (power x time: no counter on both samples, or the counter went down,
    the driver reloaded), None where neither is read."""
    now_mj = gpu.energy_mj
    if now_mj is not None and before_mj is not None and now_mj >= before_mj:
        return (now_mj - before_mj) / 1000, MEASURED
    if gpu.power_w is None:
        return None, ESTIMATED
    return gpu.power_w * dt, ESTIMATED


def gap_for(interval_s: float) -> float:
    """The longest gap between two samples that still counts as watched time: the
    ``gpu_idle_held`` count's (``IDLE_GAP_INTERVALS`` sampling intervals, at least
    ``STALE_WARNING_FLOOR_S``)."""
    return max(STALE_WARNING_FLOOR_S, IDLE_GAP_INTERVALS * interval_s)


class Tally:
    """Minute rows of one host, summed in memory until ``take`` hands them to the
    database (the writes are batched: one transaction a minute, off the event loop)."""

    def __init__(self, rules: AlertRules, watched: int | None = None) -> None:
        self.rules = rules
        self.watched = watched
        self._test = rules.idle_held
        self.rows: dict[Key, list[float]] = {}
        self.estimated = False  # some energy came from power x time
        self._last: float | None = None
        self._counters: dict[int, int] = {}  # each GPU's energy counter at the last sample
        # Since the start, for the exporter's counters (they only go up): joules per GPU
        # and method (MEASURED, ESTIMATED), and GPU-seconds used and held idle per owner.
        self.joules: dict[tuple[int, str], float] = {}
        self.owner_s: dict[Owner, list[float]] = {}

    def add(
        self,
        sample: HostSample,
        processes: tuple[GpuProcess, ...],
        owners: Mapping[int, OwnedBy],
        gap_s: float,
    ) -> float:
        """Account ``sample`` (``processes``: the host's list at that time; ``owners``:
        ``gpu_owned_by``'s); returns the seconds it accounts for."""
        last, self._last = self._last, sample.time
        counted = self._counters
        self._counters = {g.index: g.energy_mj for g in sample.gpus if g.energy_mj is not None}
        if last is None or not 0 < sample.time - last <= gap_s:
            return 0.0
        dt = sample.time - last
        minute = int(sample.time // MINUTE) * MINUTE
        held = sample if processes is sample.processes else replace(sample, processes=processes)
        for gpu in sample.gpus:
            util = gpu.utilization_pct
            busy = util is not None and util >= self.rules.idle_util_pct
            idle = self._test.sample(gpu.memory_used_mib, util)
            joules, method = energy(gpu, counted.get(gpu.index), dt)
            self.estimated |= method == ESTIMATED
            if joules is not None:
                spent = (gpu.index, method)
                self.joules[spent] = self.joules.get(spent, 0.0) + joules
            for owner, share, mib in self._holders(held, gpu, owners):
                key = (minute, gpu.index, owner.container, owner.user, owner.job)
                row = self.rows.get(key)
                if row is None:
                    key = self._bounded(key)
                    row = self.rows.setdefault(key, [0.0] * len(SUMS))
                s = dt * share
                owned_s = self.owner_s.setdefault(owner, [0.0, 0.0])
                owned_s[0] += s if busy else 0.0
                owned_s[1] += s if idle else 0.0
                row[0] += s
                row[1] += s if busy else 0.0
                row[2] += s if idle else 0.0
                row[3] += (joules or 0.0) * share
                row[4] += (mib or 0.0) * dt
                row[5] += (util or 0.0) * s
        return dt

    def _bounded(self, key: Key) -> Key:
        """``key``, or the minute's ``OTHERS`` row of its GPU once that GPU has
        ``MAX_OWNERS_PER_GPU`` owners in the minute."""
        minute, gpu = key[0], key[1]
        count = sum(1 for k in self.rows if k[0] == minute and k[1] == gpu)
        if count < MAX_OWNERS_PER_GPU:
            return key
        return (minute, gpu, OTHERS, OTHERS, OTHERS)

    def _holders(
        self, sample: HostSample, gpu: GpuSample, owners: Mapping[int, OwnedBy]
    ) -> list[tuple[Owner, float, float | None]]:
        """Who holds ``gpu``: each owner, its share of the GPU, its memory."""
        procs = [
            p for p in sample.processes_for(gpu) if p.source != ProcessSource.DEVICE_FILES.value
        ]
        if not procs:
            return [(Owner(NOBODY, NOBODY, NOBODY), 1.0, None)]
        others = {id(p) for p in foreign(procs, self.watched)}
        owned = owners.get(gpu.index)
        total = sum(p.memory_mib or 0 for p in procs)
        merged: dict[Owner, list[float]] = {}
        for p in procs:
            words = process_columns(p, self.watched)
            # another container's process on a job's GPU is not the job's
            job = owned.text if owned is not None and id(p) not in others else p.short_name
            owner = Owner(words.where or "host", words.user, job or "?")
            share = (p.memory_mib or 0) / total if total > 0 else 1.0 / len(procs)
            entry = merged.setdefault(owner, [0.0, 0.0])
            entry[0] += share
            entry[1] += p.memory_mib or 0
        return [(o, share, mib) for o, (share, mib) in merged.items()]

    def take(self, before: float | None = None) -> list[tuple[Key, list[float]]]:
        """The rows of minutes that began before ``before`` (all: None), removed."""
        keys = [k for k in self.rows if before is None or k[0] + MINUTE <= before]
        return [(k, self.rows.pop(k)) for k in keys]
