"""Typed records that flow from the parsers through the monitor to the UI and the CLI.

Every measured value is ``None`` when the machine did not report it. Nothing here turns
"not reported" into 0: a dashboard that shows 0 W when power is ``[N/A]`` lies.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import overload

from gpumon.backends.lazy import lazy_pattern


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


_PATH_PART = lazy_pattern(r"[\w.+@-]+")  # a part of a relative path (venv/bin/python)


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
    when unknown. A ``device-files`` record holds the ``/dev/nvidiaN`` numbers ``minors``
    and is on the GPUs ``gpus`` (their indexes, which the minors are on this host:
    ``GpuRegistry.holders``; no per-GPU memory is known then). ``started`` is the
    epoch time the process started; ``start_ticks`` the same as ``/proc/<pid>/stat`` has
    it (field 22, clock ticks after boot: the same number inside the container's PID
    namespace), which ``K`` checks before it signals (the PID may have been reused).

    Inside an unprivileged LXC container NVML's PID is the *host* PID and the name is
    usually ``None`` (nvidia-smi prints ``[Not Found]``).

    ``sm_pct`` and ``mem_bw_pct``: its share of the GPU's SMs and memory bandwidth since
    the previous process list (NVML's per-process samples, else ``nvidia-smi pmon``),
    None where neither reports; approximate: the samples do not add up to the GPU's
    utilisation. ``ppid`` and ``parent``: its parent's PID and command line (a launcher
    such as ``torchrun``), where the process is in the watched namespace.
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
    minors: tuple[int, ...] = ()
    sm_pct: int | None = None
    mem_bw_pct: int | None = None
    ppid: int | None = None
    parent: str | None = None

    @property
    def shown_pid(self) -> int | None:
        """The PID the watched machine knows it by, else the host's: the one the process
        table shows and a fix names ("K stop its scheduler (PID 1020)")."""
        return self.pid if self.pid is not None else self.host_pid

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
    minor: int | None = None  # N of its /dev/nvidiaN (the driver's, not a --query-gpu field)
    mig_mode: bool | None = None  # split into MIG instances (``mig.mode.current``)
    # NVML's energy counter (millijoules since the driver was loaded; None where only
    # nvidia-smi is read or the GPU answers NOT_SUPPORTED): ``total_energy_consumption``
    energy_mj: int | None = None

    @property
    def ref(self) -> GpuRef:
        """This GPU by every name it goes by on its host."""
        return _gpu_ref(self.index, self.uuid, self.bus_id, self.minor)

    @property
    def memory_used_fraction(self) -> float | None:
        """Used / total in 0..1, or None when either is unknown or total is 0."""
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return self.memory_used_mib / self.memory_total_mib


MIG_NOT_AVAILABLE = "MIG: per-instance data not available from this driver"
# No driver reports utilisation per MIG instance: NVML's nvmlDeviceGetUtilizationRates is
# NOT_SUPPORTED on MIG devices (and on the parent in MIG mode), nvidia-smi prints [N/A]
MIG_NO_UTILIZATION = "utilisation is not reported per MIG instance"


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A compute instance of a GPU instance: what CUDA sees as a device (``MIG-...``)."""

    index: int | None  # the MIG device index (nvidia-smi -L's "Device N")
    compute_instance_id: int | None
    uuid: str | None
    profile: str | None  # as nvidia-smi -L names it: "1c.3g.71gb" for one of its slices


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A GPU instance of a GPU in MIG mode: its own memory and SMs, its processes.

    ``gpu_uuid`` is its parent GPU's; ``profile`` the GPU instance's (``3g.40gb``). Its
    memory is shared by its compute instances (``devices``). ``pids`` are the driver's PIDs
    of the processes on it (the host's inside an unprivileged container, as the process
    list's). ``utilization_pct`` stays None: no driver reports it per instance."""

    gpu_uuid: str | None
    gpu_instance_id: int
    profile: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    sm_count: int | None = None
    devices: tuple[MigDevice, ...] = ()
    pids: tuple[int, ...] = ()
    utilization_pct: float | None = None

    @property
    def name(self) -> str:
        """``GI 2 3g.40gb``: how it is named on screen and in text."""
        return f"GI {self.gpu_instance_id}" + (f" {self.profile}" if self.profile else "")

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return self.memory_used_mib / self.memory_total_mib

    def holds(self, p: GpuProcess) -> bool:
        """Whether ``p`` runs on this instance (by the driver's PID, or the host's)."""
        return any(pid is not None and pid in self.pids for pid in (p.pid, p.host_pid))


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


# A PCI address in any of the spellings GPU tools use (docs/formats.md 1.7): nvidia-smi's
# and NVML's 00000000:19:00.0 (8 upper-case hex digits of domain), NVML's legacy
# 0000:19:00.0, the kernel's /proc/driver/nvidia/gpus/0000:19:00.0 and sysfs, the Xid
# line's PCI:0000:19:00 (no function), a bare 19:00.0.
_BUS_ID = lazy_pattern(
    r"(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?"
)


@functools.lru_cache(maxsize=1024)  # a host's few bus ids, read with every sample
def bus_id_key(text: str | None) -> str | None:
    """``0000:19:00.0`` (the kernel's form: lower case, a domain of at least four digits)
    for any spelling of a PCI address; a missing function is 0 (NVML prints GPUs as
    ``.0``). None when the text is not a PCI address."""
    if not text:
        return None
    m = _BUS_ID.fullmatch(text.strip())
    if m is None:
        return None
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:04x}:{m.group('bus')}:{m.group('dev')}.{m.group('fn') or '0'}".lower()


