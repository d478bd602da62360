"""The gpumon agent: runs on the target machine, standard library only (Python 3.8).

gpumon ships this module and ``protocol`` to the target's Python (inside the container
when one is configured) through ``bootstrap``, which reads exactly their bytes from stdin,
so stdin stays open afterwards: the agent exits within a moment of stdin closing, so a
dropped connection leaves nothing behind.

What it says and hears is ``protocol``: a ``Hello`` first, then ``Gpus`` rounds (rows in
nvidia-smi's CSV shape whatever the source, so the client runs one parser), ``Procs``,
``SmiError``, ``Log`` lines of followed files, ``Kernel`` lines, ``MemoryEvents``,
``Http`` fetches of SGLang ``/metrics`` and ``Note``s, one JSON object per line on stdout;
``SetInterval`` commands on stdin.

gpumon itself imports this module (``gpumon.backends.remote.agent``) for ``RowBatcher``;
nothing here may import outside the standard library.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import protocol
from .hoststats import HostStatsReader
from .logtail import LogTail
from .protocol import AGENT_VERSION, AgentOptions

SMI_TIMEOUT_S = 15.0  # a stuck driver can leave nvidia-smi in D state: never wait forever
BATCH_QUIET_S = 0.15  # rows of one round arrive together; a pause this long ends a round
# Retries after nvidia-smi failed: prompt, so a fixed driver shows data within seconds.
SMI_RETRY_FIRST_S = 0.5
SMI_RETRY_CAP_S = 2.0
# The watchdog: a sampler that gives no usable row (a GPU row, not Xid text or garbage)
# for STALL_ROUNDS of its intervals, at least STALL_MIN_S (10 s before its first row:
# nvidia-smi's start can take seconds without persistence mode), is reported, killed with
# its process group and started again.
STALL_ROUNDS = 4
STALL_MIN_S = 4.0
STALL_FIRST_S = 10.0
ROUND_MAX_LINES = 1024  # a round longer than this is junk: sent on (and counted) as it is
LINE_MAX_BYTES = 64 * 1024  # a longer "line" (no newline in sight) is dropped, and said


class RowBatcher:
    """Groups nvidia-smi loop output into sampling rounds.

    A round ends when a row's GPU index is not greater than the previous row's (the next
    round has started) or when the caller sees a pause (``flush``). Lines that do not
    look like rows (too few columns: Xid text in the loop output) stay in the round,
    so the parser can count them.
    """

    def __init__(self, index_col: int, ncols: int) -> None:
        self.index_col = index_col
        self.ncols = ncols
        self._rows: list[str] = []
        self._last_index: int | None = None

    def feed(self, line: str) -> list[str] | None:
        """Add one line; returns the finished previous round when this line starts a new one."""
        line = line.rstrip("\r\n")
        if not line.strip():
            return None
        index = self._index_of(line)
        done = None
        if index is not None and self._last_index is not None and index <= self._last_index:
            done = self.flush()
        if index is not None:
            self._last_index = index
        if done is None and len(self._rows) >= ROUND_MAX_LINES:
            done = self.flush()  # a flood of junk never ends a round by itself: bounded
        self._rows.append(line)
        return done

    def flush(self) -> list[str] | None:
        rows, self._rows, self._last_index = self._rows, [], None
        return rows or None

    def is_row(self, line: str) -> bool:
        """Whether ``line`` looks like a GPU row (the watchdog's "usable row")."""
        return self._index_of(line.rstrip("\r\n")) is not None

    def _index_of(self, line: str) -> int | None:
        cells = line.split(", ")
        if len(cells) < self.ncols:  # more: a GPU name holding ", " (index comes before it)
            return None
        try:
            return int(cells[self.index_col])
        except ValueError:
            return None


class Output:
    """Thread-safe JSON-lines writer; a closed stdout ends the agent."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, msg: protocol.Message) -> None:
        data = protocol.encode(msg)
        with self._lock:
            try:
                self._stream.write(data)
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                _shutdown(0)


_children: list[subprocess.Popen[bytes]] = []
_children_lock = threading.Lock()


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when the agent dies, even
    by SIGKILL (Linux ``PR_SET_PDEATHSIG``); None where prctl is not to be had."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the agent died before prctl took hold
            os._exit(1)

    return preexec


_PREEXEC = _die_with_parent()


def _spawn(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    # The death signal is tied to the thread that forks: every caller is one of the
    # agent's loops, which live as long as the agent does.
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so _shutdown can take it down
        preexec_fn=_PREEXEC,
    )
    with _children_lock:
        _children.append(proc)
    return proc


def _reap(proc: subprocess.Popen[bytes]) -> None:
    with _children_lock:
        if proc in _children:
            _children.remove(proc)


def _shutdown(code: int) -> None:
    with _children_lock:
        for proc in _children:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
    os._exit(code)


def run_once(argv: Sequence[str], timeout: float = SMI_TIMEOUT_S) -> tuple[int, str]:
    """Run a short command; returns (exit code, combined output). 124 on timeout."""
    try:
        proc = _spawn(argv)
    except OSError as e:
        return 127, f"{argv[0]}: {e.strerror or e}"
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return 124, f"{argv[0]}: no answer within {timeout:.0f} s (killed)"
    finally:
        _reap(proc)


class Agent:
    def __init__(self, options: AgentOptions, out: Output) -> None:
        self.out = out
        self.smi = options.nvidia_smi
        self.fields = list(options.fields)
        self.process_fields = list(options.process_fields)
        self.interval = options.interval
        self.process_interval = options.process_interval
        self.use_nvml = options.nvml
        self.logs = [LogTail(spec) for spec in options.logs]
        self.kernel = options.kernel
        self.http: list[dict[str, Any]] = list(options.http)
        self.log_poll_s = options.log_poll_s
        self.sglang_discover = options.sglang_discover
        self.http_tags: set[str] = set()
        self.wake = threading.Event()  # set when the interval changes
        self.nvml: Any = None

    # --- control -------------------------------------------------------------------
    def handle_command(self, line: str) -> None:
        command = protocol.decode_command(line)
        if command is not None:
            self.interval = min(max(command.seconds, 0.1), 3600.0)
            self.wake.set()

    # --- start ---------------------------------------------------------------------
    def start(self) -> None:
        source = "agent/nvidia-smi"
        note = None
        if self.use_nvml:
            try:
                import pynvml  # type: ignore[import-not-found,unused-ignore]

                pynvml.nvmlInit()
                self.nvml = pynvml
                source = "agent/nvml"
            except Exception as e:  # ImportError, NVMLError_LibraryNotFound, ...
                note = f"NVML not used: {type(e).__name__}: {e}"
        self.out.send(
            protocol.Hello(
                agent=AGENT_VERSION,
                source=source,
                python=sys.version.split()[0],
                hostname=socket.gethostname(),
                pid=os.getpid(),
                note=note,
            )
        )
        gpu_loop = self.nvml_loop if self.nvml is not None else self.smi_loop
        threading.Thread(target=gpu_loop, daemon=True, name="gpus").start()
        threading.Thread(target=self.process_loop, daemon=True, name="procs").start()
        if self.logs or self.kernel:
            threading.Thread(target=self.log_loop, daemon=True, name="logs").start()
        for target in self.http:
            self.start_http(target)
        if self.sglang_discover:
            threading.Thread(target=self.discover_loop, daemon=True, name="discover").start()
        threading.Thread(target=self.host_stats_loop, daemon=True, name="host").start()

    # --- the target's own CPU, memory, load, swap ----------------------------------
    def host_stats_loop(self) -> None:
        """``HostStats`` every interval (its own thread: /proc reads never wait on NVML)."""
        reader = HostStatsReader()
        while True:
            self.out.send(reader.read())
            time.sleep(self.interval)

    # --- nvidia-smi ----------------------------------------------------------------
    def supported_fields(self) -> list[str] | None:
        """Drop fields this nvidia-smi does not know (one unknown field fails the query)."""
        code, text = run_once([self.smi, "--help-query-gpu"])
        if code != 0:
            self.out.send(protocol.SmiError(time.time(), code, text))
            return None
        known = {w.strip('"') for w in text.split() if w.startswith('"') and w.endswith('"')}
        if not known:  # unfamiliar help format: ask for everything and let it fail loudly
            return self.fields
        return [f for f in self.fields if f in known]

    def stall_limit(self, first: bool) -> float:
        """Seconds without a usable row before the watchdog restarts the sampler."""
        return max(STALL_ROUNDS * self.interval, STALL_FIRST_S if first else STALL_MIN_S)

    def smi_loop(self) -> None:
        backoff = SMI_RETRY_FIRST_S
        fields: list[str] | None = None
        while True:
            if fields is None:
                fields = self.supported_fields()
                if fields is None:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, SMI_RETRY_CAP_S)
                    continue
            ms = max(int(self.interval * 1000), 100)
            argv = [self.smi, "--query-gpu=" + ",".join(fields)]
            argv += ["--format=csv,noheader,nounits", "-lms", str(ms)]
            got_rows = self.stream_smi(argv, fields)
            if self.wake.is_set():
                self.wake.clear()
                continue  # interval changed: restart at the new rate at once
            if got_rows:
                backoff = SMI_RETRY_FIRST_S
            time.sleep(backoff)
            backoff = min(backoff * 2, SMI_RETRY_CAP_S)
            fields = None  # the driver may have changed under us: probe again

    def stream_smi(self, argv: list[str], fields: list[str]) -> bool:
        """Run one nvidia-smi loop until it dies, the interval changes, or the watchdog
        sees no usable row for ``stall_limit``; True when it gave a usable row."""
        try:
            proc = _spawn(argv)
        except OSError as e:
            self.out.send(protocol.SmiError(time.time(), 127, str(e)))
            return False
        assert proc.stdout is not None
        batcher = RowBatcher(fields.index("index") if "index" in fields else 1, len(fields))
        fd = proc.stdout.fileno()
        buf = b""
        got_rows = False
        stalled = False
        dropped = 0  # bytes of over-long lines thrown away
        tail: list[str] = []
        last_row = time.monotonic()
        try:
            while not self.wake.is_set():
                if time.monotonic() - last_row > self.stall_limit(first=not got_rows):
                    stalled = True
                    break
                ready, _, _ = select.select([fd], [], [], BATCH_QUIET_S)
                if not ready:
                    rows = batcher.flush()
                    if rows:
                        self.send_rows(fields, rows)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > LINE_MAX_BYTES:  # no newline in sight: never grow without end
                    dropped += len(buf)
                    buf = b""
                for raw in lines:
                    if len(raw) > LINE_MAX_BYTES:
                        dropped += len(raw)
                        continue
                    line = raw.decode("utf-8", "replace")
                    tail = [*tail[-19:], line[:512]]
                    if batcher.is_row(line):
                        got_rows = True
                        last_row = time.monotonic()
                    rows = batcher.feed(line)
                    if rows:
                        self.send_rows(fields, rows)
            rows = batcher.flush()
            if rows and not self.wake.is_set():
                self.send_rows(fields, rows)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            _reap(proc)
        if dropped:
            self.out.send(
                protocol.Note(f"nvidia-smi printed over-long lines: {dropped} bytes dropped")
            )
        if stalled:
            quiet = time.monotonic() - last_row
            self.out.send(
                protocol.SmiError(
                    time.time(),
                    124,
                    f"nvidia-smi gave no usable GPU row for {quiet:.0f} s (stuck, or "
                    "printing something else): killed and started again",
                )
            )
        elif not self.wake.is_set() and not got_rows:
            self.out.send(protocol.SmiError(time.time(), code, "\n".join(tail)))
        return got_rows

    def send_rows(self, fields: list[str], rows: list[str]) -> None:
        self.out.send(protocol.Gpus(time.time(), fields, rows))

    def process_loop(self) -> None:
        while True:
            nvml = self.nvml
            if nvml is not None:
                done, rows = self.nvml_call(functools.partial(nvml_process_rows, nvml))
                if done and isinstance(rows, list):
                    self.out.send(protocol.Procs(time.time(), rows))
            else:
                argv = [self.smi, "--query-compute-apps=" + ",".join(self.process_fields)]
                code, text = run_once([*argv, "--format=csv,noheader,nounits"])
                if code == 0:
                    rows = [ln for ln in text.splitlines() if ln.strip()]
                    self.out.send(protocol.Procs(time.time(), rows))
            time.sleep(max(self.process_interval, self.interval))

    # --- logs, kernel log, cgroup, HTTP ----------------------------------------------
    def log_loop(self) -> None:
        kmsg = open_kmsg(self.out) if self.kernel else None
        events = "/sys/fs/cgroup/memory.events"
        last_events = None
        while True:
            started = time.monotonic()
            for tail in self.logs:
                for msg in tail.poll():
                    self.out.send(msg)
                for problem in tail.take_problems():
                    self.out.send(problem)
            if kmsg is not None:
                lines = read_kmsg(kmsg)
                if lines:
                    self.out.send(protocol.Kernel(time.time(), lines))
            if self.kernel:
                try:
                    with open(events) as f:
                        text = f.read()
                except OSError:
                    text = None
                if text is not None and text != last_events:
                    last_events = text
                    self.out.send(protocol.MemoryEvents(time.time(), text))
            time.sleep(max(self.log_poll_s - (time.monotonic() - started), 0.01))

    def start_http(self, target: dict[str, Any]) -> None:
        if target["tag"] not in self.http_tags:
            self.http_tags.add(target["tag"])
            threading.Thread(target=self.http_loop, args=(target,), daemon=True).start()

    def discover_loop(self) -> None:
        """Find SGLang servers from their command lines (``sglang.launch_server --port N``)."""
        template = self.http[0] if self.http else {"filter": None}
        while True:
            for port in sglang_ports():
                self.start_http(
                    {
                        "url": f"http://127.0.0.1:{port}/metrics",
                        "tag": f"sglang:{port}",
                        "filter": template.get("filter"),
                    }
                )
            time.sleep(10.0)

    def http_loop(self, target: dict[str, Any]) -> None:
        import re
        import urllib.error
        import urllib.request

        wanted = re.compile(target["filter"]) if target.get("filter") else None
        url, tag = str(target["url"]), str(target["tag"])
        while True:
            started = time.monotonic()
            t = time.time()
            try:
                with urllib.request.urlopen(url, timeout=2.0) as resp:
                    body = resp.read(8 << 20).decode("utf-8", "replace")
                    status = resp.status
            except urllib.error.HTTPError as e:
                msg = protocol.Http(tag, t, e.code, error=f"HTTP {e.code}")
            except Exception as e:  # refused, timeout, reset: the server is down
                msg = protocol.Http(tag, t, None, error=f"{type(e).__name__}: {e}")
            else:
                if wanted is not None:  # exposition text ends in a newline: keep it so
                    body = "".join(ln + "\n" for ln in body.splitlines() if wanted.match(ln))
                msg = protocol.Http(tag, t, status, body)
            self.out.send(msg)
            time.sleep(max(self.interval - (time.monotonic() - started), 0.05))

    # --- NVML ----------------------------------------------------------------------
    def nvml_call(self, call: Callable[[], Any]) -> tuple[bool, Any]:
        """``call()`` (NVML) in a thread of its own, waited for ``stall_limit``: a hung
        driver call must not freeze the agent. (False, None) when it did not return: it
        is said, NVML is given up for nvidia-smi (a process the watchdog can kill), and
        the thread is left to its fate. An exception is returned as the value."""
        box: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append(call())
            except Exception as e:  # NVMLError from a driver in trouble
                box.append(e)
            done.set()

        threading.Thread(target=run, daemon=True, name="nvml-call").start()
        limit = self.stall_limit(first=False)
        if done.wait(limit):
            return True, box[0]
        if self.nvml is not None:
            self.nvml = None
            self.out.send(
                protocol.SmiError(
                    time.time(),
                    124,
                    f"NVML did not answer within {limit:.0f} s (a hung driver call): "
                    "reading nvidia-smi instead",
                )
            )
        return False, None

    def nvml_loop(self) -> None:
        while self.nvml is not None:
            nvml = self.nvml
            started = time.monotonic()
            done, rows = self.nvml_call(functools.partial(nvml_gpu_rows, nvml, self.fields))
            if not done:
                break
            if isinstance(rows, Exception):
                self.out.send(protocol.SmiError(time.time(), 1, f"NVML: {rows}"))
            else:
                self.send_rows(self.fields, rows)
            delay = self.interval - (time.monotonic() - started)
            if self.wake.wait(max(delay, 0.0)):
                self.wake.clear()
        self.smi_loop()


def _nvml_text(nvml: Any, call: Callable[[], Any], fmt: Callable[[Any], str]) -> str:
    """One cell, spelled the way nvidia-smi spells it, including its error tokens."""
    try:
        return fmt(call())
    except nvml.NVMLError as e:
        if isinstance(e, nvml.NVMLError_NotSupported):
            return "[N/A]"
        if isinstance(e, nvml.NVMLError_ResetRequired):
            return "[GPU requires reset]"  # NVML says "restart", nvidia-smi says "reset"
        return f"[{e}]"
    except Exception as e:  # an older binding without a function: absent, not fatal
        return f"[{type(e).__name__}]"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_gpu_rows(nvml: Any, fields: Sequence[str]) -> list[str]:
    """One round of rows in nvidia-smi's csv,noheader,nounits shape, from NVML."""
    rows: list[str] = []
    now = time.time()
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as e:
            rows.append(", ".join([stamp, str(i)] + [f"[{e}]"] * (len(fields) - 2)))
            continue
        cells = [_nvml_field(nvml, h, i, f, stamp) for f in fields]
        rows.append(", ".join(cells))
    return rows


def _memory(nvml: Any, h: Any) -> Any:
    try:
        return nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    except Exception:
        return nvml.nvmlDeviceGetMemoryInfo(h)


def _mib(v: int) -> str:
    return str(-(-v // (1024 * 1024)))  # nvidia-smi rounds each cell up


def _nvml_field(nvml: Any, h: Any, i: int, field: str, stamp: str) -> str:
    t = _nvml_text
    if field == "timestamp":
        return stamp
    if field == "index":
        return str(i)
    if field == "uuid":
        return t(nvml, lambda: nvml.nvmlDeviceGetUUID(h), _s)
    if field == "name":
        return t(nvml, lambda: nvml.nvmlDeviceGetName(h), _s)
    if field == "pci.bus_id":
        return t(nvml, lambda: nvml.nvmlDeviceGetPciInfo(h).busId, _s)
    if field == "pstate":
        return t(nvml, lambda: nvml.nvmlDeviceGetPerformanceState(h), lambda v: f"P{v}")
    if field == "temperature.gpu":
        return t(nvml, lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU), str)
    if field == "temperature.memory":
        return "N/A"  # NVML field 82 is HBM-only; nvidia-smi prints bare N/A on GDDR
    if field in ("utilization.gpu", "utilization.memory"):
        attr = "gpu" if field == "utilization.gpu" else "memory"
        return t(nvml, lambda: getattr(nvml.nvmlDeviceGetUtilizationRates(h), attr), str)
    if field.startswith("memory."):
        attr = field.split(".", 1)[1]
        return t(nvml, lambda: getattr(_memory(nvml, h), attr), _mib)
    if field == "power.draw":
        return t(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(h), lambda v: f"{v / 1000:.2f}")
    if field == "power.limit":
        return t(nvml, lambda: nvml.nvmlDeviceGetPowerManagementLimit(h), _watts)
    if field == "enforced.power.limit":
        return t(nvml, lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h), _watts)
    if field == "clocks.current.sm":
        return t(nvml, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM), str)
    if field == "clocks.current.memory":
        return t(nvml, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM), str)
    if field == "clocks.max.sm":
        return t(nvml, lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM), str)
    if field == "fan.speed":
        return t(nvml, lambda: nvml.nvmlDeviceGetFanSpeed(h), str)
    if field == "clocks_event_reasons.active":
        fn = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return t(nvml, lambda: fn(h), lambda v: f"0x{v:016x}")
    if field.startswith("ecc.errors."):
        kind = (
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            if ".uncorrected." in field
            else nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        )
        return t(
            nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(h, kind, nvml.NVML_VOLATILE_ECC), str
        )
    if field == "persistence_mode":
        return t(
            nvml,
            lambda: nvml.nvmlDeviceGetPersistenceMode(h),
            lambda v: "Enabled" if v else "Disabled",
        )
    if field == "compute_mode":
        names = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
        return t(nvml, lambda: nvml.nvmlDeviceGetComputeMode(h), lambda v: names.get(v, str(v)))
    return "[N/A]"  # a field NVML has no call for here: absent, like nvidia-smi's [N/A]


