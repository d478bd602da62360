"""What a bundle holds, collected: from the monitor (incident, snapshots, processes, the
flight recording) and, read-only, from the target over its transport (``nvidia-smi -q``,
the kernel log's Xid / OOM-killer lines, the watched logs' tails, SGLang's pages, each
vLLM server's page, command line (masked) and output, the doctor, ``pct config``,
``py-spy dump``).

Every remote step runs within what is left of the bundle's time budget; one that does
not answer in it, or fails, is noted as missing with the reason (``index.txt`` lists it),
the command is killed on the target, and the next goes on. Every read is bounded by
what the archive has room for (``BundleArchive.room``) before it is read: a log of
256 MB with no newline costs at most the per-file cap here. Nothing here changes the
target: the commands only read (a FIFO is never opened for reading: that would wait for
a writer or take lines from its reader), and nothing is installed (``py-spy`` is used
only where it already is).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import platform
import re
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.actions import audit
from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.incident import Incident
from gpumon.backends.alerts.kinds import Tag, tagged
from gpumon.backends.alerts.store import Alert
from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.timeline import audit_in_window, timeline_json, timeline_text
from gpumon.backends.config import HostConfig
from gpumon.backends.masking import mask_command, secret_values
from gpumon.backends.model import GpuProcess, Health, HostSample, iso_time
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.report import gpu_json, process_json
from gpumon.backends.recording import Recording, RecordingError, load_recording
from gpumon.backends.transport.base import RUN_MAX_BYTES, ProcessStream, RunResult, Transport

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
LOG_FILES_MAX = 32  # a glob's newest matches read (they share the bundle's cap anyway)
KERNEL_LINES = 2000
ROOM_MIN = 4096  # with less room than this left in the bundle, a file is left out
LOG_SHARE_MIN_S = 5.0  # a followed log's read gets at least this much of the budget
SMI_SECTIONS = "ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,CLOCK"
_KERNEL = re.compile(
    r"NVRM: Xid|NVRM: GPU at|invoked oom-killer|Out of memory|oom-kill|Killed process|"
    r"Memory cgroup out of memory",
    re.IGNORECASE,
)
_HUNG_KINDS = tagged(Tag.HUNG)
# One GET of a page on the target's loopback, by the target's own Python (read-only).
_GET = (
    "import sys,urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r:\n"
    "    sys.stdout.write(r.read(int(sys.argv[3])).decode('utf-8','replace'))\n"
)
PAGE_BYTES = 4 * 1024 * 1024
# The followed logs' files on the target, by the target's own Python: each pattern's
# matches (a glob: the newest LOG_FILES_MAX) or the path itself, each name as hex bytes
# (a name may hold any byte: an ESC, a bidi override, a newline) with what it is. One
# line of ASCII JSON, so nothing in it is changed on its way (untrusted.printable_text).
_LIST_LOGS = """
import glob, json, os, stat, sys
most, found = int(sys.argv[1]), []
def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0
for n, pattern in enumerate(sys.argv[2:]):
    pattern = os.path.expanduser(pattern)
    paths = [pattern]
    if any(c in pattern for c in "*?["):
        paths = sorted(glob.glob(pattern), key=mtime, reverse=True)
        if not paths:
            found.append({"n": n, "error": "no file matches"})
        elif len(paths) > most:
            found.append({"n": n, "more": len(paths) - most})
            paths = paths[:most]
    for path in paths:
        item = {"n": n, "path": os.fsencode(path).hex()}
        try:
            st = os.stat(path)
        except OSError as e:
            item["error"] = e.strerror or type(e).__name__
        else:
            mode = st.st_mode
            item["size"] = st.st_size
            item["kind"] = (
                "file" if stat.S_ISREG(mode) else "FIFO" if stat.S_ISFIFO(mode)
                else "directory" if stat.S_ISDIR(mode) else "special file"
            )
        found.append(item)
print(json.dumps(found))
"""
# One log's tail: its last argv[2] bytes at most, of them the last argv[3] lines, read by
# its real name (hex), opened without waiting (O_NONBLOCK: a FIFO put there since the
# listing is refused, not waited on). Says on stderr the file's size and where what it
# sent starts.
_READ_LOG = """
import os, stat, sys
most, lines = int(sys.argv[2]), int(sys.argv[3])
try:
    fd = os.open(bytes.fromhex(sys.argv[1]), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
except OSError as e:
    sys.exit("unreadable: " + (e.strerror or type(e).__name__))
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode):
    sys.exit("not a regular file")
