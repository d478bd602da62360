"""Who holds a GPU's memory: process records from the host side and from inside the
container made into ``GpuProcess``es, attributed to the watched container, and what no
process accounts for.

- ``from_record``: a ``protocol.ProcRecords`` record (``remote.host_procs``) -> GpuProcess,
  every value checked (the other end is not trusted), the command's secrets masked
  (``masking.mask_command``: ``--api-key ****``);
- ``device_gpus``: a device-file user on the GPUs its ``/dev/nvidiaN`` are
  (``GpuRegistry.holders``: N is the driver's minor, not nvidia-smi's index);
- ``container_view``: without host access, the driver's list merged with the device-file
  users: a driver PID that is not a process of this namespace keeps its memory but loses
  its ``pid`` (it is someone else's, or the host's number for one of ours);
- ``with_details``: the driver's processes with ``/proc``'s facts of those in the agent's
  own namespace (user, command line, CPU %, RSS, parent);
- ``with_usage``: each process's SM and memory-bandwidth % (NVML's samples, ``pmon``);
- ``foreign``: memory on a GPU held by a process of another container or of the host;
- ``unattributed_mib``: used memory beyond what the listed processes hold;
- ``process_columns``: a process as the dashboard's process line and ``snapshot``'s
  process table both say it (where, PID, user, command): one composer for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumon.backends.masking import mask_command
from gpumon.backends.model import GpuProcess, GpuRegistry, GpuSample, HostSample, ProcessSource
from gpumon.backends.untrusted import printable

__all__ = [
    "SHARE_NOTE",
    "UNATTRIBUTED_MIN_MIB",
    "container_label",
    "container_view",
    "device_gpus",
    "foreign",
    "from_record",
    "holder_text",
    "holder_words",
    "index_ranges",
    "process_columns",
    "process_words",
    "share_text",
    "unattributed_mib",
    "usage_key",
    "with_details",
    "with_usage",
]

# Used memory no process accounts for, in the real captures (tests/fixtures/nvidia/
# real-captures, one loaded nvidia-smi table each): 16-20 MiB on H100/H200/L40S, 69-73 MiB
# with MIG, 215-586 MiB on GeForce cards whose desktop's graphics contexts are not compute
# apps. 1 GiB stays well above all of them (tests/unit/test_processes.py reads them) and
# still shows anything that matters on a 96 GiB board.
UNATTRIBUTED_MIN_MIB = 1024


def _int(raw: Mapping[str, Any], key: str) -> int | None:
    v = raw.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _float(raw: Mapping[str, Any], key: str) -> float | None:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _text(raw: Mapping[str, Any], key: str, limit: int = 4096) -> str | None:
    v = raw.get(key)
    return printable(v[:limit]) if isinstance(v, str) and v else None


def from_record(raw: Mapping[str, Any], source: str, watched: int | None) -> GpuProcess:
    """A process from one record. ``source`` ``host``: ``pid`` is the PID inside the
    watched container ``watched`` when the process is in it, else None; ``device-files``:
    the record's own ``pid`` (this namespace's) and the device files it holds
    (``minors``; which GPUs they are: ``device_gpus``)."""
    container = _text(raw, "container", 80)
    pid = _int(raw, "pid")
    if source == ProcessSource.HOST and watched is not None and container != str(watched):
        pid = None  # another container's or the host's: no PID in the watched one
    held = raw.get("minors")
    minors = (
        tuple(m for m in held if isinstance(m, int) and not isinstance(m, bool) and m >= 0)
        if isinstance(held, list)
        else ()
    )
    # Masked here, where every collector's record becomes a process, so no view of it (the
    # dashboard, snapshot, the recording, the bundle) can show a --api-key's value.
    command = _text(raw, "command")
    command = mask_command(command) if command else None
    return GpuProcess(
        pid=pid,
        name=command.split(" ", 1)[0] if command else None,
        memory_mib=_int(raw, "memory_mib"),
        gpu_uuid=_text(raw, "gpu_uuid", 80),
        gpu_bus_id=_text(raw, "gpu_bus_id", 80),
        host_pid=_int(raw, "host_pid"),
        container=container,
        user=_text(raw, "user", 64),
        host_user=_text(raw, "host_user", 64),
        command=command,
        cpu_pct=_float(raw, "cpu_pct"),
        rss_mib=_float(raw, "rss_mib"),
        started=_float(raw, "started"),
        start_ticks=_int(raw, "start_ticks"),
        source=ProcessSource.HOST.value
        if source == ProcessSource.HOST
        else ProcessSource.DEVICE_FILES.value,
        minors=minors[:64],
        ppid=_int(raw, "ppid"),
        parent=_parent(raw),
    )


def _parent(raw: Mapping[str, Any]) -> str | None:
    parent = _text(raw, "parent")
    return mask_command(parent) if parent else None


def with_details(
    driver: Iterable[GpuProcess], records: Iterable[Mapping[str, Any]]
) -> tuple[GpuProcess, ...]:
    """The driver's processes with what ``/proc`` says of those whose PID is in
    ``records`` (the agent's own namespace: ``Procs.details``): user, full command line,
    CPU %, RSS, start, parent. The driver's memory and GPU stay."""
    local = {
        p.pid: p
        for p in (from_record(r, ProcessSource.DEVICE_FILES, None) for r in records)
        if p.pid is not None
    }
    return tuple(
        p if p.pid not in local else _described(p, local[p.pid], p.container) for p in driver
    )


def _described(p: GpuProcess, f: GpuProcess, container: str | None) -> GpuProcess:
    """The driver's row ``p`` (its memory and GPU) with ``/proc``'s record ``f`` of its
    PID here (user, command line, CPU, RSS, start, parent)."""
    return replace(
        f,
        name=p.name or f.name,
        memory_mib=p.memory_mib,
        gpu_uuid=p.gpu_uuid,
        gpu_bus_id=p.gpu_bus_id,
        gpus=(),
        container=container,
        source=ProcessSource.CONTAINER_NVML.value,
    )


def usage_key(p: GpuProcess) -> tuple[str, int] | None:
    """(GPU UUID, the driver's PID) of ``p``: the host's PID where known (NVML lists the
    host's inside an unprivileged container), else its own."""
    pid = p.host_pid if p.host_pid is not None else p.pid
    if p.gpu_uuid is None or pid is None or p.source == ProcessSource.DEVICE_FILES:
        return None
    return (p.gpu_uuid, pid)


def with_usage(
    processes: Iterable[GpuProcess],
    usage: Iterable[Sequence[Any]],
    uuid_of: Mapping[str, str],
) -> tuple[GpuProcess, ...]:
    """``processes`` with their SM and memory-bandwidth % from the agent's ``usage``
    rows (``[gpu, pid, sm, mem]``, ``gpu`` a UUID or an index that ``uuid_of`` names);
    a process no row names keeps None (n/a)."""
    shares: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    for gpu, pid, sm, mem in usage:
        uuid = uuid_of.get(gpu, gpu)
        shares[(uuid, pid)] = (_pct(sm), _pct(mem))
    if not shares:
        return tuple(processes)
    out = []
    for p in processes:
        key = usage_key(p)
        got = None if key is None else shares.get(key)
        out.append(p if got is None else replace(p, sm_pct=got[0], mem_bw_pct=got[1]))
    return tuple(out)


def _pct(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100:
        return None
    return v


def device_gpus(processes: Iterable[GpuProcess], refs: GpuRegistry) -> tuple[GpuProcess, ...]:
    """The device-file users among ``processes`` on the GPUs of ``refs`` their
    ``/dev/nvidiaN`` are (``gpus``: those GPUs' indexes on this host); the rest as they
    are. A container that sees GPUs 4-7 numbers them 0-3: a process holding
    ``/dev/nvidia5`` is on GPU 1 there."""
    return tuple(
        replace(p, gpus=tuple(r.index for r in refs.holders(p.minors) if r.index is not None))
        if p.minors
        else p
        for p in processes
    )


def container_view(
    driver: Iterable[GpuProcess], files: Iterable[GpuProcess], watched: int | None
) -> tuple[GpuProcess, ...]:
    """The processes as seen from inside the container: the driver's (NVML / nvidia-smi)
    rows whose PID is a device-file user here get that process's details; a row whose
    PID is none of them keeps its memory with ``pid`` None and the driver's number as
    ``host_pid`` (old drivers report host PIDs); device-file users the driver did not
    list (new drivers drop what the caller cannot see) follow with unknown memory.
    Without device-file records the driver's rows are returned as they are (their
    ``container`` unknown: None)."""
    files = tuple(files)
    driver = tuple(driver)
    inside = None if watched is None else str(watched)
    if not files:  # nothing to tell our PIDs from the host's: as the driver said
        return driver
    local = {p.pid: p for p in files if p.pid is not None}
    out = []
    matched = set()
    for p in driver:
        f = None if p.pid is None else local.get(p.pid)
        if f is None:
            out.append(replace(p, pid=None, host_pid=p.pid, container=None))
            continue
        matched.add(f.pid)
        out.append(_described(p, f, inside))
    out.extend(replace(f, container=inside) for f in files if f.pid not in matched)
    return tuple(out)


def foreign(processes: Iterable[GpuProcess], watched: int | None) -> tuple[GpuProcess, ...]:
    """The host-side processes that are not in the watched container (another
    container's or the host's own); none without a watched container."""
    if watched is None:
        return ()
    return tuple(
        p for p in processes if p.source == ProcessSource.HOST and p.container != str(watched)
    )


def container_label(container: str | None) -> str:
    """``CT200`` for a Proxmox id, ``docker:3f2a...`` as it is, ``host`` for None."""
    if container is None:
        return "host"
    return f"CT{container}" if container.isdigit() else container


# Made to be drawn column by column, never compared nor printed whole: no generated
# __eq__, __hash__ or __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ProcessColumns:
    """One process in words, column by column (every text made printable)."""

    where: str  # CT200 (the watched container's or another's), host, files, ?, docker:3f2a…
    pid: str  # inside the watched container; "h1234" (host PID) when not in it; "?"
    user: str  # "?" when not known
    command: str  # the command line, else the name, else "[not visible from here]"
    sm: str  # "42%": its share of the SMs since the previous list; "n/a" not reported
    bw: str  # "17%": of the memory bandwidth; "n/a"


def process_columns(p: GpuProcess, watched: int | None) -> ProcessColumns:
    """``p`` as the dashboard and ``snapshot`` show it. ``watched``: the Proxmox container
    gpumon looks from (the host's ``container``): a process seen from inside it is that
    container's (``CT200``), whatever source listed it; without one, its place is blank."""
    if p.pid is not None:
        pid = str(p.pid)
    elif p.host_pid is not None:
        pid = f"h{p.host_pid}"
    else:
        pid = "?"
    if p.source == ProcessSource.HOST:
        where = container_label(p.container)
    elif p.source == ProcessSource.DEVICE_FILES:
        where = "files"
    elif p.pid is None:  # a driver PID that is no process here: whose, nobody can say
        where = "?"
    else:
        where = "" if watched is None else f"CT{watched}"
    command = printable(p.command or p.name or "[not visible from here]")
    if p.source == ProcessSource.DEVICE_FILES and p.gpus:
        command += f"  (uses GPUs {index_ranges(p.gpus)}, device files)"
    return ProcessColumns(
        printable(where),
        pid,
        printable(p.user or "?"),
        command,
        share_text(p.sm_pct),
        share_text(p.mem_bw_pct),
    )


# What SM~ and BW~ are, where they are shown: NVML samples each process apart, and the
# samples of one moment need not add up to the device's utilisation.
SHARE_NOTE = "SM~ BW~: each process's share since the last list (approximate)"


def share_text(pct: int | None) -> str:
    """A process's share of the GPU: ``42%``, ``n/a`` where not reported (never 0)."""
    return "n/a" if pct is None else f"{pct}%"


def index_ranges(indexes: Iterable[int], sep: str = ",") -> str:
    """0,1,2,3,5 -> "0-3,5"; 5,6 -> "5,6" (a range from three, as ``-i`` and
    CUDA_VISIBLE_DEVICES list two); "" for none. Every list of GPUs, ranks or PIDs gpumon
    says is this (``sep``: ", " in a sentence of ranks)."""
    runs: list[list[int]] = []
    for i in sorted(set(indexes)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return sep.join(f"{r[0]}-{r[-1]}" if len(r) > 2 else sep.join(map(str, r)) for r in runs)


def holder_text(p: GpuProcess) -> str:
    """``CT 201 jupyter`` / ``host python3`` / ``CT 200 python train.py`` in a sentence."""
    return holder_words(p.container, p.short_name)


def holder_words(container: str | None, program: str | None) -> str:
    """A process by its container (``container_label``'s) and program, in a sentence:
    ``CT 201 jupyter``, ``host python3``."""
    where = container_label(container)
    if where.startswith("CT"):
        where = f"CT {where[2:]}"
    return f"{where} {program or '[unknown]'}"


def process_words(p: GpuProcess) -> str:
    """``4242``, ``4242 python3``, ``1234 python3 in CT200``, ``host PID 9 jupyter in
    CT201``: which process held the memory, for the OOM alert and the restart's wait."""
    pid = str(p.pid) if p.pid is not None else f"host PID {p.host_pid or '?'}"
    name = p.short_name
    words = f"{pid} {name}" if name else pid
    if p.source == ProcessSource.HOST:
        words += f" in {container_label(p.container)}"
    return words


def unattributed_mib(sample: HostSample, gpu: GpuSample) -> int | None:
    """Used memory on ``gpu`` that no listed process with a known amount accounts for,
    when it exceeds ``UNATTRIBUTED_MIN_MIB`` (a driver's own reserve is less); None when
    it does not, when used memory is unknown, or when a process's memory is unknown
    (device-file users: nothing can be said). The used memory is the one of the moment
    the process list was taken: a job that grew since is not "unattributed" until the
    next list (the flag would blink with every sample between two lists)."""
    used = sample.memory_used_at_processes(gpu)
    procs = sample.processes_for(gpu)
    if used is None or any(p.memory_mib is None for p in procs):
        return None
    rest = used - sum(p.memory_mib or 0 for p in procs)
    return rest if rest > UNATTRIBUTED_MIN_MIB else None
