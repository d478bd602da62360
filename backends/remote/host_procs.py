"""Who holds the GPUs, from ``/proc``: standard library only, Python 3.8 (runs on targets).

Two programs use it:

- the host-side collector (``main``), run on the Proxmox host itself, outside ``pct``: every
  ``interval`` seconds it lists the GPU compute processes (NVML with the host's pynvml,
  else ``nvidia-smi --query-compute-apps``) and describes each host PID from
  ``/proc/<pid>/``: its container (``cgroup``), its PID inside that container (``NSpid``),
  its user inside and on the host (``uid_map``), command line, CPU %, RSS and start time.
  It sends ``protocol.ProcRecords`` (source ``host``) and exits when its stdin closes.
- the agent inside a container (``device_file_users``): the processes of this PID
  namespace that hold ``/dev/nvidiaN`` open, for when the driver's PIDs do not resolve here.

Where the host has no Python, gpumon streams ``SHELL_LOOP`` (POSIX sh) instead, which
prints the same ``/proc`` facts as text; ``parse_shell_round`` turns them into the same
records with the same functions (``record_from_facts``).

A record is a dict: ``host_pid``, ``pid`` (inside its container), ``container`` (``"200"``,
``"lxc:NAME"``, ``"docker:ID12"``, ``"containerd:ID12"``, ``"k8s:POD-UID"``, None for the
host), ``user``, ``host_user``, ``uid``, ``host_uid``, ``command``, ``cpu_pct``, ``rss_mib``,
``started`` (epoch s), ``start_ticks`` (field 22 of ``/proc/<pid>/stat``: clock ticks after
boot, what ``K``'s PID-reuse guard compares), ``memory_mib``, ``gpu_uuid``, ``gpu_bus_id``,
``gpus`` (device-file indexes), ``error`` (why ``/proc/<pid>`` could not be read, else None).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from typing import Any

from . import protocol

CLK_TCK_DEFAULT = 100  # what the shell loop assumes (it cannot ask sysconf); Linux's USER_HZ
PAGE_DEFAULT = 4096
MIB = 1024 * 1024
SMI_PROCESS_FIELDS = ("pid", "used_memory", "gpu_uuid", "gpu_bus_id")

# --- containers from cgroup paths -----------------------------------------------------

# Anchored at a path component, not at the root: under a cgroup namespace or a delegated
# subtree (systemd's, a test's) the same layout sits one level down.
_PROXMOX = re.compile(r"(?:^|/)lxc/(\d+)(?:/|$)")  # lxc.cgroup.dir.container = lxc/$vmid
_LXC_PAYLOAD = re.compile(r"(?:^|/)lxc\.payload[./]([^/]+)(?:/|$)")  # LXC 4+ default
_LXC_V1 = re.compile(r"^/lxc/([^/]+)(?:/|$)")  # older LXC: /lxc/NAME
_DOCKER = re.compile(r"(?:/docker-|/docker/)([0-9a-f]{12,64})(?:\.scope)?(?:/|$)")
_CONTAINERD = re.compile(r"/cri-containerd-([0-9a-f]{12,64})\.scope(?:/|$)")
_KUBEPODS = re.compile(r"/kubepods[^/]*/(?:[^/]*/)*?(?:kubepods-[a-z]+-)?pod([0-9a-f_-]{8,})")


def container_of_path(path: str) -> str | None:
    """The container a cgroup path belongs to, outermost first; None for the host.

    ``/lxc/200/ns/...`` (Proxmox) -> ``"200"``; ``/lxc.payload.web/...`` -> ``"lxc:web"``
    (a numeric name, Proxmox's own, -> ``"200"``); ``/system.slice/docker-<id>.scope`` or
    ``/docker/<id>`` -> ``"docker:<id[:12]>"``; ``cri-containerd-<id>.scope`` ->
    ``"containerd:<id[:12]>"``; ``/kubepods.../pod<uid>...`` -> ``"k8s:<uid>"``.
    The LXC monitor's own cgroup (``/lxc.monitor/200``) is the host's."""
    for pattern in (_PROXMOX, _LXC_PAYLOAD):
        m = pattern.search(path)
        if m:
            name = m.group(1)
            return name if name.isdigit() else "lxc:" + name
    m = _LXC_V1.match(path)
    if m:
        return m.group(1) if m.group(1).isdigit() else "lxc:" + m.group(1)
    m = _KUBEPODS.search(path)
    if m:
        return "k8s:" + m.group(1).replace("_", "-")
    m = _DOCKER.search(path)
    if m:
        return "docker:" + m.group(1)[:12]
    m = _CONTAINERD.search(path)
    if m:
        return "containerd:" + m.group(1)[:12]
    return None


def container_of(cgroup_text: str) -> str | None:
    """The container of a ``/proc/<pid>/cgroup`` text: the cgroup v2 line (``0::PATH``)
    first, then any v1 hierarchy that names one (hybrid hosts); None for the host."""
    v2: list[str] = []
    v1: list[str] = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        (v2 if parts[0] == "0" and parts[1] == "" else v1).append(parts[2])
    for path in v2 + v1:
        found = container_of_path(path)
        if found is not None:
            return found
    return None


# --- /proc/<pid>/status, uid_map, stat ------------------------------------------------


def status_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def ns_pids(status: dict[str, str]) -> list[int]:
    """``NSpid`` as integers, outermost first (one entry: no nested PID namespace)."""
    words = status.get("NSpid", "").split()
    return [int(w) for w in words if w.isdigit()]


def real_uid(status: dict[str, str]) -> int | None:
    words = status.get("Uid", "").split()
    return int(words[0]) if words and words[0].isdigit() else None


def parse_uid_map(text: str) -> list[tuple[int, int, int]]:
    """``(inside, outside, count)`` lines of a ``uid_map``; junk lines are skipped."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and all(w.isdigit() for w in words):
            out.append((int(words[0]), int(words[1]), int(words[2])))
    return out


def inner_uid(host_uid: int, uid_map: list[tuple[int, int, int]]) -> int | None:
    """The uid inside the user namespace for ``host_uid`` (host 100000 -> 0 with
    ``0 100000 65536``); None when the map does not cover it (nobody, overflow uid)."""
    for inside, outside, count in uid_map:
        if outside <= host_uid < outside + count:
            return inside + host_uid - outside
    return None


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


def command_line(cmdline: bytes, status: dict[str, str]) -> str | None:
    """The command line with its words joined by spaces; the short name for a process
    without one (a kernel thread, a zombie)."""
    words = [w.decode("utf-8", "replace") for w in cmdline.split(b"\0") if w]
    if words:
        return " ".join(words)
    name = status.get("Name")
    return "[" + name + "]" if name else None


class CpuClock:
    """CPU % between two polls of the same process (None on its first poll)."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, int]] = {}

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


def record_from_facts(
    pid: int,
    facts: dict[str, Any],
    *,
    now: float,
    btime: float | None,
    cpu: CpuClock,
    hz: int = CLK_TCK_DEFAULT,
    page: int = PAGE_DEFAULT,
    host_names: dict[int, str] | None = None,
    from_host: bool = True,
) -> dict[str, Any]:
    """The record of host PID ``pid`` from its ``/proc`` texts (``facts``: ``cgroup``,
    ``status``, ``uid_map``, ``stat`` as str, ``cmdline`` as bytes, ``passwd``: the
    container's /etc/passwd text, any may be missing). Never raises on bad input."""
    status = status_fields(facts.get("status") or "")
    rec: dict[str, Any] = {"host_pid": pid, "error": facts.get("error")}
    container = container_of(facts.get("cgroup") or "")
    rec["container"] = container
    # The PID as the container's own PID namespace (what ``pct exec`` sees) numbers it:
    # NSpid's second entry; a process nested deeper (Docker inside the CT) has more.
    pids = ns_pids(status)
    if container is None:
        rec["pid"] = pids[0] if pids else pid
    else:
        rec["pid"] = pids[1] if len(pids) > 1 else None
    host_uid = real_uid(status)
    rec["host_uid"] = host_uid
    uid = None
    if host_uid is not None:
        uid_map = parse_uid_map(facts.get("uid_map") or "") if from_host else []
        uid = inner_uid(host_uid, uid_map) if uid_map else host_uid
    rec["uid"] = uid
    inside_names = passwd_names(facts.get("passwd") or "")
    if uid is not None:
        rec["user"] = inside_names.get(uid) or ("root" if uid == 0 else str(uid))
    else:
        rec["user"] = None
    names = host_names or {}
    rec["host_user"] = None if host_uid is None else names.get(host_uid, str(host_uid))
    if not from_host:  # this namespace's own PID; the container is the watched one
        rec["pid"], rec["container"] = pid, None
        rec["host_pid"] = rec["host_uid"] = rec["host_user"] = None
    raw = facts.get("cmdline")
    rec["command"] = command_line(raw if isinstance(raw, bytes) else b"", status)
    st = parse_stat(facts.get("stat") or "")
    rec["cpu_pct"] = rec["rss_mib"] = rec["started"] = rec["start_ticks"] = None
    if st is not None:
        ticks, start, rss = st
        rec["start_ticks"] = start
        rec["cpu_pct"] = cpu.percent(pid, start, ticks, now, hz)
        rec["rss_mib"] = round(rss * page / MIB, 1)
        rec["started"] = None if btime is None else round(btime + start / hz, 2)
    return rec


# --- reading /proc --------------------------------------------------------------------


def _read(path: str, binary: bool = False) -> Any:
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    return data if binary else data.decode("utf-8", "replace")


def read_facts(proc: str, pid: int) -> dict[str, Any]:
    """The ``/proc/<pid>`` texts ``record_from_facts`` reads; ``error``: why the process
    could not be read at all (gone, hidden by ``hidepid``, not permitted)."""
    base = f"{proc}/{pid}/"
    facts: dict[str, Any] = {}
    try:
        facts["status"] = _read(base + "status")
    except OSError as e:
        facts["error"] = f"{proc}/{pid}: {e.strerror or e}"
        return facts
    for name, binary in (("cgroup", False), ("uid_map", False), ("stat", False)):
        with contextlib.suppress(OSError):
            facts[name] = _read(base + name, binary)
    try:
        facts["cmdline"] = _read(base + "cmdline", True)
    except OSError:
        facts["cmdline"] = b""
    with contextlib.suppress(OSError):  # the container's own user names: root may look
        facts["passwd"] = _read(base + "root/etc/passwd")  # through /proc/PID/root
    return facts


def host_passwd() -> dict[int, str]:
    try:
        return passwd_names(_read("/etc/passwd"))
    except OSError:
        return {}


def describe(
    proc: str,
    pids: list[int],
    cpu: CpuClock,
    now: float | None = None,
    *,
    from_host: bool = True,
) -> list[dict[str, Any]]:
    """Records for host PIDs ``pids`` read from ``proc`` (``/proc``); ``from_host``: see
    ``record_from_facts``."""
    now = time.time() if now is None else now
    try:
        btime = boot_time(_read(proc + "/stat"))
    except OSError:
        btime = None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else CLK_TCK_DEFAULT
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else PAGE_DEFAULT
    names = host_passwd()
    out = []
    alive = []
    for pid in pids:
        facts = read_facts(proc, pid)
        rec = record_from_facts(
            pid,
            facts,
            now=now,
            btime=btime,
            cpu=cpu,
            hz=hz,
            page=page,
            host_names=names,
            from_host=from_host,
        )
        out.append(rec)
        st = parse_stat(facts.get("stat") or "")
        if st is not None:
            alive.append((pid, st[1]))
    cpu.forget_others(alive)
    return out


# --- GPU processes on the host --------------------------------------------------------


def parse_apps_rows(rows: list[str]) -> list[dict[str, Any]]:
    """``pid, used_memory, gpu_uuid, gpu_bus_id`` rows (``SMI_PROCESS_FIELDS``) as dicts;
    rows without a numeric PID are skipped. Memory ``[N/A]`` is None."""
    out = []
    for row in rows:
        cells = [c.strip() for c in row.split(",")]
        if len(cells) < 4 or not cells[0].isdigit():
            continue
        mem = int(cells[1]) if cells[1].isdigit() else None
        out.append(
            {
                "host_pid": int(cells[0]),
                "memory_mib": mem,
                "gpu_uuid": cells[2],
                "gpu_bus_id": cells[3],
            }
        )
    return out


def merge_gpu_rows(
    apps: list[dict[str, Any]], records: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One record per (process, GPU): the process facts with that GPU's memory."""
    out = []
    for app in apps:
        rec = dict(records.get(app["host_pid"]) or {"host_pid": app["host_pid"]})
        rec.update(app)
        out.append(rec)
    return out


def unreadable_error(records: list[dict[str, Any]]) -> str | None:
    """Why the host side sees nothing useful: every GPU process's ``/proc`` entry was
    unreadable (``hidepid``, another user's processes); None when any was read."""
    if not records or any(not r.get("error") for r in records):
        return None
    return f"cannot read the GPU processes' /proc entries: {records[0]['error']}"


class HostCollector:
    """Polls the host's GPU processes (NVML or nvidia-smi) and describes them."""

    def __init__(self, options: dict[str, Any], nvml: Any = None) -> None:
        self.smi = str(options.get("nvidia_smi") or "nvidia-smi")
        self.proc = str(options.get("proc") or "/proc")
        self.nvml = nvml
        self.cpu = CpuClock()

    def apps(self) -> tuple[list[dict[str, Any]], str | None]:
        """The compute processes now, or ([], why) when they cannot be listed."""
        from . import agent  # shipped beside this module; imported late (it imports us)

        if self.nvml is not None:
            try:
                rows = agent.nvml_process_rows(self.nvml)
            except Exception as e:  # a driver in trouble: nvidia-smi from now on
                self.nvml = None
                return [], f"NVML: {e}"
            # agent rows are pid, name, memory, uuid, bus: drop the name (ours is better)
            return parse_apps_rows([_drop_name(r) for r in rows]), None
        argv = [self.smi, "--query-compute-apps=" + ",".join(SMI_PROCESS_FIELDS)]
        code, text = agent.run_once([*argv, "--format=csv,noheader,nounits"])
        if code != 0:
            return [], f"{self.smi} failed (exit {code}): {text.strip()[:300]}"
        return parse_apps_rows(text.splitlines()), None

    def poll(self, now: float | None = None) -> tuple[list[dict[str, Any]], str | None]:
        apps, error = self.apps()
        pids = sorted({a["host_pid"] for a in apps})
        described = {r["host_pid"]: r for r in describe(self.proc, pids, self.cpu, now)}
        records = merge_gpu_rows(apps, described)
        return records, error or unreadable_error(records)


def _drop_name(row: str) -> str:
    cells = row.split(", ")
    if len(cells) < 5:
        return row
    return ", ".join([cells[0], cells[-3], cells[-2], cells[-1]])


# --- inside a container: who holds /dev/nvidiaN ----------------------------------------

_DEVICE = re.compile(r"^/dev/nvidia(\d+)$")


def device_file_users(proc: str = "/proc") -> list[dict[str, Any]]:
    """The processes of this PID namespace holding ``/dev/nvidia<N>`` open, each with the
    device numbers (``gpus``) it holds; memory is not known this way. Processes that
    cannot be looked into (another user's, without root) are left out."""
    cpu = CpuClock()
    out: list[dict[str, Any]] = []
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return out
    held: dict[int, list[int]] = {}
    for entry in entries:
        base = f"{proc}/{entry}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        gpus = set()
        for fd in fds:
            try:
                target = os.readlink(base + "/" + fd)
            except OSError:
                continue
            m = _DEVICE.match(target)
            if m:
                gpus.add(int(m.group(1)))
        if gpus:
            held[int(entry)] = sorted(gpus)
    if not held:
        return out
    for rec in describe(proc, sorted(held), cpu, from_host=False):
        rec["gpus"] = held[rec["pid"]]
        rec["memory_mib"] = None
        out.append(rec)
    return out


def in_container(proc: str = "/proc") -> bool:
    """Whether this looks like a container (LXC/Docker/systemd-nspawn mark themselves)."""
    try:
        environ = _read(proc + "/1/environ", True)
    except OSError:
        environ = b""
    if b"container=" in environ:
        return True
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


# --- the shell loop for a host without Python ------------------------------------------

SHELL_LOOP = r"""
interval=$1; smi=$2; proc=${3:-/proc}  # $4 = once: one round, then exit
# Shell builtins (read, echo, case) wherever they do: each fork costs a host-side poll more
# than everything else together. Per round: nvidia-smi, and one tr per GPU process.
while :; do
  echo "@round"
  while IFS= read -r l; do
    case $l in btime*) echo "@btime $l"; break;; esac
  done < "$proc/stat"
  out=$("$smi" --query-compute-apps=pid,used_memory,gpu_uuid,gpu_bus_id \
    --format=csv,noheader,nounits 2>&1)
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "@smi_error $code"
    printf '%s\n' "$out" | while IFS= read -r l; do echo "@text $l"; done
  else
    pids=" "
    while IFS= read -r l; do
      [ -n "$l" ] || continue
      echo "@app $l"
      pid=${l%%,*}
      case "$pid" in *[!0-9]*|'') continue;; esac
      case "$pids" in *" $pid "*) ;; *) pids="$pids$pid ";; esac
    done <<EOF_APPS
$out
EOF_APPS
    for pid in $pids; do
      d="$proc/$pid"
      echo "@pid $pid"
      if ! [ -r "$d/status" ]; then echo "@error $d: not readable"; continue; fi
      while IFS= read -r l; do echo "@cgroup $l"; done < "$d/cgroup"
      while IFS= read -r l; do
        case $l in Name:*|Uid:*|NSpid:*) echo "@status $l";; esac
      done < "$d/status"
      while IFS= read -r l; do echo "@uid_map $l"; done < "$d/uid_map"
      IFS= read -r l < "$d/stat" && echo "@stat $l"
      echo "@cmdline $(tr '\0' ' ' < "$d/cmdline")"
    done
  fi
  echo "@end"
  [ "$4" = once ] && exit 0
  sleep "$interval" || exit 0
done
"""


class ShellRound:
    """Accumulates one round of ``SHELL_LOOP`` output; ``feed`` returns (records, error)
    when a round ends (``@end``)."""

    def __init__(self, host_names: dict[int, str] | None = None) -> None:
        self.cpu = CpuClock()
        self.host_names = host_names or {}
        self._reset()

    def _reset(self) -> None:
        self.now: float | None = None
        self.btime: float | None = None
        self.apps: list[str] = []
        self.facts: dict[int, dict[str, Any]] = {}
        self.pid: int | None = None
        self.error: str | None = None
        self.text: list[str] = []

    def feed(self, line: str) -> tuple[list[dict[str, Any]], str | None] | None:
        line = line.rstrip("\r\n")
        tag, _, value = line.partition(" ")
        if tag == "@round":
            self._reset()
            self.now = float(value) if value.isdigit() else None  # else: when it ends
        elif tag == "@btime":
            self.btime = boot_time(value)
        elif tag == "@app":
            self.apps.append(value)
        elif tag == "@smi_error":
            self.error = f"nvidia-smi failed on the host (exit {value})"
        elif tag == "@text":
            self.text.append(value)
        elif tag == "@pid" and value.isdigit():
            self.pid = int(value)
            self.facts[self.pid] = {"cmdline": b""}
        elif self.pid is not None and tag in ("@cgroup", "@status", "@uid_map"):
            facts = self.facts[self.pid]
            key = tag[1:]
            facts[key] = facts.get(key, "") + value + "\n"
        elif self.pid is not None and tag == "@stat":
            self.facts[self.pid]["stat"] = value
        elif self.pid is not None and tag == "@cmdline":
            self.facts[self.pid]["cmdline"] = value.strip().encode()  # words: spaces
        elif self.pid is not None and tag == "@error":
            self.facts[self.pid]["error"] = value
        elif tag == "@end":
            return self._finish()
        return None

    def _finish(self) -> tuple[list[dict[str, Any]], str | None]:
        now = self.now if self.now is not None else time.time()
        apps = parse_apps_rows(self.apps)
        described = {
            pid: record_from_facts(
                pid, facts, now=now, btime=self.btime, cpu=self.cpu, host_names=self.host_names
            )
            for pid, facts in self.facts.items()
        }
        records = merge_gpu_rows(apps, described)
        error = self.error
        if error is not None and self.text:
            error += ": " + " ".join(self.text)[:300]
        return records, error or unreadable_error(records)


# --- the host-side program ------------------------------------------------------------


def main(argv: list[str]) -> None:
    """Run until stdin closes. ``argv[1]``: options JSON (``interval``, ``nvidia_smi``,
    ``nvml``, ``proc``)."""
    from . import agent

    raw = json.loads(argv[1]) if len(argv) > 1 else {}
    options = raw if isinstance(raw, dict) else {}
    interval = float(options.get("interval") or 5.0)
    signal.signal(signal.SIGTERM, lambda *_: agent._shutdown(0))
    signal.signal(signal.SIGHUP, lambda *_: agent._shutdown(0))
    out = agent.Output(sys.stdout)
    nvml = None
    note = None
    if options.get("nvml", True):
        try:
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

            pynvml.nvmlInit()
            nvml = pynvml
        except Exception as e:
            note = f"NVML not used on the host: {type(e).__name__}: {e}"
    out.send(
        protocol.Hello(
            agent=protocol.AGENT_VERSION,
            source="host/nvml" if nvml is not None else "host/nvidia-smi",
            python=sys.version.split()[0],
            hostname=_hostname(),
            pid=os.getpid(),
            note=note,
        )
    )
    collector = HostCollector(options, nvml)

    def loop() -> None:
        while True:
            started = time.monotonic()
            records, error = collector.poll()
            out.send(protocol.ProcRecords(time.time(), "host", records, error))
            time.sleep(max(interval - (time.monotonic() - started), 0.05))

    threading.Thread(target=loop, daemon=True, name="host-procs").start()
    for _ in sys.stdin:
        pass
    agent._shutdown(0)


def _hostname() -> str:
    import socket

    return socket.gethostname()