start = max(st.st_size - most, 0)
os.lseek(fd, start, os.SEEK_SET)
parts, size = [], 0
while size < most:
    chunk = os.read(fd, min(1 << 20, most - size))
    if not chunk:
        break
    parts.append(chunk)
    size += len(chunk)
data = b"".join(parts)
end = len(data) - 1 if data.endswith(b"\\n") else len(data)
for _ in range(lines):
    end = data.rfind(b"\\n", 0, end)
    if end < 0:
        break
first = end + 1 if end >= 0 else 0
sys.stdout.buffer.write(data[first:])
sys.stderr.write("gpumon-read %d %d\\n" % (st.st_size, start + first))
"""
# A server's process by its PID: its command line (words as JSON strings) and where its
# output goes (file descriptors 1 and 2: each its target by its real name, as hex, and
# what that is). One line of ASCII JSON.
_SERVER_PROCESS = """
import json, os, stat, sys
pid = int(sys.argv[1])
try:
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        argv = [w.decode("utf-8", "replace") for w in f.read().split(b"\\0") if w]
except OSError as e:
    sys.exit("no process %d: %s" % (pid, e.strerror or type(e).__name__))
out = []
for fd in (1, 2):
    item = {"fd": fd}
    link = "/proc/%d/fd/%d" % (pid, fd)
    try:
        item["path"] = os.fsencode(os.readlink(link)).hex()
        mode = os.stat(link).st_mode
        item["kind"] = (
            "file" if stat.S_ISREG(mode) else "pipe" if stat.S_ISFIFO(mode)
            else "socket" if stat.S_ISSOCK(mode) else "terminal" if stat.S_ISCHR(mode)
            else "special file"
        )
        item["size"] = os.stat(link).st_size
    except OSError as e:
        item["error"] = e.strerror or type(e).__name__
    out.append(item)