def _watts(mw: int) -> str:
    return f"{mw / 1000:.2f}"


def nvml_process_rows(nvml: Any) -> list[str]:
    """Compute processes as ``pid, process_name, used_memory, gpu_uuid, gpu_bus_id`` rows."""
    rows: list[str] = []
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError:
        return rows
    for i in range(count):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _s(nvml.nvmlDeviceGetUUID(h))
            bus = _s(nvml.nvmlDeviceGetPciInfo(h).busId)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
        except nvml.NVMLError:
            continue
        for p in procs:
            mem = "[N/A]" if p.usedGpuMemory is None else _mib(p.usedGpuMemory)
            rows.append(f"{p.pid}, {_process_name(p.pid)}, {mem}, {uuid}, {bus}")
    return rows


def _process_name(pid: int) -> str:
    # Inside an unprivileged container NVML returns host PIDs; like nvidia-smi we can only
    # look in our own /proc, and say [Not Found] when the PID is not there.
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode("utf-8", "replace")
    except OSError:
        return "[Not Found]"
    return argv0.replace(",", "?") or "[Not Found]"


def sglang_ports() -> list[int]:
    """Ports of SGLang servers running here, from /proc/*/cmdline (30000 when not given)."""
    ports = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if not any("sglang.launch_server" in a for a in argv):
            continue
        port = 30000
        for i, a in enumerate(argv):
            if a == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
                port = int(argv[i + 1])
            elif a.startswith("--port=") and a[7:].isdigit():
                port = int(a[7:])
        ports.add(port)
    return sorted(ports)


