"""The target's own load, read from /proc: CPU busy %, memory, load average, swap.

Runs on the target, inside the container when one is configured (where /proc/meminfo is
LXCFS's view of the container's limits). Standard library only, Python 3.8 syntax.
``HostStatsReader.read()`` returns a ``protocol.HostStats``; a file that cannot be read
leaves its values None, never 0. CPU % needs two readings: the first has none.
"""

from __future__ import annotations

import os
import time

from . import protocol

PROC = "/proc"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_times(text: str) -> tuple[int, int] | None:
    """(busy, total) jiffies from /proc/stat's aggregate ``cpu`` line; iowait counts as
    idle (as top does); guest time is already inside user and nice."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                values = [int(v) for v in parts[1:9]]
            except ValueError:
                return None
            if len(values) < 4:
                return None
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            total = sum(values)
            return total - idle, total
    return None


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as ``{key: kiB}``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            out[key.strip()] = int(words[0])
    return out


def loadavg(text: str) -> tuple[float, float, float] | None:
    words = text.split()
    try:
        return float(words[0]), float(words[1]), float(words[2])
    except (IndexError, ValueError):
        return None


class HostStatsReader:
    """Reads /proc once per call; keeps the last CPU counters for the busy % between."""

    def __init__(self, proc: str = PROC) -> None:
        self.proc = proc
        self._last_cpu: tuple[int, int] | None = None

    def read(self) -> protocol.HostStats:
        stat = _read(os.path.join(self.proc, "stat"))
        cpu = cpu_times(stat) if stat is not None else None
        cpu_pct = None
        if cpu is not None and self._last_cpu is not None:
            busy, total = cpu[0] - self._last_cpu[0], cpu[1] - self._last_cpu[1]
            if total > 0 and busy >= 0:
                cpu_pct = round(100.0 * busy / total, 1)
        if cpu is not None:
            self._last_cpu = cpu
        mem = meminfo(_read(os.path.join(self.proc, "meminfo")) or "")
        load = loadavg(_read(os.path.join(self.proc, "loadavg")) or "")
        return protocol.HostStats(
            t=time.time(),
            cpu_pct=cpu_pct,
            cpus=os.cpu_count(),
            mem_total_kib=mem.get("MemTotal"),
            mem_available_kib=mem.get("MemAvailable"),
            swap_total_kib=mem.get("SwapTotal"),
            swap_free_kib=mem.get("SwapFree"),
            load=list(load) if load is not None else None,
        )
