"""Who holds the GPUs, from ``/proc``: standard library only, Python 3.8 (runs on targets).

Its records are made on ``procfacts`` (what reads ``/proc/<pid>/``, shared with the agent).
Two programs use them:

- the host-side collector (``main``), run on the Proxmox host itself, outside ``pct``: every
  ``interval`` seconds it lists the GPU compute processes (NVML with the host's pynvml,
  else ``nvidia-smi --query-compute-apps``) and describes each host PID from
  ``/proc/<pid>/``: its container (``cgroup``), its PID inside that container (``NSpid``),
  its user inside and on the host (``uid_map``), command line, CPU %, RSS and start time.
  It sends ``protocol.ProcRecords`` (source ``host``) and exits when its stdin closes.
- the agent inside a container (``procfacts.device_file_users``, without this module): the
  processes of this PID namespace that hold ``/dev/nvidiaN`` open, for when the driver's
  PIDs do not resolve here.

Where the host has no Python, gpumon streams ``SHELL_LOOP`` (POSIX sh) instead, which
prints the same ``/proc`` facts as text; ``parse_shell_round`` turns them into the same
records with the same functions (``record_from_facts``).

A record is a dict: ``host_pid``, ``pid`` (inside its container), ``container`` (``"200"``,
``"lxc:NAME"``, ``"docker:ID12"``, ``"containerd:ID12"``, ``"k8s:POD-UID"``, None for the
host), ``user``, ``host_user``, ``uid``, ``host_uid``, ``command``, ``cpu_pct``, ``rss_mib``,
``started`` (epoch s), ``start_ticks`` (field 22 of ``/proc/<pid>/stat``: clock ticks after
boot, what ``K``'s PID-reuse guard compares), ``memory_mib``, ``gpu_uuid``, ``gpu_bus_id``,
``minors`` (the ``/dev/nvidiaN`` a device-file user holds), ``error`` (why ``/proc/<pid>``
could not be read, else None).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from typing import Any

from . import procfacts, protocol
from .procfacts import (
    CpuClock,
    boot_time,
    passwd_names,
    read_text,
    status_fields,
    user_name,
)

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


def ns_pids(status: dict[str, str]) -> list[int]:
    """``NSpid`` as integers, outermost first (one entry: no nested PID namespace)."""
    words = status.get("NSpid", "").split()
    return [int(w) for w in words if w.isdigit()]


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


def record_from_facts(
    pid: int,
    facts: dict[str, Any],
    *,
    now: float,
    btime: float | None,
    cpu: CpuClock,
    hz: int = procfacts.CLK_TCK_DEFAULT,
    page: int = procfacts.PAGE_DEFAULT,
    host_names: dict[int, str] | None = None,
    from_host: bool = True,
) -> dict[str, Any]:
    """The record of host PID ``pid`` from its ``/proc`` texts (``facts``: ``cgroup``,
    ``status``, ``uid_map``, ``stat`` as str, ``cmdline`` as bytes, ``passwd``: the
    container's /etc/passwd text, any may be missing). Never raises on bad input.
    ``from_host`` False: the PID is this namespace's own and the container the watched
    one (``procfacts.local_record``)."""
    rec = procfacts.local_record(pid, facts, now=now, btime=btime, cpu=cpu, hz=hz, page=page)
    if not from_host:
        return rec
    container = container_of(facts.get("cgroup") or "")
    # The PID as the container's own PID namespace (what ``pct exec`` sees) numbers it:
    # NSpid's second entry; a process nested deeper (Docker inside the CT) has more.
    pids = ns_pids(status_fields(facts.get("status") or ""))
    host_uid = rec["uid"]  # the real uid as this (the host's) namespace sees it
    uid = host_uid
    uid_map = parse_uid_map(facts.get("uid_map") or "")
    if host_uid is not None and uid_map:
        uid = inner_uid(host_uid, uid_map)
    rec["host_pid"] = pid
    rec["container"] = container
    if container is None:
        rec["pid"] = pids[0] if pids else pid
    else:
        rec["pid"] = pids[1] if len(pids) > 1 else None
    rec["host_uid"] = host_uid
    rec["uid"] = uid
    rec["user"] = user_name(uid, passwd_names(facts.get("passwd") or ""))
    names = host_names or {}
    rec["host_user"] = None if host_uid is None else names.get(host_uid, str(host_uid))
    return rec


# --- reading /proc --------------------------------------------------------------------


def host_passwd() -> dict[int, str]:
    try:
        return passwd_names(read_text("/etc/passwd"))
    except OSError:
        return {}


def describe(
    proc: str,
    pids: list[int],
    cpu: CpuClock,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Host-side records for host PIDs ``pids`` read from ``proc`` (``/proc``)."""
    names = host_passwd()

    def record(pid: int, facts: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return record_from_facts(pid, facts, host_names=names, **kw)

    return procfacts.describe(proc, pids, cpu, now, record)


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
            except Exception as e:  # noqa: BLE001 - a driver in trouble: nvidia-smi from now on
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
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_*: said, nvidia-smi instead
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