def pci_key(text: str | None) -> str | None:
    """``0000:ba:00`` for any spelling of a GPU's PCI address (``bus_id_key`` without the
    function: what an Xid line names). None when the text is not a PCI address."""
    key = bus_id_key(text)
    return None if key is None else key[:-2]


def parse_visible_devices(value: str | None) -> tuple[int | str, ...] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: indices or ``GPU-``/``MIG-`` UUIDs, up to the
    first invalid entry. None when unset or when no entry is usable."""
    if value is None:
        return None
    out: list[int | str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isascii() and entry.isdigit():
            out.append(int(entry))
        elif entry.startswith(("GPU-", "MIG-")) and len(entry) > 4:
            out.append(entry)
        else:
            break
    return tuple(out) or None


@dataclass(frozen=True, slots=True)
class GpuRef:
    """One GPU of one host by every name it goes by: ``index`` as nvidia-smi numbers it on
    that host (a container that sees GPUs 4-7 numbers them 0-3), ``uuid``
    (``GPU-6a1f...``), ``bus_id`` (``bus_id_key``: ``0000:19:00.0``) and ``minor``, the
    N of its ``/dev/nvidiaN`` (the host's driver numbers them: a container keeps the
    host's numbers). None where not known."""

    index: int | None
    uuid: str | None = None
    bus_id: str | None = None
    minor: int | None = None

    @property
    def pci(self) -> str | None:
        """The bus id as an Xid line names it (``pci_key``: ``0000:19:00``)."""
        return None if self.bus_id is None else self.bus_id[:-2]

    def __str__(self) -> str:
        """``GPU 6`` (the index), else ``GPU 0000:19:00.0``: as messages name a GPU."""
        if self.index is not None:
            return f"GPU {self.index}"
        return f"GPU {self.bus_id or self.uuid or '?'}"


class GpuRegistry:
    """The GPUs of one host as one sample lists them (``HostSample.gpu_refs``), found by
    any of their names: ``index``, ``uuid`` (or the unique prefix CUDA accepts),
    ``bus`` (any spelling), ``minor`` and ``cuda`` (a process's device ordinal through
    its CUDA_VISIBLE_DEVICES). Each answers the ``GpuRef`` or None: a name that is none
    of this host's GPUs."""

    __slots__ = ("_bus", "_index", "_minor", "_uuid", "refs")

    def __init__(self, refs: Iterable[GpuRef] = ()) -> None:
        self.refs = tuple(refs)
        self._index = {r.index: r for r in self.refs if r.index is not None}
        self._uuid = {r.uuid: r for r in self.refs if r.uuid}
        self._bus = {r.bus_id: r for r in self.refs if r.bus_id is not None}
        self._minor = {r.minor: r for r in self.refs if r.minor is not None}

    @staticmethod
    def of(gpus: Iterable[GpuSample]) -> GpuRegistry:
        """The registry of ``gpus`` (one object per set of GPUs: every sample of a host
        has the same GPUs, and the monitor asks for them with each)."""
        return _registry(tuple(g.ref for g in gpus))

    def __iter__(self) -> Iterator[GpuRef]:
        return iter(self.refs)

    @property
    def knows_minors(self) -> bool:
        """Whether the driver's device numbers came (the agent reads them: NVML, or
        ``/proc/driver/nvidia/gpus``); without them none is known."""
        return bool(self._minor)

    def index(self, index: int | None) -> GpuRef | None:
        return None if index is None else self._index.get(index)

    def uuid(self, uuid: str | None) -> GpuRef | None:
        """The GPU of ``uuid``, or of the one UUID it begins (CUDA_VISIBLE_DEVICES may
        name ``GPU-6a1f``); None for a prefix of several (CUDA refuses it too)."""
        if not uuid:
            return None
        ref = self._uuid.get(uuid)
        if ref is not None:
            return ref
        found = [r for u, r in self._uuid.items() if u.startswith(uuid)]
        return found[0] if len(found) == 1 else None

    def bus(self, text: str | None) -> GpuRef | None:
        """The GPU at the PCI address ``text``, in any spelling (``bus_id_key``)."""
        return self._bus.get(bus_id_key(text) or "")

    def minor(self, minor: int | None) -> GpuRef | None:
        """The GPU whose device file is ``/dev/nvidia<minor>``."""
        return None if minor is None else self._minor.get(minor)

    def cuda(self, ordinal: int, visible: str | None) -> GpuRef | None:
        """The GPU a process calls device ``ordinal`` (``cuda:1``, PyTorch's "GPU 1"),
        through its CUDA_VISIBLE_DEVICES ``visible``: indices as nvidia-smi numbers the
        GPUs, or UUIDs. None where ``visible`` is unknown or holds no such ordinal."""
        devices = parse_visible_devices(visible)
        if devices is None or not 0 <= ordinal < len(devices):
            return None
        entry = devices[ordinal]
        return self.index(entry) if isinstance(entry, int) else self.uuid(entry)

    def holders(self, minors: Iterable[int]) -> tuple[GpuRef, ...]:
        """The GPUs whose ``/dev/nvidiaN`` a process holds. Without the driver's numbers
        (``knows_minors``) N is taken as the index: right where the host's every GPU is
        seen (a container that sees a subset renumbers them; the agent reads the numbers
        for that)."""
        find = self.minor if self.knows_minors else self.index
        return tuple(ref for m in minors if (ref := find(m)) is not None)

    def of_process(self, p: GpuProcess) -> tuple[GpuRef, ...]:
        """The GPUs ``p`` is on: its driver row's UUID, else its bus id; a device-file
        user's ``gpus``."""
        ref = self.uuid(p.gpu_uuid) if p.gpu_uuid else self.bus(p.gpu_bus_id)
        on = tuple(r for i in p.gpus if (r := self.index(i)) is not None)
        return on if ref is None or ref in on else (ref, *on)


@functools.lru_cache(maxsize=1024)
def _gpu_ref(index: int, uuid: str | None, bus_id: str | None, minor: int | None) -> GpuRef:
    return GpuRef(index, uuid, bus_id_key(bus_id), minor)


@functools.lru_cache(maxsize=64)
def _registry(refs: tuple[GpuRef, ...]) -> GpuRegistry:
    return GpuRegistry(refs)


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
    # the GPU instances of the GPUs in MIG mode (read with the process list)
    mig: tuple[MigInstance, ...] = ()
    # made when first asked for (``gpu_refs``, ``processes_for``), never passed in
    _refs: GpuRegistry | None = field(default=None, init=False, repr=False, compare=False)
    _held: dict[int, tuple[GpuProcess, ...]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def gpu_refs(self) -> GpuRegistry:
        """This sample's GPUs by every name (built once, when first asked for)."""
        refs = self._refs
        if refs is None:
            refs = GpuRegistry.of(self.gpus)
            object.__setattr__(self, "_refs", refs)
        return refs

    def memory_used_at_processes(self, gpu: GpuSample) -> int | None:
        """``gpu``'s used memory when the process list was taken (the sample's own when
        the list came before any sample)."""
        for index, used in self.memory_at_processes:
            if index == gpu.index:
                return used
        return gpu.memory_used_mib

    def processes_for(self, gpu: GpuSample) -> tuple[GpuProcess, ...]:
        """The processes on ``gpu`` (``GpuRegistry.of_process``: by UUID, else by PCI bus
        id in any spelling; device-file users by the GPUs their device files are)."""
        if not self.processes:
            return ()
        held = self._held
        if held is None:
            held = {}
            refs = self.gpu_refs
            for p in self.processes:
                for ref in refs.of_process(p):
                    if ref.index is not None:
                        held[ref.index] = (*held.get(ref.index, ()), p)
            object.__setattr__(self, "_held", held)
        return held.get(gpu.index, ())

    def mig_instances(self, gpu: GpuSample) -> tuple[MigInstance, ...] | None:
        """``gpu``'s GPU instances; None when it is not in MIG mode; empty when it is but
        none could be read (``MIG_NOT_AVAILABLE``: its whole-GPU numbers are no slice's)."""
        if not gpu.mig_mode:
            return None
        return tuple(i for i in self.mig if gpu.uuid is not None and i.gpu_uuid == gpu.uuid)

    def memory_fills(self) -> list[tuple[float, str]]:
        """(used fraction, whose) of each GPU (``GPU 2``), a GPU in MIG mode by its GPU
        instances (``GPU 7 MIG GI 5 1g.24gb``): its whole is no slice's fill."""
        out = []
        for gpu in self.gpus:
            instances = self.mig_instances(gpu)
            if instances is None:
                parts = [(gpu.memory_used_fraction, f"GPU {gpu.index}")]
            else:
                parts = [
                    (i.memory_used_fraction, f"GPU {gpu.index} MIG {i.name}") for i in instances
                ]
            out += [(f, name) for f, name in parts if f is not None]
        return out

    def instance_processes(self, instance: MigInstance) -> tuple[GpuProcess, ...]:
        """The processes of ``instance``'s parent GPU that run on it."""
        gpu = self.gpu_refs.uuid(instance.gpu_uuid)
        if gpu is None or gpu.index is None:
            return ()
        held = [p for p in self.processes if instance.holds(p)]
        return tuple(p for p in held if gpu in self.gpu_refs.of_process(p))

    def mig_device(self, uuid: str) -> tuple[MigInstance, MigDevice] | None:
        """The GPU instance and compute instance of a ``MIG-...`` UUID (as in
        ``CUDA_VISIBLE_DEVICES``)."""
        found = [
            (inst, device)
            for inst in self.mig
            for device in inst.devices
            if device.uuid is not None and device.uuid.startswith(uuid)  # CUDA takes a prefix
        ]
        return found[0] if len(found) == 1 else None


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
