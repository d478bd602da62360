"""What a bundle holds, collected: from the monitor (incident, snapshots, processes, the
flight recording) and, read-only, from the target over its transport (``nvidia-smi -q``,
the kernel log's Xid / OOM-killer lines, the watched logs' tails, SGLang's pages, the
doctor, ``pct config``, ``py-spy dump``).

Every remote step runs within what is left of the bundle's time budget; one that does
not answer in it, or fails, is noted as missing with the reason (``index.txt`` lists it),
and the next goes on. Nothing here changes the target: the commands only read, and
nothing is installed (``py-spy`` is used only where it already is).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import platform
import re
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumon.backends.actions import audit
from gpumon.backends.alerts.incident import Incident
from gpumon.backends.alerts.store import Alert
from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.timeline import audit_in_window, timeline_json, timeline_text
from gpumon.backends.config import HostConfig
from gpumon.backends.model import Health, HostSample, iso_time
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.report import gpu_json, process_json
from gpumon.backends.recording import Recording, load_recording
from gpumon.backends.transport.base import Transport

__all__ = [
    "LOG_TAIL_LINES",
    "SMI_SECTIONS",
    "Budget",
    "add_environment",
    "add_incident",
    "add_recording",
    "add_remote",
    "peak_sample",
]

LOG_TAIL_LINES = 2000
KERNEL_LINES = 2000
SMI_SECTIONS = "ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,CLOCK"
_KERNEL = re.compile(
    r"NVRM: Xid|NVRM: GPU at|invoked oom-killer|Out of memory|oom-kill|Killed process|"
    r"Memory cgroup out of memory",
    re.IGNORECASE,
)
_HUNG_KINDS = frozenset({"sglang_hung", "job_stalled"})
# One GET of a page on the target's loopback, by the target's own Python (read-only).
_GET = (
    "import sys,urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r:\n"
    "    sys.stdout.write(r.read(int(sys.argv[3])).decode('utf-8','replace'))\n"
)
PAGE_BYTES = 4 * 1024 * 1024


@dataclass
class Budget:
    """The time left to the bundle (``deadline`` on the loop's clock)."""

    deadline: float

    @classmethod
    def of(cls, seconds: float) -> Budget:
        return cls(asyncio.get_running_loop().time() + seconds)

    def left(self) -> float:
        return max(self.deadline - asyncio.get_running_loop().time(), 0.0)


async def _within(
    archive: BundleArchive, budget: Budget, name: str, step: Awaitable[Any]
) -> Any | None:
    """``step``'s result, or None with ``name`` noted missing (no time left, a timeout,
    an error: said in words)."""
    left = budget.left()
    if left <= 0:
        if asyncio.iscoroutine(step):
            step.close()
        archive.missing(name, "not collected: the bundle's time budget was spent")
        return None
    try:
        async with asyncio.timeout(left):
            return await step
    except TimeoutError:
        archive.missing(name, f"no answer within the bundle's time budget ({left:.0f} s left)")
    except Exception as e:  # a failing command must not cost the rest of the bundle
        archive.missing(name, f"failed: {e}")
    return None


# --- from the monitor ----------------------------------------------------------------


def add_incident(
    archive: BundleArchive,
    incident: Incident,
    audit_entries: Sequence[dict[str, Any]],
    acknowledged_by: str | None,
) -> None:
    """``incident.json`` and ``incident.txt`` (the timeline) and ``audit.jsonl``."""
    entries = audit_in_window(audit_entries, incident)
    data = timeline_json(incident, entries, acknowledged_by)
    archive.add("incident.json", json.dumps(data, indent=2), "the incident's timeline (JSON)")
    archive.add("incident.txt", timeline_text(data), "the incident's timeline, one event a line")
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
    archive.add(
        "audit.jsonl",
        text,
        "gpumon's audit log: the actions on this host from 10 min before the incident to "
        f"10 min after it ({len(entries)} entries)",
    )


def peak_sample(samples: Sequence[HostSample], incident: Incident) -> HostSample | None:
    """The recorded sample at the incident's worst: the most memory used on its GPU
    within its window, else (no GPU, or no memory reported) the one nearest its first
    alert."""
    if not samples:
        return None
    start, end = incident.time, incident.last_seen
    inside = [s for s in samples if start - 60.0 <= s.time <= end] or list(samples)
    gpu = incident.gpu

    def used(sample: HostSample) -> int:
        for g in sample.gpus:
            if g.index == gpu and g.memory_used_mib is not None:
                return g.memory_used_mib
        return -1

    if gpu is not None and any(used(s) >= 0 for s in inside):
        return max(inside, key=used)
    return min(samples, key=lambda s: abs(s.time - incident.time))


def sample_snapshot(sample: HostSample, why: str) -> dict[str, Any]:
    """A recorded sample as ``snapshot --json`` has its GPUs (no alerts: see incident.json)."""
    return {
        "host": sample.host,
        "time": iso_time(sample.time),
        "why": why,
        "gpus": [gpu_json(g, sample) for g in sample.gpus],
    }


def add_recording(
    archive: BundleArchive,
    incident: Incident,
    recording_file: Path | None,
    monitor: HostMonitor | None,
) -> Recording | None:
    """``recording.jsonl.gz``: the flight recording of the incident (the file given, else
    its window written now from the monitor's recorder) and ``snapshot-peak.json`` from it."""
    path = recording_file
    if path is None and monitor is not None:
        folder = Path(tempfile.mkdtemp(prefix="gpumon-bundle-"))
        path = monitor.recorder.write_window(incident.cause, folder / "recording.jsonl.gz")
        if path is None:
            archive.missing("recording.jsonl.gz", monitor.recorder.last_error or "not written")
            return None
    if path is None:
        archive.missing("recording.jsonl.gz", "no flight recording of this incident")
        return None
    try:
        raw = path.read_bytes()
        recording = load_recording(path)
    except Exception as e:
        archive.missing("recording.jsonl.gz", f"cannot read {path}: {e}")
        return None
    finally:
        if recording_file is None:
            path.unlink(missing_ok=True)
            path.parent.rmdir()
    archive.add(
        "recording.jsonl.gz",
        raw,
        f"the flight recording of the incident ({len(recording.samples)} samples; "
        "`gpumon replay` plays it)",
    )
    peak = peak_sample(recording.samples, incident)
    if peak is None:
        archive.missing("snapshot-peak.json", "the recording holds no sample")
    else:
        why = "the recorded sample at the incident's worst (most memory used on its GPU)"
        archive.add("snapshot-peak.json", json.dumps(sample_snapshot(peak, why), indent=2), why)
    return recording


def add_environment(archive: BundleArchive, host: HostConfig, notify: Any, version: str) -> None:
    """``version.txt`` and ``config.json`` (the host's resolved config and the notifiers;
    SSH identity paths and the notifiers' secrets are redacted)."""
    archive.add(
        "version.txt",
        f"{version}\nPython {platform.python_version()} on {platform.platform()}\n"
        f"bundle written {iso_time(time.time())}\n",
        "gpumon's version and the machine that wrote the bundle",
    )
    resolved = _plain(host)
    if resolved.get("identity"):
        resolved["identity"] = ["<redacted>" for _ in resolved["identity"]]
    data = {"host": resolved, "notify": _plain(notify)}
    archive.add(
        "config.json",
        json.dumps(data, indent=2, default=str),
        "the resolved config (the host's and the notifiers')",
    )


def _plain(value: Any) -> Any:
    """A config object as JSON-ready values (``dataclasses.asdict`` cannot copy the
    mapping proxies configs hold)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Health):
        return value.value
    return value


def add_monitor_state(
    archive: BundleArchive, monitor: HostMonitor, snapshot: dict[str, Any]
) -> None:
    """``snapshot.json`` (now) and ``processes.json`` (who holds each GPU, and in which
    container)."""
    archive.add(
        "snapshot.json", json.dumps(snapshot, indent=2), "`gpumon snapshot --json` at bundle time"
    )
    processes = [process_json(p) | {"gpu_uuid": p.gpu_uuid} for p in monitor.processes]
    data = {
        "container": monitor.host.container,
        "time": None if monitor.processes_time is None else iso_time(monitor.processes_time),
        "processes": processes,
    }
    archive.add(
        "processes.json",
        json.dumps(data, indent=2),
        "the process-to-container map: each GPU process, its PID inside the container and on "
        "the Proxmox host, its container",
    )


# --- from the target ----------------------------------------------------------------


async def _command(
    transport: Transport, argv: Sequence[str], timeout: float, *, on_host: bool = False
) -> str:
    result = await transport.run(argv, timeout=timeout, on_host=on_host)
    if result.exit_code is None:
        raise TimeoutError
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise RuntimeError(
            f"`{shlex.join(argv)}` exited {result.exit_code}: {said[-1] if said else ''}"
        )
    return result.stdout


def _python(host: HostConfig) -> str:
    return host.python or "python3"


async def add_remote(
    archive: BundleArchive,
    monitor: HostMonitor,
    incident: Incident,
    budget: Budget,
    doctor: Callable[[], Awaitable[dict[str, Any]]] | None,
) -> None:
    """The target's side, each within the budget: ``nvidia-smi-q.txt``, ``kernel.txt``,
    ``pct-config.txt``, ``logs/*``, ``sglang/*``, ``doctor.json``, ``py-spy-PID.txt``."""
    host = monitor.host
    transport = monitor.transport
    step = min(budget.left(), 30.0)

    smi = [host.nvidia_smi, "-q", "-d", SMI_SECTIONS]
    text = await _within(archive, budget, "nvidia-smi-q.txt", _command(transport, smi, step))
    if text is not None:
        archive.add("nvidia-smi-q.txt", text, f"`{shlex.join(smi)}` on the target")

    if not host.kernel_log:
        archive.missing("kernel.txt", "the host's kernel_log is off in the config")
    else:
        # The kernel log the agent reads: /dev/kmsg through `dmesg -T`, or the file the
        # transport names instead (the simulator's own kernel log, a test's).
        kmsg = transport.kernel_log_path
        argv = ["dmesg", "-T"] if kmsg == "/dev/kmsg" else ["tail", "-n", "5000", kmsg]
        text = await _within(archive, budget, "kernel.txt", _kernel_lines(transport, argv, step))
        if text is not None:
            archive.add(
                "kernel.txt",
                text,
                f"the kernel log's Xid and OOM-killer lines (`{shlex.join(argv)}`, "
                f"the last {KERNEL_LINES})",
            )

    if host.container is not None and host.kind == "demo":
        archive.missing("pct-config.txt", "the simulator's container has no Proxmox host to ask")
    elif host.container is not None:
        argv = ["pct", "config", str(host.container)]
        text = await _within(
            archive, budget, "pct-config.txt", _command(transport, argv, step, on_host=True)
        )
        if text is not None:
            archive.add(
                "pct-config.txt", text, f"`pct config {host.container}` on the Proxmox host"
            )

    for i, path in enumerate(sorted(monitor.log_flow)):
        name = f"logs/{i:02d}-{_file_name(path)}"
        argv = ["tail", "-n", str(LOG_TAIL_LINES), path]
        text = await _within(archive, budget, name, _command(transport, argv, step))
        if text is not None:
            archive.add(name, text, f"the last {LOG_TAIL_LINES} lines of {path}")

    for port in sorted(monitor.workloads.sglang):
        for page, suffix in (("server_info", "json"), ("metrics", "prom")):
            name = f"sglang/{port}-{page}.{suffix}"
            url = f"http://127.0.0.1:{port}/{page}"
            argv = [_python(host), "-c", _GET, url, f"{min(step, 10.0):g}", str(PAGE_BYTES)]
            text = await _within(archive, budget, name, _command(transport, argv, step))
            if text is not None:
                archive.add(name, text, f"GET {url} on the target")

    if doctor is not None:
        data = await _within(archive, budget, "doctor.json", doctor())
        if data is not None:
            archive.add(
                "doctor.json",
                json.dumps(data, indent=2),
                "`gpumon doctor --json`: torch, CUDA, driver, wheel variant",
            )

    if incident.cause.kind in _HUNG_KINDS or any(a.kind in _HUNG_KINDS for a in incident.alerts):
        await _py_spy(archive, monitor, incident, budget, step)


async def _kernel_lines(transport: Transport, argv: Sequence[str], timeout: float) -> str:
    text = await _command(transport, argv, timeout)
    kept = [line for line in text.splitlines() if _KERNEL.search(line)][-KERNEL_LINES:]
    return "\n".join(kept) + "\n" if kept else "(no Xid or OOM-killer line in the kernel log)\n"


def _file_name(path: str) -> str:
    return re.sub(r"[^\w.-]+", "_", path.strip("/"))[-80:] or "log"


async def _py_spy(
    archive: BundleArchive, monitor: HostMonitor, incident: Incident, budget: Budget, step: float
) -> None:
    """``py-spy dump`` of the hung or stalled job's processes, where ``py-spy`` is already
    on the target (never installed)."""
    transport = monitor.transport
    which = transport.run(["sh", "-c", "command -v py-spy"], timeout=step)
    result = await _within(archive, budget, "py-spy", which)
    if result is None:
        return
    found = result.stdout.strip()
    if result.exit_code != 0 or not found:
        archive.missing("py-spy", "not on the target (gpumon installs nothing there)")
        return
    gpus = {a.gpu for a in incident.alerts if a.gpu is not None}
    job = monitor.host.job(incident.job) if incident.job else None
    if job is not None:
        gpus |= set(job.gpus)
    pids = sorted(
        {
            p.pid
            for p in monitor.processes
            if p.pid is not None and _on(p.gpu_uuid, p.gpus, gpus, monitor)
        }
    )
    if not pids:
        archive.missing("py-spy", "no process of the incident's GPUs is visible in the container")
    for pid in pids[:8]:
        name = f"py-spy-{pid}.txt"
        argv = [found, "dump", "--pid", str(pid)]
        text = await _within(archive, budget, name, _command(transport, argv, step))
        if text is not None:
            archive.add(name, text, f"`py-spy dump --pid {pid}` (a process of the hung job)")


def _on(
    uuid: str | None, held: tuple[int, ...] | None, gpus: set[int], monitor: HostMonitor
) -> bool:
    if held and gpus & set(held):
        return True
    latest = monitor.latest
    if latest is None or uuid is None:
        return False
    return any(g.uuid == uuid and g.index in gpus for g in latest.gpus)


def alert_from_json(data: Mapping[str, Any]) -> Alert | None:
    """A recording's "alert" line as an Alert (None when it lacks what one needs)."""
    try:
        peak = data.get("peak_severity")
        return Alert(
            key=str(data["key"]),
            severity=Health(data["severity"]),
            kind=str(data["kind"]),
            host=str(data["host"]),
            gpu=data.get("gpu"),
            job=data.get("job"),
            message=str(data["message"]),
            time=float(data["epoch"]),
            last_seen=float(data.get("last_seen") or data["epoch"]),
            active=bool(data.get("active")),
            acknowledged=bool(data.get("acknowledged")),
            first_message=str(data.get("first_message") or ""),
            peak_message=str(data.get("peak_message") or ""),
            peak_severity=None if peak is None else Health(peak),
        )
    except (KeyError, ValueError, TypeError):
        return None


def recorded_alerts(recording: Recording) -> list[Alert]:
    """The recording's alerts, each key once (its last record: the latest state)."""
    by_key: dict[str, Alert] = {}
    for data in recording.alerts:
        alert = alert_from_json(data)
        if alert is not None:
            first = by_key.get(alert.key)
            by_key[alert.key] = (
                alert if first is None else dataclasses.replace(alert, time=first.time)
            )
    return list(by_key.values())


def who(acknowledged: bool) -> str | None:
    """The local user, who acknowledged in this gpumon (for the timeline)."""
    return audit.local_user() if acknowledged else None
