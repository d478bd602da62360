"""Typed records that flow from the parsers through the monitor to the UI and the CLI.

Every measured value is ``None`` when the machine did not report it. Nothing here turns
"not reported" into 0: a dashboard that shows 0 W when power is ``[N/A]`` lies.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import overload


class CheckCode(enum.IntEnum):
    """A Nagios plugin's exit status: ``gpumon check`` and ``gpumon fleet --check``."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


class Health(enum.StrEnum):
    """The one severity, worst last: a GPU's or a host's health, an alert's, an incident's
    and a notification's severity, a fleet node's trouble, an Xid's level.

    ``INFO`` is a note (an alert kind declared ``note``, an informational Xid): shown, but
    not alarming: it never makes ``check`` fail, rings nothing, shows in no strip or
    toast, and reaches a notifier only where its ``kinds`` names the kind. A GPU's health
    is never INFO.

    The value is the word every public output spells it with (the JSON ``severity``, the
    exporter's ``severity`` label, the webhook's, Alertmanager's and PagerDuty's
    severity); what each other output says for it is mapped here, in ``_SAID``: the
    ``check`` exit status, ntfy's priority and tag, the dashboard's colour role."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SAID[self].rank

    @property
    def alarming(self) -> bool:
        """Worth a person's attention now: a warning or worse (``check`` fails, the strip
        shows it, notifiers get it by default)."""
        return self.rank >= _SAID[Health.WARNING].rank

    @property
    def check_code(self) -> CheckCode:
        """``check``'s exit status for a host (or a fleet) this bad."""
        return _SAID[self].check

    @property
    def pagerduty(self) -> str:
        """PagerDuty's ``payload.severity`` (one of critical, error, warning, info)."""
        return "info" if self is Health.OK else self.value

    @property
    def ntfy(self) -> tuple[str, str]:
        """ntfy's ``Priority`` (1-5) and emoji tag."""
        return _SAID[self].ntfy

    @property
    def role(self) -> str:
        """The name of the dashboard's colour role (``tui.views.gpu_cells.Role``)."""
        return _SAID[self].role

    @staticmethod
    def worst(*values: Health) -> Health:
        return max(values, key=lambda h: h.rank, default=Health.OK)

    # Ordered by rank, not as words ("critical" < "ok" < "warning"): sorted(), max().
    def __lt__(self, other: object) -> bool:
        return self.rank < other.rank if isinstance(other, Health) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self.rank <= other.rank if isinstance(other, Health) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.rank > other.rank if isinstance(other, Health) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self.rank >= other.rank if isinstance(other, Health) else NotImplemented


@dataclass(frozen=True, slots=True)
class _Said:
    """What the outputs that do not spell a severity by its value say for it."""

    rank: int
    check: CheckCode
    ntfy: tuple[str, str]  # priority, tag
    role: str


_SAID = {
    Health.OK: _Said(0, CheckCode.OK, ("3", "white_check_mark"), "ok"),
    Health.INFO: _Said(1, CheckCode.OK, ("3", "information_source"), "muted"),
    Health.WARNING: _Said(2, CheckCode.WARNING, ("4", "warning"), "warning"),
    Health.CRITICAL: _Said(3, CheckCode.CRITICAL, ("5", "rotating_light"), "critical"),
}


_PATH_PART = re.compile(r"[\w.+@-]+")  # a part of a relative path (venv/bin/python)


class Source(enum.StrEnum):
    """Where GPU samples come from; shown in the UI and in the JSON ``source`` key."""

    AGENT_NVML = "agent/nvml"  # the agent on the target, reading NVML through pynvml
    AGENT_SMI = "agent/nvidia-smi"  # the agent on the target, running nvidia-smi -lms
    SMI_DIRECT = "nvidia-smi"  # no usable Python on the target: nvidia-smi streamed directly


