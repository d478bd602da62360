"""Kernel-log and cgroup lines about GPUs and memory: Xid events, the OOM killer, memory.events.

Pure functions, standard library only. Formats: docs/formats.md sections 4 (Xid) and 5.6
(OOM killer). What each Xid means and what to do about it: ``xid.py`` (the one table).
Every parser returns None for a line that is not its kind; none raises on arbitrary text.

PCI ids come in two spellings: the kernel prints ``PCI:0000:ba:00`` (4-digit domain, bus,
device, usually lower-case, no function) and nvidia-smi prints ``00000000:BA:00.0`` (8-digit
domain, upper-case, function). ``pci_key`` (``model``, where every spelling is read) turns
both into ``0000:ba:00``; ``GpuRegistry.bus`` finds the GPU of a sample at that address.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import Health
from gpumon.backends.parsers.xid import xid_info, xid_level, xid_summary

# Line prefixes before "NVRM:" (raw dmesg, dmesg -T, journalctl -k, /dev/kmsg) need no
# stripping: the patterns search, they do not match at the start.
_XID = lazy_pattern(
    r"NVRM: Xid \(PCI:(?P<dom>[0-9a-fA-F]{4}):(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?: GPU-I:(?P<gi>\d{1,3}))?(?: GPU-CI:(?P<ci>\d{1,3}))?\): (?P<xid>\d{1,5}), "
    r"(?:pid=(?P<pid>'?<unknown>'?|\d{1,10}), (?:name=(?P<name>[^,]{0,64}), )?)?(?P<msg>.*)"
)
_GPU_AT = lazy_pattern(
    r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): "
    r"(?P<uuid>GPU-[0-9a-fA-F-]{8,40})"
)


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One ``NVRM: Xid`` line. ``pci`` is the normalised key (``0000:ba:00``)."""

    pci: str
    xid: int
    pid: int | None  # None for ``<unknown>`` or when the line has no pid
    name: str | None  # kernel comm, at most 15 characters
    message: str  # the text after the pid/name fields
    gpu_instance: int | None = None  # MIG
    compute_instance: int | None = None

    @property
    def level(self) -> Health:
        """gpumon's level for this event (INFO: informational, not worth an alert)."""
        return xid_level(self.xid, self.message)

    def describe(self, gpu: int | None, whose: str | None = None, *, alone: bool = True) -> str:
        """One line: ``Xid 79 on GPU 6: fallen off the bus — reboot the node (PCI 0000:9a:00,
        pid 9962 python)``, then the driver's own words when they add to the table's
        (``[Ch 00000007, intr 00000000. MMU Fault: …]``). GPU unknown: ``on PCI 0000:9a:00``.
        ``whose``: what the GPU is to the host, after it (``on GPU 3 (running sglang)``,
        ``on PCI 0000:78:00 (not a GPU of this host: CT 201's)``). ``alone``: no other Xid
        on the GPU near it (Xid 45's two readings, ``xid.py``)."""
        where, refs = (
            (f"GPU {gpu}", [f"PCI {self.pci}"]) if gpu is not None else (f"PCI {self.pci}", [])
        )
        if whose:
            where += f" ({whose})"
        if self.pid is not None:
            refs.append(f"pid {self.pid} {self.name}" if self.name else f"pid {self.pid}")
        text = f"Xid {self.xid} on {where}: {xid_summary(self.xid, self.message, alone=alone)}"
        text += f" ({', '.join(refs)})" if refs else ""
        detail = self.message.rstrip(". ")
        meaning = xid_info(self.xid, alone=alone).meaning
        if detail and self.xid != 154 and meaning.lower() not in detail.lower():
            text += f" [{detail[:160]}]"
        return text


@dataclass(frozen=True, slots=True)
class HostOomKill:
    """The kernel OOM killer's ``Killed process`` line (global or memory cgroup)."""

    pid: int
    comm: str
    cgroup: bool  # True: "Memory cgroup out of memory" (a container / cgroup limit)
    anon_rss_kib: int | None
    uid: int | None

    def describe(self, memcg: str | None = None) -> str:
        """One line, with the cgroup from the ``oom-kill:`` line before it when known."""
        scope = "memory cgroup limit" if self.cgroup else "host out of memory"
        rss = f", {self.anon_rss_kib / 1048576:.1f} GiB anon" if self.anon_rss_kib else ""
        where = f" in {memcg}" if memcg else ""
        return f"OOM killer ({scope}) killed {self.comm} (pid {self.pid}{rss}){where}"