KMSG_WANTED = ("NVRM: Xid", "Out of memory", "oom-kill", "Killed process", "oom_reaper")


def open_kmsg(out: Output) -> int | None:
    """/dev/kmsg opened at its end, or None (said once: unprivileged containers can't)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(fd, 0, os.SEEK_END)
        return fd
    except OSError as e:
        out.send(
            protocol.Note(
                f"kernel log not readable here ({e.strerror or e}): Xid and host "
                "OOM-killer lines need gpumon on the Proxmox host itself"
            )
        )
        return None


def read_kmsg(fd: int) -> list[str]:
    lines = []
    while True:
        try:
            record = os.read(fd, 8192)
        except BlockingIOError:
            break
        except OSError:  # EPIPE: records were overwritten before we read them
            continue
        if not record:
            break
        text = record.decode("utf-8", "replace").split(";", 1)[-1].split("\n", 1)[0]
        if any(w in text for w in KMSG_WANTED):
            lines.append(text)
    return lines


def main(argv: Sequence[str]) -> None:
    """Run until stdin closes. ``argv[1]``: the ``AgentOptions`` JSON (see ``bootstrap``)."""
    raw = json.loads(argv[1]) if len(argv) > 1 else {}
    options = AgentOptions.from_wire(raw if isinstance(raw, dict) else {})
    signal.signal(signal.SIGTERM, lambda *_: _shutdown(0))
    signal.signal(signal.SIGHUP, lambda *_: _shutdown(0))
    out = Output(sys.stdout)
    agent = Agent(options, out)
    agent.start()
    # Main thread: read commands until stdin closes, which means the client is gone.
    for line in sys.stdin:
        agent.handle_command(line)
    _shutdown(0)
