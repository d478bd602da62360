"""The host line: the target's own CPU, memory, load average and swap (``HostLoad``), one
line under the host's header where the screen has room (from 40 lines)."""

from __future__ import annotations

from rich.text import Text

from gpumon.backends.model import HostLoad
from gpumon.tui.views.gpu_cells import Role, percent
from gpumon.tui.views.palette import Palette

KIB_PER_GIB = 1024 * 1024
RAM_WARNING_PCT = 90.0  # used memory of the target: past this it is worth a look
SWAP_WARNING_PCT = 50.0


def _gib(kib: int) -> str:
    return f"{kib / KIB_PER_GIB:.1f}"


def host_load_parts(load: HostLoad) -> list[tuple[str, str, Role]]:
    """(label, value, role) of each part: ``CPU 34% of 64``, ``RAM 412.3/1007.5 GiB``,
    ``load 12.3 10.1 9.8``, ``swap 0.0/8.0 GiB``; a value the target did not give is n/a;
    swap is left out where there is none."""
    parts: list[tuple[str, str, Role]] = []
    cpus = f" of {load.cpus}" if load.cpus else ""
    if load.cpu_pct is None:
        parts.append(("CPU", "n/a", Role.NA))
    else:
        busy = Role.WARNING if load.cpu_pct >= 95 else Role.NORMAL
        parts.append(("CPU", f"{percent(load.cpu_pct)}{cpus}", busy))
    total, free = load.mem_total_kib, load.mem_available_kib
    if total and free is not None:
        used = total - free
        role = Role.WARNING if used * 100 >= total * RAM_WARNING_PCT else Role.NORMAL
        parts.append(("RAM", f"{_gib(used)}/{_gib(total)} GiB", role))
    else:
        parts.append(("RAM", "n/a", Role.NA))
    if load.load is None:
        parts.append(("load", "n/a", Role.NA))
    else:
        one = load.load[0]
        role = Role.WARNING if load.cpus and one > 2 * load.cpus else Role.NORMAL
        parts.append(("load", " ".join(f"{v:.1f}" for v in load.load), role))
    swap_total, swap_free = load.swap_total_kib, load.swap_free_kib
    if swap_total and swap_free is not None:
        used = swap_total - swap_free
        role = Role.WARNING if used * 100 >= swap_total * SWAP_WARNING_PCT else Role.NORMAL
        parts.append(("swap", f"{_gib(used)}/{_gib(swap_total)} GiB", role))
    return parts


def host_load_text(load: HostLoad, palette: Palette, *, stale: bool = False) -> Text:
    """The host line as shown: labels muted, values in their role's colour."""
    text = Text(" host ", palette.text(Role.MUTED), no_wrap=True, overflow="ellipsis")
    for label, value, role in host_load_parts(load):
        text.append(f" {label} ", palette.text(Role.MUTED))
        text.append(value, palette.text(role, stale=stale))
        text.append(" ")
    return text