def parse_xid_line(line: str) -> XidEvent | None:
    """The Xid event in a kernel log line (any prefix: dmesg, -T, journalctl, kmsg)."""
    if "Xid" not in line:
        return None
    m = _XID.search(line)
    if m is None:
        return None
    pid_text = m.group("pid")
    name = m.group("name")
    return XidEvent(
        pci=f"{m.group('dom')}:{m.group('bus')}:{m.group('dev')}".lower(),
        xid=int(m.group("xid")),
        pid=int(pid_text) if pid_text and pid_text.isdigit() else None,
        name=None if name is None or name == "<unknown>" else name,
        message=m.group("msg").strip(),
        gpu_instance=int(m.group("gi")) if m.group("gi") else None,
        compute_instance=int(m.group("ci")) if m.group("ci") else None,
    )


def parse_gpu_at_line(line: str) -> tuple[str, str] | None:
    """``(pci key, uuid)`` from ``NVRM: GPU at PCI:0000:18:00: GPU-6a1f...`` lines."""
    m = _GPU_AT.search(line) if "GPU at PCI" in line else None
    return (m.group("pci").lower(), m.group("uuid")) if m else None


_KILLED = lazy_pattern(
    r"(?:(?P<scope>Memory cgroup out of memory|Out of memory): Kill(?:ed)? process"
    r"|Killed process(?= \d{1,10} \([^)]{0,64}\) total-vm:))"
    r" (?P<pid>\d{1,10}) \((?P<comm>[^)]{0,64})\)"
)
_ANON_RSS = lazy_pattern(r"anon-rss:(\d{1,15})kB")
_UID = lazy_pattern(r"UID:(\d{1,10})")


def parse_host_oom_kill(line: str) -> HostOomKill | None:
    """The victim of the kernel OOM killer, from its ``Killed process`` line.

    Accepts ``Out of memory: Killed process N (comm) total-vm:...``, the memory-cgroup form
    ``Memory cgroup out of memory: Killed process ...``, the prefix-less old form
    ``Killed process N (comm) total-vm:...`` and ``Out of memory: Kill process N (comm)
    score S or sacrifice child``. Lines that merely say "killed" are not matched.
    """
    if "process" not in line or "Kill" not in line:
        return None
    m = _KILLED.search(line)
    if m is None:
        return None
    rest = line[m.end() :]
    anon, uid = _ANON_RSS.search(rest), _UID.search(rest)
    return HostOomKill(
        pid=int(m.group("pid")),
        comm=m.group("comm"),
        cgroup=m.group("scope") == "Memory cgroup out of memory",
        anon_rss_kib=int(anon.group(1)) if anon else None,
        uid=int(uid.group(1)) if uid else None,
    )


def parse_oom_memcg(line: str) -> str | None:
    """``task_memcg`` of an ``oom-kill:constraint=...`` line (``/lxc/105/ns/...``), else None."""
    if "oom-kill:" not in line:
        return None
    for part in line.split("oom-kill:", 1)[1].split(","):
        key, _, value = part.strip().partition("=")
        if key == "task_memcg" and value:
            return value
    return None


def parse_memory_events(text: str) -> dict[str, int]:
    """cgroup v2 ``memory.events`` (``low 0``, ``oom 3``, ``oom_kill 2``...) as a dict.

    Malformed lines are ignored, so a partial read still gives the counters it holds.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isascii() and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def kernel_log_unreadable(line: str) -> bool:
    """True for the error a container prints when it may not read the kernel log."""
    low = line.lower()
    return ("dmesg" in low or "journal" in low or "kmsg" in low) and (
        "operation not permitted" in low
        or "permission denied" in low
        or "read kernel buffer failed" in low
        or "no journal files were found" in low
    )