print(json.dumps({"argv": argv, "out": out}))
"""


@dataclass
class Budget:
    """The time left to the bundle (``deadline`` on the loop's clock); ``words``: what a
    step that outlasts it is said to have run out of."""

    deadline: float
    words: str = "the bundle's time budget"

    @classmethod
    def of(cls, seconds: float) -> Budget:
        return cls(asyncio.get_running_loop().time() + seconds)

    def left(self) -> float:
        return max(self.deadline - asyncio.get_running_loop().time(), 0.0)

    def share(self, parts: int, least: float) -> Budget:
        """One of ``parts`` steps' fair share of what is left: ``least`` at the least, never
        past this budget's end. One slow step (a 64 MiB log's tail on a loaded target)
        then cannot spend the time of those after it."""
        left = self.left()
        now = asyncio.get_running_loop().time()
        return Budget(
            now + min(left, max(left / max(parts, 1), least)),
            "its share of the bundle's time budget",
        )


async def _within(
    archive: BundleArchive, budget: Budget, name: str, step: Awaitable[Any], about: str = ""
) -> Any | None:
    """``step``'s result, or None with ``name`` noted missing (no time left, a timeout,
    an error: said in words, after ``about``). A step cut short by the budget is
    cancelled: the transport kills its command on the target."""
    left = budget.left()
    if left <= 0:
        if asyncio.iscoroutine(step):
            step.close()
        archive.missing(name, f"{about}not collected: the bundle's time budget was spent")
        return None
    try:
        async with asyncio.timeout(left):
            return await step
    except TimeoutError:
        why = f"no answer within {budget.words} ({left:.0f} s left): timed out"
        archive.missing(name, about + why)
    except Exception as e:  # noqa: BLE001 - a failing command must not cost the rest of the bundle
        archive.missing(name, f"{about}failed: {e}")
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
    except (OSError, RecordingError) as e:  # what load_recording says it raises
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


class _Deadlined(Transport):
    """``inner`` as the bundle runs its commands there (and the doctor its own): each is
    also ended on the target by itself at the bundle's deadline (coreutils ``timeout``,
    SIGKILL to its process group, where ``timeout`` is there), since the transport's
    kill of a cancelled step does not reach a root login's command on OpenSSH before
    10.0 (ssh.py): a read stuck there would outlive the bundle."""

    def __init__(self, inner: Transport, budget: Budget, *, ends_itself: bool) -> None:
        super().__init__(inner.host)
        self.inner = inner
        self.budget = budget
        self.ends_itself = ends_itself
        self.host_proc_root = inner.host_proc_root
        self.kernel_log_path = inner.kernel_log_path
        self.proc_root = inner.proc_root

    @classmethod
    async def of(cls, inner: Transport, budget: Budget) -> _Deadlined:
        """``inner``, its commands bounded where the target has ``timeout``."""
        found = False
        try:
            async with asyncio.timeout(min(budget.left(), 10.0)):
                result = await inner.run(["sh", "-c", "command -v timeout"], timeout=10.0)
            found = result.exit_code == 0 and bool(result.stdout.strip())
        except Exception:  # noqa: BLE001 - then the transport's kill is all there is
            found = False
        return cls(inner, budget, ends_itself=found)

    @property
    def label(self) -> str:
        return self.inner.label

    @property
    def own_python(self) -> str | None:
        return self.inner.own_python

    def _bounded(self, argv: Sequence[str]) -> list[str]:
        if not self.ends_itself:
            return list(argv)
        return ["timeout", "-s", "KILL", str(max(math.ceil(self.budget.left()), 1)), *argv]

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 30.0,
        on_host: bool = False,
        max_bytes: int = RUN_MAX_BYTES,
        keep_end: bool = False,
    ) -> RunResult:
        # The inner transport's own run (the simulator answers the doctor's probe there).
        return await self.inner.run(
            self._bounded(argv),
            input=input,
            timeout=timeout,
            on_host=on_host,
            max_bytes=max_bytes,
            keep_end=keep_end,
        )

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        return await self.inner.open_stream(self._bounded(argv))

    async def open_host_stream(self, argv: Sequence[str]) -> ProcessStream:
        return await self.inner.open_host_stream(self._bounded(argv))


async def _command(
    target: _Deadlined,
    argv: Sequence[str],
    timeout: float,
    *,
    on_host: bool = False,
    max_bytes: int = RUN_MAX_BYTES,
    keep_end: bool = False,
) -> tuple[str, bool]:
    """The command's stdout, at most ``max_bytes`` of it (its start, or its end with
    ``keep_end``), and whether it was cut. Raises TimeoutError, RuntimeError (it failed)."""
    result = await target.run(
        argv, timeout=timeout, on_host=on_host, max_bytes=max_bytes, keep_end=keep_end
    )
    if result.exit_code is None and not result.cut:
        raise TimeoutError
    if result.exit_code not in (0, None):
        raise RuntimeError(f"`{_shown(argv)}` exited {result.exit_code}: {_said(result)}")
    return result.stdout, result.cut


def _shown(argv: Sequence[str]) -> str:
    """``argv`` for a message, a ``python -c`` script as ``...``."""
    words = list(argv)
    for i in range(1, len(words)):
        if words[i - 1] == "-c":
            words[i] = "..."
    return shlex.join(words)


def _said(result: RunResult) -> str:
    said = (result.stderr or result.stdout).strip().splitlines()
    return said[-1] if said else ""


def _cut_note(text: str, cut: bool) -> str:
    """What an output cut to the room it had says in the index."""
    return f" (too large: cut to its first {len(text)} characters)" if cut else ""


def _python(host: HostConfig, transport: Transport) -> str:
    return host.python or transport.own_python or "python3"


async def add_remote(
    archive: BundleArchive,
    monitor: HostMonitor,
    incident: Incident,
    budget: Budget,
    doctor: Callable[[Transport], Awaitable[dict[str, Any]]] | None,
) -> None:
    """The target's side, each within the budget: ``nvidia-smi-q.txt``, ``kernel.txt``,
    ``pct-config.txt``, ``logs/*``, ``sglang/*``, ``doctor.json``, ``py-spy-PID.txt``."""
    host = monitor.host
    transport = monitor.transport
    target = await _Deadlined.of(transport, budget)
    step = min(budget.left(), 30.0)

    # first: a server's --api-key, once known, is scrubbed from every file by value
    await _add_vllm(archive, monitor, target, step)

    await add_smi(archive, host, target, step)

    if not host.kernel_log:
        archive.missing("kernel.txt", "the host's kernel_log is off in the config")
    else:
        # The kernel log the agent reads: /dev/kmsg through `dmesg -T`, or the file the
        # transport names instead (the simulator's own kernel log, a test's).
        kmsg = transport.kernel_log_path
        argv = ["dmesg", "-T"] if kmsg == "/dev/kmsg" else ["tail", "-n", "5000", kmsg]
        text = await _within(archive, budget, "kernel.txt", _kernel_lines(target, argv, step))
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
        read = _command(target, argv, step, on_host=True, max_bytes=archive.room())
        got = await _within(archive, budget, "pct-config.txt", read)
        if got is not None:
            text, cut = got
            about = f"`pct config {host.container}` on the Proxmox host{_cut_note(text, cut)}"
            archive.add("pct-config.txt", text, about)

    await _add_logs(archive, monitor, target, step)

    for port in sorted(monitor.workloads.sglang):
        for page, suffix in (("server_info", "json"), ("metrics", "prom")):
            await add_sglang_page(archive, host, target, port, page, suffix, step)

    if doctor is not None:
        data = await _within(archive, budget, "doctor.json", doctor(target))
        if data is not None:
            archive.add(
                "doctor.json",
                json.dumps(data, indent=2),
                "`gpumon doctor --json`: torch, CUDA, driver, wheel variant",
            )

    if incident.cause.kind in _HUNG_KINDS or any(a.kind in _HUNG_KINDS for a in incident.alerts):
        await _py_spy(archive, monitor, incident, target, step)


async def add_sglang_page(
    archive: BundleArchive,
    host: HostConfig,
    target: _Deadlined,
    port: int,
    page: str,
    suffix: str,
    step: float,
) -> None:
    """``sglang/PORT-PAGE.SUFFIX``: one page of the SGLang server on ``port``, fetched on
    the target's loopback."""
    name = f"sglang/{port}-{page}.{suffix}"
    url = f"http://127.0.0.1:{port}/{page}"
    argv = [_python(host, target), "-c", _GET, url, f"{min(step, 10.0):g}", str(PAGE_BYTES)]
    read = _command(target, argv, step, max_bytes=min(archive.room(), PAGE_BYTES))
    got = await _within(archive, target.budget, name, read)
    if got is not None:
        text, cut = got
        archive.add(name, text, f"GET {url} on the target{_cut_note(text, cut)}")


async def _add_vllm(
    archive: BundleArchive, monitor: HostMonitor, target: _Deadlined, step: float
) -> None:
    """``vllm/PORT-*`` for each vLLM server: ``command.txt`` (its command line, secret
    flags masked; their values are then scrubbed from the whole bundle), ``log.txt`` (the
    tail of the file its output goes to) and ``metrics.prom`` (its ``/metrics``)."""
    python = _python(monitor.host, target)
    for port, server in sorted(monitor.workloads.vllm.items()):
        name = f"vllm/{port}"
        if server.pid is None:
            why = "no process known for it (vLLM discovery found none: off, or not seen yet)"
            archive.missing(f"{name}-command.txt, {name}-log.txt", f"left out: {why}")
        else:
            argv = [python, "-c", _SERVER_PROCESS, str(server.pid)]
            found = await _within(
                archive, target.budget, f"{name}-command.txt", _server_process(target, argv, step)
            )
            if found is not None:
                await _add_server_process(archive, target, python, name, server.pid, found)
        url = f"http://127.0.0.1:{port}/metrics"
        get = [python, "-c", _GET, url, f"{min(step, 10.0):g}", str(PAGE_BYTES)]
        read = _command(target, get, step, max_bytes=min(archive.room(), PAGE_BYTES))
        got = await _within(archive, target.budget, f"{name}-metrics.prom", read)
        if got is not None:
            text, cut = got
            archive.add(
                f"{name}-metrics.prom", text, f"GET {url} on the target{_cut_note(text, cut)}"
            )


async def _server_process(
    target: _Deadlined, argv: Sequence[str], timeout: float
) -> dict[str, Any]:
    text, _ = await _command(target, argv, timeout)
    found: dict[str, Any] = untrusted.loads(text)
    return found


async def _add_server_process(
    archive: BundleArchive,
    target: _Deadlined,
    python: str,
    name: str,
    pid: int,
    found: Mapping[str, Any],
) -> str | None:
    """``NAME-command.txt`` and ``NAME-log.txt`` of the server's process ``found``
    (``_SERVER_PROCESS``'s answer); the log's tail as kept (None: none was)."""
    words = [str(w) for w in found.get("argv", [])]
    archive.learn(secret_values(words))
    about = f"the command line of PID {pid} (/proc/{pid}/cmdline), secret flags masked"
    archive.add(f"{name}-command.txt", mask_command(" ".join(words)) + "\n", about)
    outputs = [o for o in found.get("out", []) if isinstance(o, dict)]
    files = [o for o in outputs if o.get("kind") == "file" and "path" in o]
    if not files:
        said = "; ".join(_output_said(o) for o in outputs) or "not readable"
        archive.missing(f"{name}-log.txt", f"left out: its output is not a file ({said})")
        return None
    log = _LogFile(bytes.fromhex(str(files[0]["path"])), "file", files[0].get("size"))
    if archive.room() < ROOM_MIN:
        archive.missing(f"{name}-log.txt", f"left out: {log.shown}: no room left in the bundle")
        return None
    read = _read_log(target, python, log, archive.room())
    got = await _within(archive, target.budget, f"{name}-log.txt", read, about=f"{log.shown}: ")
    if got is None:
        return None
    archive.add(f"{name}-log.txt", *got)
    text: str = got[0]
    return text


def _output_said(out: Mapping[str, Any]) -> str:
    """``stdout: a pipe``, ``stderr: unreadable: Permission denied``."""
    stream = "stdout" if out.get("fd") == 1 else "stderr" if out.get("fd") == 2 else "output"
    if "error" in out:
        return f"{stream}: unreadable: {out['error']}"
    return f"{stream}: a {out.get('kind', 'special file')}"


async def add_smi(
    archive: BundleArchive, host: HostConfig, target: _Deadlined, step: float
) -> None:
    """``nvidia-smi-q.txt``: the GPUs' health sections."""
    smi = [host.nvidia_smi, "-q", "-d", SMI_SECTIONS]
    read = _command(target, smi, step, max_bytes=archive.room())
    got = await _within(archive, target.budget, "nvidia-smi-q.txt", read)
    if got is not None:
        text, cut = got
        about = f"`{shlex.join(smi)}` on the target{_cut_note(text, cut)}"
        archive.add("nvidia-smi-q.txt", text, about)


async def _kernel_lines(target: _Deadlined, argv: Sequence[str], timeout: float) -> str:
    text, _ = await _command(target, argv, timeout, keep_end=True)  # the newest lines
    kept = [line for line in text.splitlines() if _KERNEL.search(line)][-KERNEL_LINES:]
    return "\n".join(kept) + "\n" if kept else "(no Xid or OOM-killer line in the kernel log)\n"


@dataclass(frozen=True, slots=True)
class _LogFile:
    """One followed log's file on the target: its real name (bytes, for reading it) and
    what the listing found (``kind``, ``size``, or ``error``)."""

    path: bytes
    kind: str | None = None
    size: int | None = None
    error: str | None = None

    @property
    def shown(self) -> str:
        """The name as the index shows it (escaped there: ``printable``)."""
        return self.path.decode("utf-8", "backslashreplace")


async def _add_logs(
    archive: BundleArchive, monitor: HostMonitor, target: _Deadlined, step: float
) -> None:
    """``logs/NN-NAME``: the tail of every file of every followed log (watch_logs, the
    jobs', SGLang's), found on the target now (not only those that sent a line: a log
    with no newline sends none), each read by its real name within the room the bundle
    has left. What is not read is listed with why: no such file, not a regular file,
    unreadable, too large, no answer in the time budget."""
    patterns = [spec["path"] for spec in monitor.workloads.log_specs()]
    if not patterns:
        return
    budget = target.budget
    python = _python(monitor.host, target)
    listing = _list_logs(target, python, patterns, step)
    listed: list[dict[str, Any]] | None = await _within(archive, budget, "logs", listing)
    files: list[_LogFile] = []
    if listed is None:  # no Python there: the configured paths themselves, with `tail`
        files = [_LogFile(p.encode()) for p in patterns if not any(c in p for c in "*?[")]
    else:
        for item in listed:
            pattern = patterns[int(item["n"])]
            if "more" in item:
                archive.missing(
                    f"logs ({pattern})",
                    f"left out: {item['more']} more files match (the newest {LOG_FILES_MAX} "
                    "are read)",
                )
            elif "path" not in item:
                archive.missing(f"logs ({pattern})", f"left out: {item['error']}")
            else:
                files.append(
                    _LogFile(
                        bytes.fromhex(item["path"]),
                        item.get("kind"),
                        item.get("size"),
                        item.get("error"),
                    )
                )
    readable = [log.error is None and log.kind in (None, "file") for log in files]
    for i, log in enumerate(files):
        name = f"logs/{i:02d}-{_file_name(log.shown)}"
        if log.error is not None:
            archive.missing(name, f"left out: {log.shown}: unreadable: {log.error.lower()}")
        elif log.kind not in (None, "file"):
            archive.missing(
                name,
                f"left out: {log.shown} is a {log.kind}, not a regular file (reading it "
                "would wait for a writer, or take what its reader is owed)",
            )
        elif archive.room() < ROOM_MIN:
            archive.missing(
                name,
                f"left out: {log.shown}: too large for what is left of the bundle's "
                f"{archive.total_cap} bytes",
            )
        else:
            reader = python if listed is not None else None
            share = budget.share(sum(readable[i:]), LOG_SHARE_MIN_S)
            read = _read_log(target, reader, log, archive.room(), share)
            got = await _within(archive, share, name, read, about=f"{log.shown}: ")
            if got is not None:
                archive.add(name, *got)


async def _list_logs(
    target: _Deadlined, python: str, patterns: Sequence[str], timeout: float
) -> list[dict[str, Any]]:
    argv = [python, "-c", _LIST_LOGS, str(LOG_FILES_MAX), *patterns]
    result = await target.run(argv, timeout=timeout)
    if result.exit_code is None:
        raise TimeoutError
    if result.exit_code != 0 or result.cut:
        said = _said(result) or f"exited {result.exit_code}"
        raise RuntimeError(f"cannot list the followed logs' files with {python}: {said}")
    # The names come as hex: cleaning the text leaves them as they are, to be read by.
    found: list[dict[str, Any]] = untrusted.loads(result.stdout)
    return found


async def _read_log(
    target: _Deadlined, python: str | None, log: _LogFile, room: int, budget: Budget | None = None
) -> tuple[str, str]:
    """The log's tail, at most ``room`` characters, and what the index says of it.
    ``python``: read by the script (None: no Python on the target, by ``tail -c``);
    ``budget``: the time it may take (the whole bundle's when not given).
    Raises TimeoutError, RuntimeError (said: "unreadable: ...", "not a regular file")."""
    if python is not None:
        argv = [python, "-c", _READ_LOG, log.path.hex(), str(room), str(LOG_TAIL_LINES)]
    else:
        argv = ["tail", "-c", str(room), "--", log.path.decode()]
    left = (budget or target.budget).left()
    result = await target.run(argv, timeout=left, max_bytes=room, keep_end=True)
    if result.exit_code is None:
        raise TimeoutError
    if result.exit_code != 0:
        raise RuntimeError(_said(result) or f"exited {result.exit_code}")
    text = result.stdout
    about = f"the last {LOG_TAIL_LINES} lines of {log.shown}"
    found = re.search(r"gpumon-read (\d+) (\d+)", result.stderr)
    size, start = (int(found[1]), int(found[2])) if found else (log.size, None)
    # Started inside the file with fewer lines than asked: the bytes ran out first.
    capped = result.cut or (bool(start) and text.count("\n") < LOG_TAIL_LINES - 1)
    if capped:
        whole = f"its {size} bytes" if size is not None else "it"
        about += f" (too large: only the last {len(text)} characters of {whole} are here)"
    return text, about


def _file_name(path: str) -> str:
    return re.sub(r"[^\w.-]+", "_", path.strip("/"))[-80:] or "log"


async def _py_spy(
    archive: BundleArchive,
    monitor: HostMonitor,
    incident: Incident,
    target: _Deadlined,
    step: float,
) -> None:
    """``py-spy dump`` of the hung or stalled job's processes, where ``py-spy`` is already
    on the target (never installed)."""
    gpus = {a.gpu for a in incident.alerts if a.gpu is not None}
    job = monitor.host.job(incident.job) if incident.job else None
    if job is not None:
        gpus |= set(job.gpus)
    pids = sorted({p.pid for p in monitor.processes if p.pid is not None and _on(p, gpus, monitor)})
    if not pids:
        archive.missing("py-spy", "no process of the incident's GPUs is visible in the container")
        return
    container = proxmox_container(monitor.host)
    what = "a process of the hung job"
    await py_spy_dumps(archive, target, pids[:8], step, what, container=container)


def proxmox_container(host: HostConfig) -> int | None:
    """The Proxmox CT the host is (its host reachable by the transport), else None (the
    demo's container has no Proxmox host)."""
    return host.container if host.container is not None and host.kind != "demo" else None


async def _py_spy_dump(
    archive: BundleArchive, target: _Deadlined, program: str, pid: int, step: float, on_host: bool
) -> tuple[str, bool, str]:
    """``py-spy dump --native`` (the C/CUDA frames under the Python ones: where a
    collective or a kernel launch waits), else without it where native unwinding fails
    (no libunwind support for the target, a stripped build): the stacks, whether
    native, and the index's note (why native failed, a cut)."""
    base = [program, "dump"]
    room = archive.room()
    try:
        argv = [*base, "--native", "--pid", str(pid)]
        text, cut = await _command(target, argv, step, on_host=on_host, max_bytes=room)
        return text, True, _cut_note(text, cut)
    except RuntimeError as e:
        native_failed = f"; --native failed: {e}"
    argv = [*base, "--pid", str(pid)]
    text, cut = await _command(target, argv, step, on_host=on_host, max_bytes=room)
    return text, False, native_failed + _cut_note(text, cut)


# Where a look for py-spy failed (not "not there"): the index's own line for it says why.
UNANSWERED = "a look for py-spy got no answer: see its line in this index"


async def py_spy_dumps(
    archive: BundleArchive,
    target: _Deadlined,
    pids: Sequence[int],
    step: float,
    what: str,
    say: Callable[[str], None] | None = None,
    *,
    container: int | None = None,
    host_pids: Mapping[int, str] | None = None,
) -> int:
    """``py-spy-PID.txt``: ``py-spy dump --native --pid PID`` (else without ``--native``)
    of each of ``pids`` (``what`` they
    are, for the index), where ``py-spy`` is already on the target (never installed);
    how many were kept. With ``container`` (the target is that Proxmox CT, its host
    reachable): where py-spy is not in it, or fails there (an unprivileged CT forbids
    ptrace), the Proxmox host's py-spy dumps the process by its host PID; the index says
    which side took the stacks. ``host_pids``: processes known only by their host PID
    (another container's, the host's own; host PID -> whose, in words: "CT 201
    jupyter-lab"), dumped by the Proxmox host's py-spy, each as ``py-spy-HOSTPID.txt``."""
    budget = target.budget
    host_pids = host_pids or {}
    if not pids and not host_pids:
        return 0  # nothing to dump (a PID that could not be given is said by the caller)
    here, here_answered = None, True
    if pids:
        here, here_answered = await _which(archive, target, "py-spy", step, on_host=False)
    host, host_answered = None, True
    if (container is not None and pids) or host_pids:
        host, host_answered = await _which(archive, target, "py-spy", step, on_host=True)
    # the target's own PIDs: by its py-spy, else (a CT's) by the Proxmox host's
    reach = here is not None or (container is not None and host is not None)
    if not reach and pids:
        archive.missing("py-spy", _py_spy_absent(container, here_answered and host_answered))
    found: dict[int, int] | None = None  # the CT's PIDs as the host numbers them

    async def dump(pid: int) -> tuple[str, str]:
        nonlocal found
        failed = ""
        if here is not None:
            try:
                text, native, why = await _py_spy_dump(archive, target, here, pid, step, False)
            except RuntimeError as e:
                if host is None:
                    raise
                failed = f"; in the container it failed: {e}"
            else:
                side = "in the container" if container is not None else "on the target"
                return text, f"{_py_spy_words(pid, native)} {side} ({what}{why})"
        assert host is not None and container is not None
        if found is None:
            found = await _host_pids(target, container, pids, step)
        if pid not in found:
            raise RuntimeError(f"CT {container}'s PID {pid} is not found on the Proxmox host")
        whose = f"CT {container}'s PID {pid}{failed}"
        return await _py_spy_on_host(archive, target, host, found[pid], step, whose, what)

    kept = 0
    for pid in pids if reach else ():
        if say is not None:
            say(f"py-spy dump --pid {pid}")
        name = f"py-spy-{pid}.txt"
        got = await _within(archive, budget, name, dump(pid))
        if got is not None:
            kept += archive.add(name, *got)
    got = _host_stacks(archive, target, host, host_pids, step, what, say, host_answered)
    return kept + await got


def _py_spy_absent(container: int | None, answered: bool) -> str:
    """Why no py-spy takes the target's stacks: not there, or a look that got no answer."""
    if not answered:
        return f"the stacks were not taken ({UNANSWERED})"
    where = "on the target" + (" nor on its Proxmox host" if container is not None else "")
    return f"not {where} (gpumon installs nothing there)"


def _py_spy_words(pid: int, native: bool) -> str:
    return f"`py-spy dump {'--native ' if native else ''}--pid {pid}`"


async def _py_spy_on_host(
    archive: BundleArchive,
    target: _Deadlined,
    host: str,
    pid: int,
    step: float,
    whose: str,
    what: str,
) -> tuple[str, str]:
    """The stacks of the host's process ``pid`` by the Proxmox host's py-spy (``host``),
    and the index's line: ``whose`` it is (and why the host took them), ``what``."""
    text, native, why = await _py_spy_dump(archive, target, host, pid, step, True)
    return text, f"{_py_spy_words(pid, native)} on the Proxmox host ({whose}) ({what}{why})"


async def _host_stacks(
    archive: BundleArchive,
    target: _Deadlined,
    host: str | None,
    host_pids: Mapping[int, str],
    step: float,
    what: str,
    say: Callable[[str], None] | None,
    answered: bool,
) -> int:
    """``py-spy-HOSTPID.txt`` of each of ``host_pids`` (``py_spy_dumps``'), by the
    Proxmox host's py-spy (``host``; None: none to use, said for each: not there, or the
    host did not ``answer`` the look for it)."""
    kept = 0
    no_host = "no py-spy was found on the Proxmox host (gpumon installs nothing there)"
    if not answered:
        no_host = f"the Proxmox host did not answer when gpumon looked for it ({UNANSWERED})"
    for pid, whose in host_pids.items():
        name, about = f"py-spy-{pid}.txt", f"{whose}, host PID {pid}"
        if host is None:
            archive.missing(name, f"{about}: not dumped: {no_host}")
            continue
        if say is not None:
            say(f"py-spy dump --pid {pid} on the Proxmox host")
        dump = _py_spy_on_host(archive, target, host, pid, step, about, what)
        got = await _within(archive, target.budget, name, dump, f"{about}: ")
        if got is not None:
            kept += archive.add(name, *got)
    return kept


async def _which(
    archive: BundleArchive, target: _Deadlined, program: str, step: float, *, on_host: bool
) -> tuple[str | None, bool]:
    """Where ``program`` is on the target (or its Proxmox host), None where it is not
    there; and whether the machine answered the look at all (False: it failed or timed
    out, the index says so under ``program``'s name, and "not there" would be a guess)."""
    which = target.run(["sh", "-c", f"command -v {program}"], timeout=step, on_host=on_host)
    side = " (Proxmox host)" if on_host else ""
    result = await _within(archive, target.budget, f"{program}{side}", which)
    if result is None:
        return None, False
    if result.exit_code is None:  # the transport's own timeout: no answer either
        archive.missing(f"{program}{side}", f"no answer within {step:.0f} s: timed out")
        return None, False
    found = result.stdout.strip()
    return (found if result.exit_code == 0 and found else None), True


# A Proxmox CT's PIDs (argv[2:]) as the host numbers them, read on the host: the processes
# whose NSpid ends in one of them and whose cgroup is the CT's (``/lxc/ID/``); JSON.
_HOST_PIDS = """
import json, os, sys
ct, wanted, found = sys.argv[1], set(sys.argv[2:]), {}
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        with open("/proc/%s/status" % entry) as f:
            nspid = next((l.split()[1:] for l in f if l.startswith("NSpid:")), [])
        if len(nspid) < 2 or nspid[-1] not in wanted:
            continue
        with open("/proc/%s/cgroup" % entry) as f:
            if "/lxc/%s/" % ct not in f.read():
                continue
    except OSError:
        continue
    found[nspid[-1]] = int(nspid[0])
print(json.dumps(found))
"""


async def _host_pids(
    target: _Deadlined, container: int, pids: Sequence[int], step: float
) -> dict[int, int]:
    argv = ["python3", "-c", _HOST_PIDS, str(container), *map(str, pids)]
    text, _ = await _command(target, argv, step, on_host=True)
    found: dict[str, int] = untrusted.loads(text)
    return {int(k): int(v) for k, v in found.items()}


def _on(p: GpuProcess, gpus: set[int], monitor: HostMonitor) -> bool:
    """Whether ``p`` is on one of ``gpus`` (indexes): its device files' GPUs, or the GPU
    of the newest sample its driver row names (``GpuRegistry.of_process``)."""
    if gpus & set(p.gpus):
        return True
    latest = monitor.latest
    return latest is not None and any(r.index in gpus for r in latest.gpu_refs.of_process(p))


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
            facts=AlertFacts.from_json(data.get("facts")),  # none in an older recording
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
