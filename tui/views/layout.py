"""How the screen's lines are shared: GPU rows first, then the workload panes, then taller
GPU rows when there is still room.

Per host, always: the header (2 lines with an error), the column titles, one line per GPU
(plus one per sick GPU), the jobs pane (a title line and every job: they are what the
action keys act on), the vLLM pane (a title line and every server: a wedged one is
never left out) and the SGLang pane's title and aggregate line. What is left goes to
SGLang server lines (all of them when they fit, else as many as fit, down ones first),
then, from ``TALL_SCREEN`` lines, to each host's host line (the target's CPU, RAM, load,
swap), to each host's process table (its title and up to ``PROCESS_TABLE_MAX`` processes,
busiest first) and to 2-3 line GPU rows. When even the minimum does not fit, the host list scrolls.
80x24 keeps one line per GPU and no host line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TALL_SCREEN = 40  # from this many lines, GPU rows grow to 2-3 lines
MAX_ROW_HEIGHT = 3
SECTION_MARGIN = 1  # blank line below each host (the stylesheet's margin-bottom)
PROCESS_TABLE_MAX = 12  # process lines of the main screen's table, at most


@dataclass(frozen=True, slots=True)
class HostNeeds:
    """What one host section would like to show."""

    gpus: int  # GPU rows (8 assumed before the first sample)
    extra_lines: int = 0  # the header's error line, problem lines of sick GPUs
    servers: int = 0  # SGLang servers
    jobs: int = 0
    vllm: int = 0  # vLLM servers
    processes: int = 0  # GPU processes (the main screen's process table)


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    row_height: int  # lines per GPU row (1-3)
    max_servers: tuple[int | None, ...]  # per host: server lines to show (None: all)
    host_line: bool = False  # every host shows its host line (CPU, RAM, load, swap)
    # per host: process lines of its process table (0: none; its 2 title lines not counted)
    max_processes: tuple[int, ...] = ()


def sglang_lines(servers: int, shown: int) -> int:
    """Lines of an SGLang pane with ``shown`` of ``servers`` server lines."""
    if servers == 0:
        return 0
    return 1 + (1 if servers >= 2 else 0) + shown


def jobs_lines(jobs: int) -> int:
    return 1 + jobs if jobs else 0


def vllm_lines(servers: int) -> int:
    return 1 + servers if servers else 0


def plan_layout(height: int, hosts: Sequence[HostNeeds], *, strip: bool = False) -> LayoutPlan:
    """Share ``height`` lines (the footer's included; ``strip``: the alert strip shows)."""
    free = height - 1 - (1 if strip else 0)
    for h in hosts:
        minimum = 1 if h.servers == 1 else 0  # a lone server is its own aggregate
        free -= 2 + h.extra_lines + h.gpus + SECTION_MARGIN
        free -= jobs_lines(h.jobs) + vllm_lines(h.vllm) + sglang_lines(h.servers, minimum)
    max_servers: list[int | None] = []
    for h in hosts:
        minimum = 1 if h.servers == 1 else 0
        want = h.servers - minimum
        give = min(want, max(free, 0))
        free -= give
        max_servers.append(None if give == want else minimum + give)
    gpus = sum(h.gpus for h in hosts)
    row_height = 1
    host_line = height >= TALL_SCREEN and free >= len(hosts)
    if host_line:
        free -= len(hosts)
    max_processes: list[int] = []
    for h in hosts:
        want = min(h.processes, PROCESS_TABLE_MAX)
        give = want if height >= TALL_SCREEN and want and free >= want + 2 else 0
        free -= give + 2 if give else 0  # its title and column titles
        max_processes.append(give)
    if height >= TALL_SCREEN and gpus:
        row_height = min(max((free + gpus) // gpus, 1), MAX_ROW_HEIGHT)
    return LayoutPlan(row_height, tuple(max_servers), host_line, tuple(max_processes))
