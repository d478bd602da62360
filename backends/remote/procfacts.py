"""A process's facts from ``/proc``: standard library only, Python 3.8 (runs on targets).

The part of ``host_procs`` the agent needs too, so the agent ships this small module
instead of the host-side collector: reading ``/proc/<pid>/`` (``read_facts``), the
namespace-local record of a process (``local_record``: its PID, user, command line, CPU %,
RSS and start time as this PID namespace sees them), inside a container the processes that
hold ``/dev/nvidiaN`` open (``device_file_users``, ``in_container``), and which GPU each N
is (``driver_minors``: the driver's ``/proc/driver/nvidia/gpus``).
``host_procs`` builds its host-side records (container, NSpid, uid_map) on the same
functions. The record's keys are described there.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time

TYPE_CHECKING = False  # typing is not imported on the target (its import costs memory)
if TYPE_CHECKING:
    from typing import Any, Callable

    # record(pid, facts, now=, btime=, cpu=, hz=, page=) -> a record (``local_record``)
    RecordMaker = Callable[..., dict[str, Any]]

CLK_TCK_DEFAULT = 100  # what the shell loop assumes (it cannot ask sysconf); Linux's USER_HZ
PAGE_DEFAULT = 4096
MIB = 1024 * 1024
DEVICE_PREFIX = "/dev/nvidia"  # /dev/nvidia<N>: the GPU device files (not nvidiactl, -uvm)
NVIDIA_MAJOR = 195  # the character-device major NVIDIA's driver registers (NV_MAJOR_DEVICE_NUMBER)
DRIVER_GPUS = "/proc/driver/nvidia/gpus"  # one folder per GPU the driver has, by bus id
DRIVER_GPUS_MAX = 256  # folders read: no host has more GPUs; a hostile /proc stays bounded


def status_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def real_uid(status: dict[str, str]) -> int | None:
    words = status.get("Uid", "").split()
    return int(words[0]) if words and words[0].isdigit() else None


def parse_stat(text: str) -> tuple[int, int, int] | None:
    """``(utime + stime ticks, starttime ticks, rss pages)`` from ``/proc/<pid>/stat``,
    or None. The command name is in parentheses and may hold spaces and ``)``."""
    _, sep, rest = text.rpartition(")")
    words = rest.split()
    if not sep or len(words) < 22:
        return None
    try:  # fields 14, 15, 22, 24 (1-based) are words 11, 12, 19, 21 after the name
        return int(words[11]) + int(words[12]), int(words[19]), int(words[21])
    except ValueError:
        return None


def parent_pid(text: str) -> int | None:
    """Field 4 of ``/proc/<pid>/stat`` (the parent's PID), or None."""
    words = text.rpartition(")")[2].split()
    return int(words[1]) if len(words) > 1 and words[1].isdigit() else None


def boot_time(stat_text: str) -> float | None:
    for line in stat_text.splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def passwd_names(text: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            out.setdefault(int(parts[2]), parts[0])
    return out


def user_name(uid: int | None, names: dict[int, str]) -> str | None:
    """The name of ``uid`` in ``names`` (a passwd), else root or the number."""
    if uid is None:
        return None
    return names.get(uid) or ("root" if uid == 0 else str(uid))


def command_line(cmdline: bytes, status: dict[str, str]) -> str | None:
    """The command line with its words joined by spaces; the short name for a process
    without one (a kernel thread, a zombie)."""
    words = [w.decode("utf-8", "replace") for w in cmdline.split(b"\0") if w]
    if words:
        return " ".join(words)
    name = status.get("Name")
    return "[" + name + "]" if name else None


class CpuClock:
    """What one poll keeps for the next: CPU % between two polls of the same process
    (None on its first poll), and the facts of a process that a poll need not read again
    (``KEPT_FACTS``, by PID and start time, for ``KEEP_FACTS_S``)."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, int]] = {}
        self.kept: dict[tuple[int, int], tuple[float, dict[str, Any]]] = {}

    def percent(self, pid: int, start: int, ticks: int, now: float, hz: int) -> float | None:
        key = (pid, start)  # a PID reused by a new process starts over
        last = self._last.get(key)
        self._last[key] = (now, ticks)
        if last is None or now <= last[0]:
            return None
        return round(100.0 * (ticks - last[1]) / hz / (now - last[0]), 1)

    def forget_others(self, alive: list[tuple[int, int]]) -> None:
        keep = set(alive)
        for key in list(self._last):
            if key not in keep:
                del self._last[key]
        for key in list(self.kept):
            if key not in keep:
                del self.kept[key]


def local_record(
    pid: int,
    facts: dict[str, Any],
    *,
    now: float,
    btime: float | None,
    cpu: CpuClock,
    hz: int = CLK_TCK_DEFAULT,
    page: int = PAGE_DEFAULT,
) -> dict[str, Any]:
    """The record of ``pid`` as this PID namespace sees it (``host_*`` and ``container``
    None: the container is the watched one) from its ``facts`` (``read_facts``). Never
    raises on bad input."""
    status = status_fields(facts.get("status") or "")
    uid = real_uid(status)
    raw = facts.get("cmdline")
    rec: dict[str, Any] = {
        "host_pid": None,
        "error": facts.get("error"),
        "container": None,
        "pid": pid,
        "host_uid": None,
        "uid": uid,
        "user": user_name(uid, passwd_names(facts.get("passwd") or "")),
        "host_user": None,
        "command": command_line(raw if isinstance(raw, bytes) else b"", status),
        "cpu_pct": None,
        "rss_mib": None,
        "started": None,
        "start_ticks": None,  # field 22 of stat: K's guard against a reused PID
        "ppid": parent_pid(facts.get("stat") or ""),  # the process tree's launcher
    }
    st = parse_stat(facts.get("stat") or "")
    if st is not None:
        ticks, start, rss = st
        rec["start_ticks"] = start
        rec["cpu_pct"] = cpu.percent(pid, start, ticks, now, hz)
        rec["rss_mib"] = round(rss * page / MIB, 1)
        rec["started"] = None if btime is None else round(btime + start / hz, 2)
    return rec


# --- reading /proc --------------------------------------------------------------------


def read_text(path: str, binary: bool = False) -> Any:
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    return data if binary else data.decode("utf-8", "replace")


# A process's user namespace map and its root's user names: read through
# /proc/PID/root on every poll they were most of a poll's reads, and they change only when
# the container's /etc/passwd does (seen within KEEP_FACTS_S). The command line is read
# each time (setproctitle renames a running server), as are status, stat and cgroup.
KEPT_FACTS = ("uid_map", "passwd")
KEEP_FACTS_S = 60.0


def read_facts(
    proc: str, pid: int, clock: CpuClock | None = None, now: float = 0.0
) -> dict[str, Any]:
    """The ``/proc/<pid>`` texts the records are made of; ``error``: why the process
    could not be read at all (gone, hidden by ``hidepid``, not permitted). ``clock``:
    where ``KEPT_FACTS`` read at an earlier poll are taken from (and kept)."""
    base = f"{proc}/{pid}/"
    facts: dict[str, Any] = {}
    try:
        facts["status"] = read_text(base + "status")
    except OSError as e:
        facts["error"] = f"{proc}/{pid}: {e.strerror or e}"
        return facts
    for name in ("stat", "cgroup"):
        with contextlib.suppress(OSError):
            facts[name] = read_text(base + name)
    try:
        facts["cmdline"] = read_text(base + "cmdline", True)
    except OSError:
        facts["cmdline"] = b""
    st = parse_stat(facts.get("stat") or "")
    key = None if st is None or clock is None else (pid, st[1])
    kept = None if key is None or clock is None else clock.kept.get(key)
    if kept is not None and now - kept[0] < KEEP_FACTS_S:
        facts.update(kept[1])
        return facts
    with contextlib.suppress(OSError):
        facts["uid_map"] = read_text(base + "uid_map")
    with contextlib.suppress(OSError):  # the container's own user names: root may look
        facts["passwd"] = read_text(base + "root/etc/passwd")  # through /proc/PID/root
    if key is not None and clock is not None:
        clock.kept[key] = (now, {k: facts[k] for k in KEPT_FACTS if k in facts})
    return facts


def describe(
    proc: str,
    pids: list[int],
    cpu: CpuClock,
    now: float | None = None,
    record: RecordMaker | None = None,
) -> list[dict[str, Any]]:
    """Records for ``pids`` read from ``proc`` (``/proc``), made by ``record``
    (``local_record`` unless told)."""
    make = record or local_record
    now = time.time() if now is None else now
    try:
        btime = boot_time(read_text(proc + "/stat"))
    except OSError:
        btime = None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else CLK_TCK_DEFAULT
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else PAGE_DEFAULT
    out: list[dict[str, Any]] = []
    alive = []
    parents: dict[int, str | None] = {}
    for pid in pids:
        facts = read_facts(proc, pid, cpu, now)
        rec = make(pid, facts, now=now, btime=btime, cpu=cpu, hz=hz, page=page)
        ppid = rec.get("ppid")
        if isinstance(ppid, int) and ppid > 1:  # a launcher's command (torchrun, srun)
            if ppid not in parents:
                try:
                    raw = read_text(f"{proc}/{ppid}/cmdline", True)
                except OSError:
                    raw = b""
                parents[ppid] = command_line(raw, {})
            rec["parent"] = parents[ppid]
        out.append(rec)
        st = parse_stat(facts.get("stat") or "")
        if st is not None:
            alive.append((pid, st[1]))
    cpu.forget_others(alive)
    return out


# --- inside a container: who holds /dev/nvidiaN ----------------------------------------


def device_index(target: str) -> int | None:
    """N of ``/dev/nvidia<N>``; None for any other path (``/dev/nvidiactl``, ...)."""
    if not target.startswith(DEVICE_PREFIX):
        return None
    number = target[len(DEVICE_PREFIX) :]
    return int(number) if number.isdigit() and number.isascii() else None


def device_file_users(proc: str = "/proc") -> list[dict[str, Any]]:
    """The processes of this PID namespace holding ``/dev/nvidia<N>`` open, each with the
    device numbers (``minors``) it holds; memory is not known this way. Processes that
    cannot be looked into (another user's, without root) are left out."""
    return describe_device_users(device_file_holders(proc), proc)


def describe_device_users(
    held: dict[int, list[int]], proc: str = "/proc", cpu: CpuClock | None = None
) -> list[dict[str, Any]]:
    """Records of the processes in ``held`` (PID -> the device numbers it holds) that are
    still there (``device_file_holders``' scan is the costly part: it is reused). ``cpu``:
    the clock kept from one poll to the next (a new one knows no CPU %)."""
    out: list[dict[str, Any]] = []
    if not held:
        return out
    for rec in describe(proc, sorted(held), cpu or CpuClock()):
        if rec.get("error"):
            continue  # gone since the scan
        rec["minors"] = held[rec["pid"]]
        rec["memory_mib"] = None
        out.append(rec)
    return out


def held_device(fd: str, ours: dict[int, tuple[int, ...] | None]) -> int | None:
    """N when the open file ``fd`` (``/proc/PID/fd/K``) is this namespace's
    ``/dev/nvidia<N>``, else None. Its path alone is not enough: a process of another
    mount namespace (another container beside ours, where PIDs are shared) names its own
    ``/dev/nvidia4``, which need not be ours. A character device of NVIDIA's major is the
    GPU in every namespace; any other file counts only when it is the very file our
    ``/dev/nvidia<N>`` is (the stand-in containers of the tests hold plain files). When
    the open file cannot be looked at (closed meanwhile, a test's /proc of links) its path
    decides, as it did. ``ours`` caches our own device files' identities for one scan."""
    try:
        index = device_index(os.readlink(fd))
    except OSError:
        return None
    if index is None:
        return None
    try:
        held = os.stat(fd)
    except OSError:
        return index
    if stat.S_ISCHR(held.st_mode) and os.major(held.st_rdev) == NVIDIA_MAJOR:
        return index
    if index not in ours:
        try:
            mine = os.stat(DEVICE_PREFIX + str(index))
            ours[index] = (mine.st_dev, mine.st_ino)
        except OSError:
            ours[index] = None
    return index if ours[index] == (held.st_dev, held.st_ino) else None


def held_devices(
    proc: str, pid: int | str, ours: dict[int, tuple[int, ...] | None] | None = None
) -> list[int]:
    """The ``/dev/nvidia<N>`` numbers ``pid`` holds open (``held_device``)."""
    base = f"{proc}/{pid}/fd"
    try:
        fds = os.listdir(base)
    except OSError:
        return []
    ours = {} if ours is None else ours
    found = {held_device(base + "/" + fd, ours) for fd in fds}
    return sorted(n for n in found if n is not None)


def device_file_holders(proc: str = "/proc") -> dict[int, list[int]]:
    """PID -> the ``/dev/nvidia<N>`` numbers it holds open: every ``/proc/*/fd`` read."""
    held: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return held
    ours: dict[int, tuple[int, ...] | None] = {}
    for entry in entries:
        gpus = held_devices(proc, entry, ours)
        if gpus:
            held[int(entry)] = gpus
    return held


def driver_minors(root: str | None = None) -> tuple[dict[str, int], str | None]:
    """Bus id -> device minor of each GPU the driver has, from its ``information`` file
    (``Bus Location: \t 0000:19:00.0`` and ``Device Minor: \t 5``: NVIDIA's
    ``nv-procfs.c``, docs/formats.md 1.7; the folder's name where the file names no bus),
    and why none could be read (no NVIDIA driver, a container that hides it). ``root``:
    ``DRIVER_GPUS`` unless told."""
    root = root or DRIVER_GPUS
    try:
        entries = sorted(os.listdir(root))[:DRIVER_GPUS_MAX]
    except OSError as e:
        return {}, f"{root}: {e.strerror or e}"
    out: dict[str, int] = {}
    for entry in entries:
        try:
            facts = status_fields(read_text(root + "/" + entry + "/information"))
        except OSError:
            continue  # gone since the listing, or not readable here
        minor = facts.get("Device Minor", "")
        if minor.isdigit() and minor.isascii():
            out[facts.get("Bus Location") or entry] = int(minor)
    return out, None if out else f"{root}: no GPU's device minor in it"


def in_container(proc: str = "/proc") -> bool:
    """Whether this looks like a container (LXC/Docker/systemd-nspawn mark themselves)."""
    try:
        environ = read_text(proc + "/1/environ", True)
    except OSError:
        environ = b""
    if b"container=" in environ:
        return True
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
