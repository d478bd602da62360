"""Process lines and the memory flags of a GPU row (pure: records to text and roles).

- ``process_line``: ``CT200 1234 root python train.py --cfg …  42% 92.9G`` in a given
  width; the command line is what gives way (ellipsis), its SM share (where reported)
  and the memory stay at the right;
- ``process_key``: which process a line is from one sample to the next (host PID, else
  PID, and start time: a reused PID is another key), for the dashboard's cursor;
- ``memory_flag``: ``20.1 GiB held by CT 201 jupyter`` (warning) when another container or
  the host holds memory on the GPU, else ``12.0 GiB not attributed`` (muted) when used
  memory beyond the driver's reserve is held by no listed process.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource
from gpumon.backends.parsers.processes import (
    foreign,
    holder_text,
    process_columns,
    unattributed_mib,
)

from .gpu_cells import Cell, Role, gib

__all__ = [
    "ProcessKey",
    "ProcessLine",
    "memory_flag",
    "process_key",
    "process_line",
    "process_lines",
]

MEM_W = 7  # "  92.9G"
SM_W = 5  # " 100%"
SM_MIN_WIDTH = 100  # narrower lines leave the SM share to the detail view

ProcessKey = tuple[int | None, int | None, float | None]


def process_key(p: GpuProcess) -> ProcessKey:
    """``(host PID, PID when there is no host PID, start time)``: the same process in
    every sample that lists it, another key for a new process that got its PID."""
    start = float(p.start_ticks) if p.start_ticks is not None else p.started
    return (p.host_pid, p.pid if p.host_pid is None else None, start)


@dataclass(frozen=True, slots=True)
class ProcessLine:
    """One process, cut into the columns a line shows."""

    where: str  # CT200, host, docker:3f2a…
    pid: str  # inside the watched container; "h1234" (host PID) when not in it
    user: str
    command: str
    memory: str  # "92.9G", "?" (device files: not known), "n/a"
    role: Role  # WARNING for another container's / the host's process
    process: GpuProcess
    sm: str = ""  # " 42%": its SM share (approximate), before the memory; "" not reported

    def text(self, width: int) -> str:
        """The line in ``width`` cells (the command is cut to fit, with an ellipsis)."""
        head = f"{self.where} {self.pid} {self.user} "
        sm = self.sm if width >= SM_MIN_WIDTH else ""  # at 80 columns the command keeps it
        room = max(width - len(head) - MEM_W - len(sm), 8)
        command = self.command if len(self.command) <= room else self.command[: room - 1] + "…"
        tail = sm + self.memory.rjust(MEM_W)
        return f"{head}{command.ljust(room)}{tail}"[: max(width, 0)]


def process_line(p: GpuProcess, watched: int | None) -> ProcessLine:
    """``p`` in the columns ``process_columns`` composes (``snapshot`` says the same)."""
    if p.source == ProcessSource.DEVICE_FILES:
        memory = "?"
    else:
        memory = "n/a" if p.memory_mib is None else f"{gib(p.memory_mib)}G"
    said = process_columns(p, watched)
    foreign_one = bool(foreign((p,), watched))
    return ProcessLine(
        where=said.where,
        pid=said.pid,
        user=said.user,
        command=said.command,
        memory=memory,
        role=Role.WARNING if foreign_one else Role.NORMAL,
        process=p,
        sm="" if p.sm_pct is None else f"{said.sm:>{SM_W}}",
    )


def process_lines(sample: HostSample, gpu: GpuSample, watched: int | None) -> list[ProcessLine]:
    return [process_line(p, watched) for p in sample.processes_for(gpu)]


def memory_flag(sample: HostSample, gpu: GpuSample, watched: int | None) -> Cell | None:
    """What the GPU row says about who holds its memory, or None when all is accounted."""
    procs = sample.processes_for(gpu)
    others = [p for p in foreign(procs, watched) if p.memory_mib]
    if others:
        total = sum(p.memory_mib or 0 for p in others)
        biggest = max(others, key=lambda p: p.memory_mib or 0)
        more = f" +{len(others) - 1}" if len(others) > 1 else ""
        return Cell(f"{gib(total)} GiB held by {holder_text(biggest)}{more}", Role.WARNING)
    rest = unattributed_mib(sample, gpu)
    if rest is not None:
        return Cell(f"{gib(rest)} GiB not attributed", Role.MUTED)
    return None