class ProcessSource(enum.StrEnum):
    """Where a process record comes from; the JSON ``source`` of a process."""

    HOST = "host"  # the Proxmox host's own view: host PID mapped to its container
    CONTAINER_NVML = "container-nvml"  # NVML / nvidia-smi run inside the watched machine
    DEVICE_FILES = "device-files"  # /proc/*/fd holding /dev/nvidiaN, inside the container


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One compute process on a GPU.

    ``pid`` is the PID as seen inside the watched container (or on the watched machine),
    None when the process is not in it (another container's, the host's) or when the
    PID the driver gave does not resolve here. ``host_pid`` is the Proxmox host's PID
    where known. ``container`` names the process's container (``"200"``,
    ``"docker:3f2a..."``, ``"lxc:name"``, ``"k8s:..."``), None for the host itself or
    when unknown. ``gpus`` lists GPU indexes for a ``device-files`` record (the process
    holds those ``/dev/nvidiaN``; no per-GPU memory is known then). ``started`` is the
    epoch time the process started; ``start_ticks`` the same as ``/proc/<pid>/stat`` has
    it (field 22, clock ticks after boot: the same number inside the container's PID
    namespace), which ``K`` checks before it signals (the PID may have been reused).

    Inside an unprivileged LXC container NVML's PID is the *host* PID and the name is
    usually ``None`` (nvidia-smi prints ``[Not Found]``).
    """

    pid: int | None
    name: str | None
    memory_mib: int | None
    gpu_uuid: str | None = None
    gpu_bus_id: str | None = None
    host_pid: int | None = None
    container: str | None = None
    user: str | None = None
    host_user: str | None = None
    command: str | None = None
    cpu_pct: float | None = None
    rss_mib: float | None = None
    started: float | None = None
    start_ticks: int | None = None
    source: str = ProcessSource.CONTAINER_NVML.value
    gpus: tuple[int, ...] = ()

    @property
    def short_name(self) -> str | None:
        """The program's base name (``python3``, ``jupyter``), from the command line
        (``program_name`` of its first word; for a Python, of its script)."""
        text = self.command or self.name
        if not text:
            return None
        words = text.split()
        head = program_name(words[0]) if words else ""
        if head.startswith("python") and len(words) > 1:
            for word in words[1:]:  # python -m jupyter / python train.py: the script
                if not word.startswith("-"):
                    return program_name(word)
        return head or None


def program_name(word: str) -> str:
    """``/usr/bin/python3`` -> ``python3``: the last part of a word that is a path; any
    other word whole. A process names itself (argv[0], its comm): ``a[/]b`` or a kernel
    thread's ``[kworker/0:1]`` are names, not paths whose last part is the program."""
    parts = word.split("/")
    if len(parts) == 1 or not parts[-1]:
        return word
    if word.startswith(("/", "./", "../", "~/")) or all(map(_PATH_PART.fullmatch, parts)):
        return parts[-1]
    return word


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. Fields mirror ``nvidia-smi --query-gpu`` (see QUERY_FIELDS)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    timestamp: str | None = None  # nvidia-smi's own timestamp text, local time of the target
    pstate: str | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_total_mib: int | None = None
    memory_reserved_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    power_w: float | None = None
    power_instant_w: float | None = None
    power_limit_w: float | None = None
    enforced_power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    fan_pct: float | None = None
    clocks_event_reasons: int | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None
    compute_mode: str | None = None
    persistence_mode: str | None = None
    # Health facts (``HEALTH_FIELDS``; None where the driver does not report them): the PCIe
    # link now and at most, rows waiting to be remapped at the next reset (or a remap that
    # failed), pages waiting to be retired, and NVML's recommended recovery action.
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    rows_pending: bool | None = None
    rows_failure: bool | None = None
    pages_pending: bool | None = None
    recovery_action: str | None = None
    health: Health = Health.OK
    problems: tuple[str, ...] = ()

    @property
    def memory_used_fraction(self) -> float | None:
        """Used / total in 0..1, or None when either is unknown or total is 0."""
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return self.memory_used_mib / self.memory_total_mib


@dataclass(frozen=True, slots=True)
class UnreadableGpu:
    """A GPU the host lists whose values cannot be read: nvidia-smi printed ``Unable to
    determine the device handle for GPU<bus>: <reason>``, or a row that cannot be parsed,
    in place of its row, or NVML could not open it. ``bus_id`` as the tool printed it and
    ``index`` where known (nvidia-smi's line names only the bus); ``reason`` in the
    driver's words (``Unknown Error``); ``said``: the line as printed (cut), or None."""

    bus_id: str | None
    index: int | None
    reason: str
    said: str | None = None
    device: bool = True  # the device failed (critical); False: only its row did not parse

    def to_json(self) -> dict[str, object]:
        """The snapshot's ``unreadable_gpus`` entry (docs/json.md), also what a recording keeps."""
        return {
            "bus_id": self.bus_id,
            "index": self.index,
            "reason": self.reason,
            "said": self.said,
            "device": self.device,
        }


