"""The process table of the GPU detail view and the main screen (pure: records to lines).

- ``SORTS``: the columns the table sorts by, in the order ``o`` steps through them; SM %
  first (who is computing), then memory-bandwidth %, GPU memory, CPU %, host RSS, PID,
  user, command; a value not reported sorts last, never as 0;
- ``sorted_processes``: the processes in one column's order;
- ``process_tree``: launchers and their workers (``torchrun`` and its ranks): processes of
  one parent under that parent's line, the parent's own line where it holds no GPU;
- ``table_lines``: the header and one line per process (or launcher), cut to a width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.backends.model import GpuProcess, HostSample
from gpumon.backends.parsers.processes import SHARE_NOTE, share_text

from .gpu_cells import Role, gib
from .process_cells import ProcessLine, process_line

__all__ = [
    "SHARE_NOTE",
    "SORTS",
    "TableLine",
    "display_order",
    "host_table_lines",
    "next_sort",
    "process_tree",
    "sorted_processes",
    "table_lines",
]


SortKey = Callable[[GpuProcess], tuple[bool, Any]]


def _number(get: Callable[[GpuProcess], float | int | None]) -> SortKey:
    """Largest first; None (not reported) after every number."""

    def key(p: GpuProcess) -> tuple[bool, float]:
        v = get(p)
        return (v is None, -(v or 0))

    return key


def _text(get: Callable[[GpuProcess], str | int | None]) -> SortKey:
    def key(p: GpuProcess) -> tuple[bool, str | int]:
        v = get(p)
        return (v is None, v if v is not None else "")

    return key


# name -> (header word, sort key); the order ``o`` steps through
SORTS: dict[str, tuple[str, SortKey]] = {
    "sm": ("SM~", _number(lambda p: p.sm_pct)),
    "bw": ("BW~", _number(lambda p: p.mem_bw_pct)),
    "memory": ("MEMORY", _number(lambda p: p.memory_mib)),
    "cpu": ("CPU", _number(lambda p: p.cpu_pct)),
    "rss": ("RSS", _number(lambda p: p.rss_mib)),
    "pid": ("PID", _text(lambda p: p.shown_pid)),
    "user": ("USER", _text(lambda p: p.user)),
    "command": ("COMMAND", _text(lambda p: p.command or p.name)),
}


def next_sort(name: str) -> str:
    names = list(SORTS)
    return names[(names.index(name) + 1) % len(names)] if name in SORTS else names[0]


def sorted_processes(procs: Sequence[GpuProcess], sort: str) -> list[GpuProcess]:
    """``procs`` by the column ``sort`` (stable: equal ones keep the driver's order)."""
    return sorted(procs, key=SORTS.get(sort, SORTS["sm"])[1])


@dataclass(frozen=True, slots=True)
class TreeRow:
    depth: int  # 0: a process or launcher at the top, 1: a worker under its launcher
    process: GpuProcess | None  # None: a launcher that holds no GPU itself
    launcher: str = ""  # its command line (``ppid``'s), for a launcher's row
    ppid: int | None = None


def process_tree(procs: Sequence[GpuProcess]) -> list[TreeRow]:
    """Workers under their launcher: processes that share a parent (its ``ppid``), or
    whose parent is listed itself, are shown under it, in ``procs``' order; a parent
    that holds no GPU gets a line of its own (``torchrun ...``). The rest stay as they
    are."""
    listed = {p.pid for p in procs if p.pid is not None}
    children: dict[int, list[GpuProcess]] = {}
    for p in procs:
        if p.ppid is not None and p.pid is not None:
            children.setdefault(p.ppid, []).append(p)
    groups = {ppid: kids for ppid, kids in children.items() if ppid in listed or len(kids) > 1}
    under = {id(p) for kids in groups.values() for p in kids}
    out: list[TreeRow] = []
    placed: set[int] = set()
    for p in procs:
        if id(p) in under:
            ppid = p.ppid
            if ppid is None or ppid in listed or ppid in placed:
                continue
            placed.add(ppid)  # a launcher that holds no GPU: its line, then its workers
            out.append(TreeRow(0, None, p.parent or f"PID {ppid}", ppid))
            out += [TreeRow(1, kid) for kid in groups[ppid]]
            continue
        out.append(TreeRow(0, p))
        if p.pid is not None and p.pid in groups:
            out += [TreeRow(1, kid) for kid in groups[p.pid]]
    return out


@dataclass(frozen=True, slots=True)
class TableLine:
    text: str
    role: Role
    process: GpuProcess | None  # None: the header, a launcher's line


def _header(wide: bool, sort: str) -> str:
    def h(name: str, width: int, left: bool = False) -> str:
        word = SORTS[name][0] + ("▼" if name == sort else "")
        return f"{word:<{width}}" if left else f"{word:>{width}}"

    cols = f"   {'WHERE':<7} {h('pid', 8)} "
    if wide:
        cols += f"{'HOST PID':>9} {h('user', 8, True)} {h('cpu', 5)} {h('rss', 6)}"
    else:
        cols += h("user", 8, True)
    return f"{cols} {h('memory', 7)} {h('sm', 5)} {h('bw', 5)}  {h('command', 0, True)}"


def table_lines(
    procs: Sequence[GpuProcess],
    watched: int | None,
    *,
    width: int,
    wide: bool,
    sort: str = "sm",
    tree: bool = False,
    selected: GpuProcess | None = None,
) -> list[TableLine]:
    """The header and the processes' lines in ``width`` cells: sorted by ``sort``, or as
    a tree (``process_tree``, its groups in that order); ``selected`` marked ``▶``."""
    head = _header(wide, sort)
    out = [TableLine(head, Role.NA, None)]
    for row in _rows(procs, sort, tree):
        p = row.process
        if p is None:
            text = f"   {'parent':<7} {row.ppid or '':>8}".ljust(head.index("COMMAND"))
            text += row.launcher
            out.append(TableLine(_cut(text, width), Role.MUTED, None))
            continue
        line = process_line(p, watched)
        text = _row_text(line, wide, "▶ " if p is selected else "  ", row.depth)
        out.append(TableLine(_cut(text, width), line.role, p))
    return out


def _row_text(line: ProcessLine, wide: bool, mark: str, depth: int) -> str:
    p = line.process
    pid = "-" if p.pid is None else str(p.pid)
    if not wide and p.pid is None:
        pid = line.pid  # "h3187442": the host's, as the narrow table has no column
    host_pid = "-" if p.host_pid is None else str(p.host_pid)
    cpu = "-" if p.cpu_pct is None else f"{p.cpu_pct:.0f}%"
    rss = "-" if p.rss_mib is None else f"{gib(p.rss_mib)}G"
    cols = f"{mark} {line.where[:7]:<7} {pid:>8} "
    if wide:
        cols += f"{host_pid:>9} {line.user[:8]:<8} {cpu:>5} {rss:>6}"
    else:
        cols += f"{line.user[:8]:<8}"
    cols += f" {line.memory:>7} {share_text(p.sm_pct):>5} {share_text(p.mem_bw_pct):>5}  "
    return cols + "  " * depth + line.command


def host_table_lines(
    sample: HostSample, watched: int | None, *, width: int, count: int
) -> list[TableLine]:
    """The main screen's process table of one host: a title, then its ``count``
    busiest processes of every GPU by SM % (then memory), each with its GPU."""
    pairs = [(g.index, p) for g in sample.gpus for p in sample.processes_for(g)]
    pairs.sort(key=lambda gp: (SORTS["sm"][1](gp[1]), SORTS["memory"][1](gp[1])))
    more = len(pairs) - count
    title = f"processes  {len(pairs)} on {len(sample.gpus)} GPUs"
    title += f", the {count} busiest shown (Enter: a GPU's in full)" if more > 0 else ""
    head = "GPU " + _header(True, "sm")[3:]
    out = [
        TableLine(_cut(title, width), Role.NA, None),
        TableLine(_cut(head, width), Role.NA, None),
    ]
    for index, p in pairs[:count]:
        line = process_line(p, watched)
        text = f"{index:>3} " + _row_text(line, True, "", 0)[1:]
        out.append(TableLine(_cut(text, width), line.role, p))
    return out


def _rows(procs: Sequence[GpuProcess], sort: str, tree: bool) -> list[TreeRow]:
    ordered = sorted_processes(procs, sort)
    return process_tree(ordered) if tree else [TreeRow(0, p) for p in ordered]


def display_order(procs: Sequence[GpuProcess], sort: str, tree: bool) -> list[GpuProcess]:
    """The processes in the order ``table_lines`` shows them (the cursor steps so)."""
    return [r.process for r in _rows(procs, sort, tree) if r.process is not None]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"
