"""What the benches read of a process in /proc: its children and whole tree, its CPU time
in clock ticks and its memory (proc(5): ``stat`` fields 14-17 utime, stime, cutime,
cstime; ``status``'s ``VmRSS`` and ``VmHWM`` in kB). A process that has gone meanwhile
counts nothing: a bench's tree changes while it reads it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["CLK_TCK", "children", "cmdline", "memory_kib", "stat", "ticks", "tree"]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command's name (``[0]``: the state, ``[1]``
    the parent's PID, ``[11]`` utime); None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children(pid: int) -> list[int]:
    """The processes that ``pid``'s threads started, still running."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(p) for p in (task / "children").read_text().split()]
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it, ``pid`` first."""
    everyone, frontier = [pid], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children(p)]
        everyone += frontier
    return everyone


def cmdline(pid: int) -> str:
    """Its command line, words joined by spaces ("" when gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def ticks(pids: list[int], reaped: bool = False) -> int:
    """The CPU time (user + system) of ``pids``, in ``CLK_TCK``; with ``reaped``, that of
    the children they waited for too."""
    total = 0
    for pid in pids:
        fields = stat(pid)
        if fields is not None:
            total += sum(int(f) for f in fields[11 : 15 if reaped else 13])
    return total


def memory_kib(pids: list[int], key: str = "VmRSS") -> int:
    """``key`` of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``: the peak) summed over ``pids``."""
    total = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in lines if line.startswith(key + ":"))
    return total