@dataclass(frozen=True, slots=True)
class HostSample:
    """Everything known about one host at one moment (one GPU sample round).

    ``time`` is the local (gpumon side) epoch time at which the sample arrived.
    ``processes`` is the most recent process list, which may be a little older than the
    GPU values (processes are polled less often).
    """

    host: str
    time: float
    source: Source | None
    gpus: tuple[GpuSample, ...]
    processes: tuple[GpuProcess, ...] = ()
    skipped_lines: int = 0  # malformed rows dropped by the parser in this round
    # (GPU index, used MiB) when ``processes`` arrived: memory not attributed to a
    # process is judged against the memory of that moment, not of a later sample.
    memory_at_processes: tuple[tuple[int, int], ...] = ()
    # GPUs listed but not read this round (never dropped: each is a critical alert)
    unreadable: tuple[UnreadableGpu, ...] = ()

    def memory_used_at_processes(self, gpu: GpuSample) -> int | None:
        """``gpu``'s used memory when the process list was taken (the sample's own when
        the list came before any sample)."""
        for index, used in self.memory_at_processes:
            if index == gpu.index:
                return used
        return gpu.memory_used_mib

    def processes_for(self, gpu: GpuSample) -> tuple[GpuProcess, ...]:
        """The processes on ``gpu``, matched by UUID, else by PCI bus id (device-file
        records by GPU index)."""
        out = []
        for p in self.processes:
            by_index = bool(p.gpus) and gpu.index in p.gpus  # device files: an index
            by_uuid = gpu.uuid is not None and p.gpu_uuid == gpu.uuid
            by_bus = p.gpu_uuid is None and gpu.bus_id is not None and p.gpu_bus_id == gpu.bus_id
            if by_index or by_uuid or by_bus:
                out.append(p)
        return tuple(out)


class ConnState(enum.StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    FAILED = "failed"  # gave up (only headless one-shot commands give up)
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class HostStatus:
    """Connection and data-source state of one host.

    ``error`` is a host-level problem in words (unreachable, auth refused, nvidia-smi
    failing: quoting the tool). It can be set while connected (nvidia-smi broken) too.
    """

    state: ConnState
    since: float
    error: str | None = None
    attempt: int = 0
    next_retry_at: float | None = None
    source: Source | None = None
    transport: str = ""  # "ssh root@pve:22 -> pct 200", "local", "simulator"


@dataclass(frozen=True, slots=True)
class HostLoad:
    """The target's own load (the agent's ``HostStats``): CPU busy %, memory and swap in
    kiB, the 1/5/15 min load average; None where the target did not say."""

    time: float
    cpu_pct: float | None = None
    cpus: int | None = None
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    swap_total_kib: int | None = None
    swap_free_kib: int | None = None
    load: tuple[float, float, float] | None = None


class _Ring:
    """A fixed-size ring of doubles: ``maxlen`` slots allocated and written in full when it
    is made (every page touched then, so the process takes its memory at the start, not as
    an hour of samples fills it), oldest first to its readers, the oldest overwritten once
    full (as ``deque(maxlen=...)`` drops it). NaN marks a slot whose value was not
    reported; ``_nans`` counts those in the window, so a window without any is read at C
    speed."""

    __slots__ = ("_buf", "_head", "_len", "_nans", "_view")

    def __init__(self, maxlen: int) -> None:
        self._buf = array("d", _NAN_SLOT) * max(maxlen, 0)
        self._view = memoryview(self._buf)  # slices of it copy nothing
        self._head = 0  # the slot the next value goes to
        self._len = 0
        self._nans = 0

    @property
    def maxlen(self) -> int:
        return len(self._buf)

    def __len__(self) -> int:
        return self._len

    def _put(self, value: float) -> None:
        buf, head = self._buf, self._head
        size = len(buf)
        if not size:
            return
        if self._len == size:
            old = buf[head]
            if old != old:
                self._nans -= 1
        else:
            self._len += 1
        if value != value:
            self._nans += 1
        buf[head] = value
        head += 1
        self._head = 0 if head == size else head

    def _slot(self, i: int) -> int:
        n = self._len
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        if n < len(self._buf):  # not yet full: slots 0 .. n-1, oldest first
            return i
        i += self._head
        return i - n if i >= n else i

    # Not yet full: the slots before ``_head``, in order. Full: from ``_head`` round to it.
    def _forward(self) -> Iterator[float]:
        view, head = self._view, self._head
        if head == self._len:
            return iter(view[:head])
        if not head:
            return iter(view)
        return chain(view[head:], view[:head])

    def _backward(self) -> Iterator[float]:
        view, head = self._view, self._head
        if head == self._len:
            return reversed(view[:head])
        if not head:
            return reversed(view)
        return chain(reversed(view[:head]), reversed(view[head:]))


class TimeRing(_Ring, Sequence[float]):
    """A history's sample times (epoch seconds), oldest first."""

    __slots__ = ()

    def __init__(self, maxlen: int, values: Iterable[float] = ()) -> None:
        super().__init__(maxlen)
        for v in values:
            self._put(v)

    def append(self, value: float) -> None:
        self._put(value)

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        if index == -1 and self._len:  # the newest: the slot before the next one
            return self._buf[self._head - 1]
        if isinstance(index, slice):
            return list(self._forward())[index]
        return self._buf[self._slot(index)]

    __iter__ = _Ring._forward
    __reversed__ = _Ring._backward


class SeriesRing(_Ring, Sequence[float | None]):
    """One measured series of a history, oldest first; ``None`` where the GPU did not
    report the value (stored as NaN: a reported NaN reads as ``None`` too, never as NaN,
    and nothing not reported ever reads as 0)."""

    __slots__ = ()

    def __init__(self, maxlen: int, values: Iterable[float | None] = ()) -> None:
        super().__init__(maxlen)
        for v in values:
            self.append(v)

    def append(self, value: float | None) -> None:
        self._put(_NAN if value is None else value)

    @overload
    def __getitem__(self, index: int) -> float | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[float | None]: ...
    def __getitem__(self, index: int | slice) -> float | list[float | None] | None:
        if isinstance(index, slice):
            return list(self)[index]
        v = self._buf[self._head - 1 if index == -1 and self._len else self._slot(index)]
        return None if v != v else v

    def __iter__(self) -> Iterator[float | None]:
        if not self._nans:
            return self._forward()
        return (None if v != v else v for v in self._forward())

    def __reversed__(self) -> Iterator[float | None]:
        if not self._nans:
            return self._backward()
        return (None if v != v else v for v in self._backward())


_NAN = float("nan")
_NAN_SLOT = array("d", [_NAN])


class GpuHistory:
    """Bounded history of one GPU's headline values; owned by the monitor.

    All series share one length; entry ``i`` of each belongs to ``times[i]`` (local epoch
    seconds). A value the GPU did not report is ``None`` in its series. Each series is a
    ring of ``maxlen`` doubles allocated in full when the GPU is first seen (an hour at
    1 Hz: 8 x 3600 x 5 x 8 bytes = 1.1 MiB for 8 GPUs, from the start), so the dashboard's
    memory does not grow as the histories fill.
    """

    __slots__ = (
        "maxlen",
        "memory_used_mib",
        "power_w",
        "temperature_c",
        "times",
        "utilization_pct",
    )

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self.times = TimeRing(maxlen)
        self.memory_used_mib = SeriesRing(maxlen)
        self.utilization_pct = SeriesRing(maxlen)
        self.temperature_c = SeriesRing(maxlen)
        self.power_w = SeriesRing(maxlen)

    def append(self, t: float, gpu: GpuSample) -> None:
        self.append_values(
            t, gpu.memory_used_mib, gpu.utilization_pct, gpu.temperature_c, gpu.power_w
        )

    def append_values(
        self,
        t: float,
        memory_used_mib: float | None,
        utilization_pct: float | None,
        temperature_c: float | None,
        power_w: float | None,
    ) -> None:
        """One entry of every series at time ``t`` (``None``: not reported)."""
        self.times.append(t)
        self.memory_used_mib.append(memory_used_mib)
        self.utilization_pct.append(utilization_pct)
        self.temperature_c.append(temperature_c)
        self.power_w.append(power_w)

    def resize(self, maxlen: int) -> None:
        """Keep the newest ``maxlen`` entries from now on (after an interval change): new
        rings (readers holding the old ones see a different object, as with a deque)."""
        if maxlen == self.maxlen:
            return
        self.maxlen = maxlen
        self.times = TimeRing(maxlen, self.times)
        for name in ("memory_used_mib", "utilization_pct", "temperature_c", "power_w"):
            setattr(self, name, SeriesRing(maxlen, getattr(self, name)))

    def __len__(self) -> int:
        return len(self.times)


def iso_time(epoch: float) -> str:
    """Local time with its UTC offset, to the second: the JSON ``time`` format."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).astimezone().isoformat(timespec="seconds")
