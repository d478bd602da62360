"""The gpumon agent: runs on the target machine, standard library only (Python 3.8).

gpumon ships this module and ``protocol`` to the target's Python (inside the container
when one is configured) through ``bootstrap``, which reads exactly their bytes from stdin,
so stdin stays open afterwards: the agent exits within a moment of stdin closing, so a
dropped connection leaves nothing behind.

What it says and hears is ``protocol``: a ``Hello`` first, then ``Gpus`` rounds (rows in
nvidia-smi's CSV shape whatever the source, so the client runs one parser), ``Procs``
(with ``Mig``: a MIG GPU's instances, ``mig``),
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
import re
import select
import signal
import stat
import sys
import threading
import time
import types

from . import mig, procfacts, protocol
from .fetch import Connection, FetchError, split_url
from .hoststats import HostStatsReader
from .logtail import LogTail, Waker
from .protocol import AGENT_VERSION, AgentOptions

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    # subprocess (with locale, selectors, warnings: ~0.8 MiB of RSS) is imported only when
    # the agent first starts a child: with NVML it never does.
    import subprocess
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

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
LINE_MAX_BYTES = 64 * 1024  # a longer line is kept as its ends (``LongLine``), never whole
LINE_END_BYTES = 4096  # what a LongLine keeps of each end: the cells before and after a name
NAME_MAX_CHARS = 96  # a GPU name cut from a long line: NVML's own bound (its name buffer)
THREAD_RESTART_S = 5.0  # a thread that died of an exception runs again after this long
# A scrape of a /metrics page (busy SGLang: ~100 KB), and of the server info (~40 KB).
PAGE_TIMEOUT_S, PAGE_MAX_BYTES = 2.0, 8 << 20
INFO_TIMEOUT_S, INFO_MAX_BYTES = 5.0, 1 << 20
# A field's name on drivers before the one that renamed it (``parsers.nvidia_smi._OLD_NAMES``)
OLD_FIELD_NAMES = {"pcie.link.gen.gpucurrent": "pcie.link.gen.current"}
DEVICE_RESCAN_S = 60.0  # who holds /dev/nvidiaN: every /proc/*/fd read again at most this late


def _where(e: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``e``'s traceback."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name}"


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

    @property
    def pending(self) -> bool:
        """Lines of an unfinished round are held."""
        return bool(self._rows)

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


class RoundPacer:
    """At most one round per interval goes to the monitor: a sampler that gives rounds
    faster (a flood of rows, each its own round) has each round held until an interval
    has passed since the last one sent, and a newer round replaces the held one, so a
    flood costs the monitor one sample per interval, the newest. ``dropped``: rounds
    replaced before they were sent. Times are the caller's clock (``time.monotonic``)."""

    def __init__(self) -> None:
        self.sent_at: float | None = None
        self.held: list[str] | None = None
        self.dropped = 0

    def offer(self, rows: list[str], now: float, interval: float) -> list[str] | None:
        """A finished round: returned to send now, or held (replacing an older one)."""
        if self.held is not None:
            self.dropped += 1
        self.held = rows
        return self.due(now, interval)

    def due(self, now: float, interval: float) -> list[str] | None:
        """The held round, once an interval has passed since the last one sent."""
        if self.held is None or self.wait(now, interval) > 0:
            return None
        rows, self.held = self.held, None
        self.sent_at = now
        return rows

    def wait(self, now: float, interval: float) -> float:
        """Seconds until a round may be sent (0: at once)."""
        return 0.0 if self.sent_at is None else max(self.sent_at + interval - now, 0.0)


def rounds_dropped_note(interval: float, dropped: int | None = None) -> str:
    """Said when the first round is dropped, and with the total when the loop ends."""
    said = f"nvidia-smi gives rounds faster than every {interval:g} s: the newest is sent"
    return said if dropped is None else f"{said}, {dropped} older ones were dropped"


class LongLine:
    """A line over ``LINE_MAX_BYTES``, as its first and last ``LINE_END_BYTES`` and its
    size: enough to give back a GPU row whose name is what is long (``shorten_row``)
    without ever holding the whole line."""

    def __init__(self, data: bytes) -> None:
        self.head = data[:LINE_END_BYTES]
        self.tail = data[-LINE_END_BYTES:]
        self.size = len(data)

    def add(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-LINE_END_BYTES:]
        self.size += len(data)


class LineSplitter:
    """nvidia-smi's output as lines: bytes, or a ``LongLine`` for one over the bound."""

    def __init__(self) -> None:
        self.buf = b""
        self.long: LongLine | None = None  # a long line under way (no newline yet)

    def feed(self, chunk: bytes) -> list[bytes | LongLine]:
        *lines, rest = (self.buf + chunk).split(b"\n")
        out: list[bytes | LongLine] = []
        if self.long is not None:
            if not lines:
                self.long.add(rest)
                self.buf = b""
                return out
            self.long.add(lines.pop(0))
            out.append(self.long)
            self.long = None
        out += [LongLine(raw) if len(raw) > LINE_MAX_BYTES else raw for raw in lines]
        if len(rest) > LINE_MAX_BYTES:  # no newline in sight: never grow without end
            self.long, rest = LongLine(rest), b""
        self.buf = rest
        return out


def shorten_row(line: LongLine, fields: Sequence[str]) -> tuple[str, str] | None:
    """A long line as a GPU row with its name cut to ``NAME_MAX_CHARS`` (and ``...``),
    with the row's index cell; None when it is not a row whose name is what is long (the
    cells before the name in its head, the ones after in its tail)."""
    if "name" not in fields or "index" not in fields:
        return None
    at, after = fields.index("name"), len(fields) - fields.index("name") - 1
    head = line.head.decode("utf-8", "replace").split(", ", at)
    tail = line.tail.decode("utf-8", "replace").rstrip("\r").rsplit(", ", after)
    if len(head) <= at or len(tail) <= after or fields.index("index") > at:
        return None
    name = cut_name(head[at])
    return ", ".join([*head[:at], name, *tail[1:]]), head[fields.index("index")].strip()


def cut_name(text: str) -> str:
    """``text`` as a GPU row keeps a name: whole up to ``NAME_MAX_CHARS``, else its first
    ``NAME_MAX_CHARS`` characters and ``...`` (a name cut once stays as it is)."""
    if len(text) <= NAME_MAX_CHARS or (len(text) <= NAME_MAX_CHARS + 3 and text.endswith("...")):
        return text
    return text[:NAME_MAX_CHARS].rstrip() + "..."


def long_line_note(size: int) -> str:
    """What is said when a line over the bound is no GPU row with a long name."""
    return (
        f"nvidia-smi printed a line of {size:,} bytes, over gpumon's "
        f"{LINE_MAX_BYTES >> 10} KiB line bound, that is not a GPU row: dropped"
    )


def name_cut_note(index: str, size: int) -> str:
    """What is said (once per GPU) when ``shorten_row`` kept a GPU."""
    return (
        f"GPU {index}: nvidia-smi printed a line of {size:,} bytes, over gpumon's "
        f"{LINE_MAX_BYTES >> 10} KiB line bound: the GPU is kept, its name cut to "
        f"{NAME_MAX_CHARS} characters"
    )


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
    import subprocess

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


# Free heap pages go back to the system this often (``malloc_trim``, from the host-stats
# loop): the bodies of 8 SGLang scrapes a second leave the heap ~1 MiB larger than what it
# holds, measured (bench_agent nvml+work: 16.3 -> 15.2 MiB).
TRIM_EVERY_S = 10.0
_trim: list[Any] = []  # [glibc's malloc_trim] or [None] where there is none, once looked up


def malloc_trim() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``: start-up
    leaves ~1 MiB of them); nothing where the C library has no such call (musl)."""
    if not _trim:
        try:
            import ctypes

            _trim.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):
            _trim.append(None)
    if _trim[0] is not None:
        _trim[0](0)


M_ARENA_MAX = -8  # glibc's mallopt parameter


def one_malloc_arena() -> None:
    """One malloc arena for all the agent's threads (glibc's ``mallopt(M_ARENA_MAX, 1)``,
    before any thread starts): glibc gives each thread that allocates its own arena,
    and with 8 SGLang servers (a thread each) they hold ~0.3 MiB more, measured; the
    threads allocate little and seldom, so one lock costs nothing. Nothing where the C
    library has no such call (musl)."""
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        pass


def run_once(argv: Sequence[str], timeout: float = SMI_TIMEOUT_S) -> tuple[int, str]:
    """Run a short command; returns (exit code, combined output). 124 on timeout."""
    import subprocess

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


# How import_nvml found pynvml (said in the Hello's note).
FOUND_SITE = "with site processing"
FOUND_NO_SITE = "without site processing: site-packages, sitecustomize"
FOUND_FULL_SITE = "only through full site processing (.pth files)"


def _site_packages() -> list[str]:
    """This interpreter's site-packages as ``site`` would add them: the venv's in a venv.
    Under ``-S`` before 3.11 ``sys.prefix`` is the base interpreter's (``site.venv`` is
    what moves it), so the venv is found the way ``site.venv`` finds it: a
    ``pyvenv.cfg`` beside the executable or one level up."""
    import site  # with -S importing site does not run site.main()

    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    for conf in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(exe_dir, "..", "pyvenv.cfg")):
        if os.path.isfile(conf):
            return site.getsitepackages([os.path.dirname(exe_dir)])
    return site.getsitepackages()


def _real_ctypes_util() -> Any:
    """The real ``ctypes.util``, imported now if the stand-in is what stands there."""
    import ctypes

    stand_in = sys.modules.get("ctypes.util")
    if isinstance(stand_in, _CtypesUtilStandIn):
        del sys.modules["ctypes.util"]
        if getattr(ctypes, "util", None) is stand_in:
            delattr(ctypes, "util")
    __import__("ctypes.util")
    return sys.modules["ctypes.util"]


def _find_library(name: str) -> str | None:
    """``ctypes.util.find_library``, the real one imported at the first call."""
    found: str | None = _real_ctypes_util().find_library(name)
    return found


class _CtypesUtilStandIn(types.ModuleType):
    """``ctypes.util`` while pynvml is imported: ``find_library`` and any other name
    imports the real module when first used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # what the import system asks of any module
            raise AttributeError(name)
        return getattr(_real_ctypes_util(), name)


@contextlib.contextmanager
def _lazy_ctypes_util() -> Iterator[None]:
    """pynvml does ``from ctypes.util import find_library`` and on Linux never calls it
    (nvidia-ml-py 11.x-13.x: ``CDLL("libnvidia-ml.so.1")``); ``ctypes.util`` imports
    shutil, bz2, lzma, zlib, tempfile, random and subprocess: ~1 MiB of the agent's RSS,
    measured, for nothing. Inside this block ``ctypes.util`` is a stand-in whose
    ``find_library`` (and any other name) imports the real module at its first use; after
    it the stand-in leaves ``sys.modules``, so a later ``import ctypes.util`` is the real
    one. Nothing changes where something imported ``ctypes.util`` before."""
    import ctypes

    if "ctypes.util" in sys.modules:
        yield
        return
    stand_in = _CtypesUtilStandIn("ctypes.util", "stands in for ctypes.util (gpumon agent)")
    stand_in.__dict__["find_library"] = _find_library
    sys.modules["ctypes.util"] = stand_in
    setattr(ctypes, "util", stand_in)  # noqa: B010  (`import ctypes.util` reads it there)
    try:
        yield
    finally:
        if sys.modules.get("ctypes.util") is stand_in:
            del sys.modules["ctypes.util"]
        if getattr(ctypes, "util", None) is stand_in:
            delattr(ctypes, "util")


def import_nvml() -> tuple[Any, str]:
    """pynvml, and how it was found (``_import_nvml``), without ``ctypes.util``
    (``_lazy_ctypes_util``)."""
    with _lazy_ctypes_util():
        return _import_nvml()


def _import_nvml() -> tuple[Any, str]:
    """pynvml, and how it was found. The agent runs with ``-S``: no site processing at
    start-up, so a venv's ``.pth`` files (which import pathlib, re, urllib, certifi...)
    cost the target nothing. NVML needs only site-packages on ``sys.path`` and
    ``sitecustomize`` run as site runs it (an admin's NVML set-up; the benches' NVML
    shim). Where that does not find pynvml (a venv with system site packages, a ``.pth``
    path), the full ``site.main()`` runs and the import is tried again, so what was found
    before ``-S`` still is. Raises ImportError when nothing finds it."""
    if not sys.flags.no_site:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return pynvml, FOUND_SITE
    import site

    for directory in _site_packages():
        if directory not in sys.path and os.path.isdir(directory):
            sys.path.append(directory)
    site.execsitecustomize()
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore,no-redef]

        return pynvml, FOUND_NO_SITE
    except ImportError:
        pass
    site.main()
    import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore,no-redef]

    return pynvml, FOUND_FULL_SITE


_nvml_opened: list[Any] = []  # open_nvml's one outcome: (pynvml, found) or its Exception


def open_nvml() -> tuple[Any, str]:
    """``import_nvml()`` and ``nvmlInit()``, done once: pynvml and how it was found.
    Raises what they raised (ImportError, NVMLError...), on every call."""
    if not _nvml_opened:
        try:
            pynvml, found = import_nvml()
            pynvml.nvmlInit()
            _nvml_opened.append((pynvml, found))
        except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_*: said, never fatal
            _nvml_opened.append(e)
    opened = _nvml_opened[0]
    if isinstance(opened, Exception):
        raise opened
    return opened  # type: ignore[no-any-return]


def prepare() -> None:
    """The start's work that no option changes, done by ``transport.prestart``'s loader
    before the options arrive (the agent then starts while gpumon is still importing):
    NVML opened, which ``Agent.start`` then finds done (a failure is said there)."""
    with contextlib.suppress(Exception):
        open_nvml()


class NvmlWorker:
    """One long-lived thread that makes the agent's NVML calls, one at a time (a thread
    per call would be a thread start every sample). ``call`` waits for the answer at most
    ``limit`` seconds; a call that does not return by then leaves the worker stuck for
    good: every later call answers (False, None) at once, and the thread is abandoned
    (a daemon: it never holds up the agent's exit)."""

    def __init__(self) -> None:
        self._turn = threading.Lock()  # callers (the gpus and procs loops) take turns
        self._asked = threading.Event()
        self._answered = threading.Event()
        self._job: Callable[[], Any] | None = None
        self._answer: Any = None
        self._thread: threading.Thread | None = None
        self.stuck = False

    def call(self, job: Callable[[], Any], limit: float) -> tuple[bool, Any]:
        """(True, ``job()`` or the Exception it raised), or (False, None): no answer."""
        if not self._turn.acquire(timeout=limit):
            return False, None  # the caller before us is waiting on a hung call
        try:
            if self.stuck:
                return False, None
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True, name="nvml")
                self._thread.start()
            self._answered.clear()
            self._job = job
            self._asked.set()
            if not self._answered.wait(limit):
                self.stuck = True
                return False, None
            answer, self._answer = self._answer, None
            return True, answer
        finally:
            self._turn.release()

    def _serve(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            job, self._job = self._job, None
            if job is None:
                continue
            try:
                self._answer = job()
            except Exception as e:  # noqa: BLE001 - NVMLError from a driver in trouble
                self._answer = e
            self._answered.set()


class Agent:
    def __init__(self, options: AgentOptions, out: Output) -> None:
        self.out = out
        self.smi = options.nvidia_smi
        self.fields = list(options.fields)
        self.process_fields = list(options.process_fields)
        self.interval = options.interval
        self.process_interval = options.process_interval
        self.process_fallback_s = options.process_fallback_s
        self.procs_due = threading.Event()  # GPU memory changed since the last process poll
        self.gpu_memory: tuple[str, ...] | None = None  # memory_key of the latest round
        self.polled_memory: tuple[str, ...] | None = None  # ... as the last poll began
        self.use_nvml = options.nvml
        self.logs = [LogTail(spec) for spec in options.logs]
        self.kernel = options.kernel
        self.kmsg = options.kmsg
        self.http: list[dict[str, Any]] = list(options.http)
        self.log_poll_s = options.log_poll_s
        self.sglang_discover = options.sglang_discover
        self.vllm_discover = options.vllm_discover
        self.proc = options.proc
        self.vllm_filter = options.vllm_filter
        self.http_tags: set[str] = set()
        self.http_lock = threading.Lock()
        self.http_targets: list[dict[str, Any]] = []  # every target scraped, in order
        self.http_started = False
        self.http_wake_r = self.http_wake_w = -1  # a byte: a new target (the HTTP thread's)
        self.wake = threading.Event()  # set when the interval changes
        # ... and a byte in this pipe then, so the nvidia-smi loop's select wakes for it
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.nvml: Any = None
        # scan /proc/*/fd: decided at the first poll where the options allow it
        self.device_files: bool | None = None if options.device_files else False
        self.device_holders: dict[int, list[int]] | None = None  # the last scan's
        self.device_scanned = 0.0
        self.device_driver_pids: set[str] | None = None  # the driver's PIDs at that scan
        self.minors_for: tuple[str, ...] = ()  # the GPUs (index, bus id) minors were read for
        self.trimmed = False  # malloc_trim after the first sample
        self.names_cut: set[str] = set()  # GPUs whose long name was cut (said once each)
        self.nvml_worker = NvmlWorker()
        self.nvml_static = NvmlStatic()  # the GPUs' identity cells, read once
        self.mig_indexes: tuple[str, ...] = ()  # nvidia-smi's GPUs in MIG mode (their rows')
        self.mig_sent = False  # the last Mig message named a GPU in MIG mode
        self.usage_seen: dict[str, int] = {}  # GPU UUID -> newest process sample read (us)
        self.pmon_failed = False
        self.cpu_clock = procfacts.CpuClock()  # CPU % between two process polls

    # --- control -------------------------------------------------------------------
    def handle_command(self, line: str) -> None:
        command = protocol.decode_command(line)
        if isinstance(command, protocol.Probe):
            name = f"probe {command.tag}"
            threading.Thread(target=self.probe, args=(command,), name=name, daemon=True).start()
        elif command is not None:
            self.interval = min(max(command.seconds, 0.1), 3600.0)
            self.wake.set()
            with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
                os.write(self.wake_w, b"!")

    def probe(self, command: protocol.Probe) -> None:
        """One GET of ``command.url`` on its own connection (a hung server holds it for
        its own health timeout, 20 s for SGLang): the answer, or None and why."""
        status, error = None, None
        try:
            host, port, path = split_url(command.url)
            conn = Connection(host, port, keep_alive=False)
            try:
                status = conn.get(path, command.timeout, 4096)[0]
            finally:
                conn.close()
        except (FetchError, OSError) as e:
            error = str(e) or type(e).__name__
        self.out.send(protocol.Http(command.tag, time.time(), status, "", error))

    # --- start ---------------------------------------------------------------------
    def start(self) -> None:
        self.hello()
        self.spawn("gpus", lambda: self.nvml_loop() if self.nvml is not None else self.smi_loop())
        self.spawn("procs", self.process_loop)
        if self.logs or self.kernel:
            self.spawn("logs", self.log_loop)
        for target in self.http:
            self.start_http(target)
        if self.sglang_discover or self.vllm_discover:
            self.spawn("discover", self.discover_loop)
        self.spawn("host", self.host_stats_loop)

    def one_round(self) -> bool:
        """One round of every part in the caller's thread, no loop started: the Hello,
        the GPUs, the process list, the host's load, the logs' and discovery's first
        rounds. ``gpumon snapshot local`` runs it in its own process (``monitor.oneshot``):
        the same reads and messages as ``start``'s loops send first. False when a part
        needs more than one round (an HTTP target to scrape, a server found: its rates
        take two scrapes) or a part raised (said as its thread's death), which only the
        running agent gives."""
        self.hello()
        # each part as its loop's thread runs it: an exception is said as that thread's
        # death, and the round is not the answer (the agent's process retries the part)
        parts: list[tuple[str, Callable[[], Any]]] = [
            ("gpus", self.gpu_round),
            ("procs", self.poll_processes),
            ("host", lambda: self.out.send(HostStatsReader().read())),
        ]
        logs = LogRounds(self) if self.logs or self.kernel else None
        if logs is not None:
            parts.append(("logs", logs.round))
        found: list[dict[str, Any]] = []
        if self.sglang_discover or self.vllm_discover:
            parts.append(("discover", lambda: self.discover_round({}, True, found.append)))
        died = [name for name, part in parts if self.guarded(name, part) is not None]
        if logs is not None:
            logs.close()
        for fd in (self.wake_r, self.wake_w):  # no loop will wait on them
            with contextlib.suppress(OSError):
                os.close(fd)
        return not died and not self.http and not found

    def hello(self) -> None:
        """NVML opened where asked for, and the ``Hello`` that says what the samples are."""
        source = "agent/nvidia-smi"
        note = None
        if self.use_nvml:
            try:
                pynvml, found = open_nvml()
                self.nvml = pynvml
                source = "agent/nvml"
                note = f"NVML: pynvml {getattr(pynvml, '__file__', '?')}, found {found}"
            except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, ...
                note = f"NVML not used: {type(e).__name__}: {e}"
        self.out.send(
            protocol.Hello(
                agent=AGENT_VERSION,
                source=source,
                python=sys.version.split()[0],
                hostname=os.uname().nodename,  # gethostname(); socket is not imported
                pid=os.getpid(),
                note=note,
            )
        )

    def spawn(self, name: str, loop: Callable[[], Any]) -> None:
        """Run ``loop`` in a daemon thread that says its own death (``ThreadDied``, once
        per distinct error) and runs it again after ``THREAD_RESTART_S``: a bug or an
        exception nobody expected (pynvml 13's NVMLLibraryMismatchError is not an
        NVMLError) never leaves a part of the agent silently gone."""

        def guarded() -> None:
            said = None
            while True:
                said = self.guarded(name, loop, said)
                if said is None:
                    return  # a loop that ends by design (none does today)
                time.sleep(THREAD_RESTART_S)

        threading.Thread(target=guarded, daemon=True, name=name).start()

    def guarded(self, name: str, part: Callable[[], Any], said: str | None = None) -> str | None:
        """``part()``; an exception is said as the death of the thread ``name`` runs in
        (``ThreadDied``, unless it is ``said`` already) and returned as its text."""
        try:
            part()
            return None
        except Exception as e:  # noqa: BLE001 - said once; the caller goes on
            error = f"{type(e).__name__}: {e}"
            if error != said:
                self.out.send(protocol.ThreadDied(time.time(), name, error, _where(e)))
            return error

    # --- the target's own CPU, memory, load, swap ----------------------------------
    def host_stats_loop(self) -> None:
        """``HostStats`` every interval (its own thread: /proc reads never wait on NVML);
        the heap trimmed every ``TRIM_EVERY_S`` or interval, whichever is longer."""
        reader = HostStatsReader()
        trimmed = time.monotonic()
        while True:
            self.out.send(reader.read())
            if time.monotonic() - trimmed >= TRIM_EVERY_S:  # no wake-up of its own
                trimmed = time.monotonic()
                malloc_trim()
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
            return [f for f in self.fields if f not in NVML_ONLY_FIELDS]
        out = []
        for f in self.fields:  # before R535 clocks_event_reasons.* has its older name
            old = f.replace("clocks_event_reasons.", "clocks_throttle_reasons.", 1)
            old = OLD_FIELD_NAMES.get(f, old)  # older drivers: pcie.link.gen.current
            if f in known or old in known:
                out.append(f if f in known else old)
        return out

    def stall_limit(self, first: bool) -> float:
        """Seconds without a usable row before the watchdog restarts the sampler."""
        return max(STALL_ROUNDS * self.interval, STALL_FIRST_S if first else STALL_MIN_S)

    def gpu_round(self) -> None:
        """One round of GPU rows: NVML's (``nvml_loop``'s read), else one nvidia-smi
        query of the fields it knows (``smi_loop``'s, without its ``-lms`` loop)."""
        if self.nvml is not None:
            self.nvml_round()
            if self.nvml is not None:  # else NVML did not answer: nvidia-smi instead
                return
        fields = self.supported_fields()
        if fields is None:
            return
        argv = [self.smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
        code, text = run_once(argv)
        batcher = RowBatcher(fields.index("index") if "index" in fields else 1, len(fields))
        lines = text.splitlines()
        rows = [line for line in lines if batcher.is_row(line)]
        if code == 0 and rows:
            self.send_rows(fields, rows)
        else:  # as the loop says a run without rows: its last lines
            tail = [line[:512] for line in lines[-20:]]
            self.out.send(protocol.SmiError(time.time(), code, "\n".join(tail)))

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
        splitter = LineSplitter()
        got_rows = False
        stalled = False
        dropped = 0  # bytes of over-long lines thrown away
        pacer = RoundPacer()
        tail: list[str] = []
        last_row = time.monotonic()

        def finished(rows: list[str] | None) -> None:
            if rows:
                told = pacer.dropped
                self.send_rows(fields, pacer.offer(rows, time.monotonic(), self.interval))
                if pacer.dropped and not told:  # said at once, the total when the loop ends
                    self.out.send(protocol.Note(rounds_dropped_note(self.interval)))

        try:
            while not self.wake.is_set():
                if time.monotonic() - last_row > self.stall_limit(first=not got_rows):
                    stalled = True
                    break
                # A round's rows come together: a pause of BATCH_QUIET_S ends it. With
                # none pending, sleep until the next line, the interval changes or the
                # watchdog's limit (no fixed short poll).
                quiet = BATCH_QUIET_S
                if not batcher.pending:
                    limit = self.stall_limit(first=not got_rows)
                    quiet = max(limit - (time.monotonic() - last_row), 0.0) + 0.01
                if pacer.held is not None:  # a held round is sent when it is due
                    quiet = min(quiet, pacer.wait(time.monotonic(), self.interval))
                ready, _, _ = select.select([fd, self.wake_r], [], [], quiet)
                self.send_rows(fields, pacer.due(time.monotonic(), self.interval))
                if self.wake_r in ready:
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 4096)
                    continue
                if not ready:
                    finished(batcher.flush())
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                for raw in splitter.feed(chunk):
                    if isinstance(raw, LongLine):
                        line = self.long_row(raw, fields)
                        if line is None:
                            if not dropped:  # said at once, the total when the loop ends
                                self.out.send(protocol.Note(long_line_note(raw.size)))
                            dropped += raw.size
                            continue
                    else:
                        line = raw.decode("utf-8", "replace")
                    tail = [*tail[-19:], line[:512]]
                    if batcher.is_row(line):
                        got_rows = True
                        last_row = time.monotonic()
                    finished(batcher.feed(line))
            rows = batcher.flush() or pacer.held  # the newest round, held or not
            if rows and not self.wake.is_set():
                self.send_rows(fields, rows)
            if splitter.long is not None:  # a long line the loop ended in: dropped
                dropped += splitter.long.size
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            _reap(proc)
        if dropped:
            self.out.send(
                protocol.Note(f"nvidia-smi printed over-long lines: {dropped} bytes dropped")
            )
        if pacer.dropped:
            self.out.send(protocol.Note(rounds_dropped_note(self.interval, pacer.dropped)))
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

    def long_row(self, line: LongLine, fields: list[str]) -> str | None:
        """A line over the bound: the GPU row with its name cut (said once per GPU), or
        None (dropped: said when the loop ends, with the bytes)."""
        kept = shorten_row(line, fields)
        if kept is None:
            return None
        row, index = kept
        if index not in self.names_cut:
            self.names_cut.add(index)
            self.out.send(protocol.Note(name_cut_note(index, line.size)))
        return row

    def send_rows(self, fields: list[str], rows: list[str] | None) -> None:
        if not rows:
            return
        key = memory_key(fields, rows)
        if key != self.gpu_memory:  # the GPUs may differ (not while steady: no cost then)
            buses = row_cells(fields, rows, ("index", "pci.bus_id"))
            if buses and buses != self.minors_for:  # before their round: its sample has them
                self.minors_for = buses
                self.send_minors()
        self.out.send(protocol.Gpus(time.time(), fields, rows))
        migs = mig_indexes(fields, rows)
        if migs != self.mig_indexes:  # a GPU went into or out of MIG mode: poll its slices
            self.mig_indexes = migs
            self.procs_due.set()
        if key:
            self.gpu_memory = key
            if key != self.polled_memory:
                self.procs_due.set()
        if not self.trimmed:  # start-up is over: its garbage goes back to the system
            self.trimmed = True
            malloc_trim()

    def send_minors(self) -> None:
        """Which ``/dev/nvidiaN`` each GPU is (the device-file users name N): NVML's,
        else the driver's ``/proc/driver/nvidia/gpus`` (a container sees the host's
        numbers there, whichever GPUs it has)."""
        nvml = self.nvml
        if nvml is not None:
            done, minors = self.nvml_call(functools.partial(nvml_minors, nvml))
            if done and isinstance(minors, dict) and minors:
                self.out.send(protocol.Minors(time.time(), minors, "nvml"))
                return
        minors, error = procfacts.driver_minors()
        self.out.send(protocol.Minors(time.time(), minors, "procfs", error))

    def process_loop(self) -> None:
        """The process list (and who holds the device files), polled only when there is
        work: at start, after a round whose used memory or GPU count differs from the
        one before the last poll (``send_rows``), else every ``process_fallback_s``."""
        while True:
            self.procs_due.clear()
            self.polled_memory = self.gpu_memory
            polled = time.monotonic()
            self.poll_processes()
            self.wait_for_process_work(polled)

    def wait_for_process_work(self, polled: float) -> None:
        """Sleeps until the next process poll is due (no fixed short poll): a change
        waits for ``max(process_interval, interval)`` since the last poll to have passed."""
        while True:
            since = time.monotonic() - polled
            if since >= self.process_fallback_s:
                return
            if not self.procs_due.is_set():
                self.procs_due.wait(self.process_fallback_s - since)
                continue
            gap = max(self.process_interval, self.interval)
            if since >= gap:
                return
            time.sleep(min(gap, self.process_fallback_s) - since)

    def poll_processes(self) -> None:
        nvml = self.nvml
        driver: set[str] | None = None  # the PIDs the driver listed (None: no list)
        if nvml is not None:
            memory: dict[str, int] = {}
            usage: list[list[Any]] = []
            read = functools.partial(
                nvml_process_rows, nvml, memory, usage=usage, seen=self.usage_seen
            )
            done, rows = self.nvml_call(read)
            if done and isinstance(rows, Exception):
                raise rows  # said by spawn, and the loop runs again
            if done and isinstance(rows, list):
                self.send_procs(rows, memory, usage, "nvml" if usage else "")
                driver = row_pids(rows)
        else:
            argv = [self.smi, "--query-compute-apps=" + ",".join(self.process_fields)]
            code, text = run_once([*argv, "--format=csv,noheader,nounits"])
            if code == 0:
                rows = [ln for ln in text.splitlines() if ln.strip()]
                usage = self.pmon_usage(rows) if rows else []
                self.send_procs(rows, {}, usage, "pmon" if usage else "")
                driver = row_pids(rows)
        self.send_device_users(driver)
        self.send_mig()

    def send_mig(self) -> None:
        """The MIG instances, with the process list: while a GPU is in MIG mode its slices,
        not the whole GPU, say who is short of memory. nvidia-smi is asked only while a
        round says a GPU is in MIG mode; an empty ``Mig`` says the last one left it."""
        nvml = self.nvml
        if nvml is not None:
            read = functools.partial(mig.nvml_instances, nvml, nvml_compute_processes)
            done, got = self.nvml_call(read)
            if not done:
                return
            error: str | None
            if isinstance(got, Exception):
                gpus, instances, error = [], [], f"NVML: {got}"
            else:
                gpus, instances, problems = got
                error = "; ".join(problems) or None
            message = protocol.Mig(time.time(), "nvml", gpus, instances, error)
        elif self.mig_indexes:
            message = smi_mig(self.smi, self.mig_indexes)
        else:
            message = protocol.Mig(time.time(), "nvidia-smi", [], [])
        if message.gpus or message.error or self.mig_sent:
            self.out.send(message)
        self.mig_sent = bool(message.gpus or message.error)

    def pmon_usage(self, rows: list[str]) -> list[list[Any]]:
        """``nvidia-smi pmon -c 1 -s u`` where NVML is not usable: one sampling of about a
        second, only when there are processes. Empty where pmon fails."""
        if self.pmon_failed:
            return []
        code, text = run_once([self.smi, "pmon", "-c", "1", "-s", "u"])
        if code != 0:
            self.pmon_failed = True  # not this driver's (or not permitted): not asked again
            return []
        return pmon_usage(text, row_pids(rows))

    def send_procs(
        self, rows: list[str], memory: dict[str, int], usage: list[list[Any]], source: str
    ) -> None:
        details: list[dict[str, Any]] = []
        if self.device_files is None:
            self.device_files = procfacts.in_container()
        # Where no device-file user is known (no scan, or it found none) gpumon takes the
        # driver's PIDs as this namespace's (``container_view``): what /proc says of them
        # goes with the list. Else the device-file users' records carry it, matched by
        # PID there (inside a container a driver PID may be the host's number).
        if rows and not (self.device_files and self.device_holders):
            names = row_names(rows)
            pids = sorted(int(p) for p in names if p.isdigit())
            details = [
                r
                for r in procfacts.describe("/proc", pids, self.cpu_clock)
                if not r.get("error") and same_program(r.get("command"), names[str(r["pid"])])
            ]
        self.out.send(protocol.Procs(time.time(), rows, memory, usage, source, details))

    def send_device_users(self, driver: set[str] | None = None) -> None:
        """Inside a container the driver's PIDs may be the host's (or missing): who holds
        ``/dev/nvidiaN`` here is sent beside them (``procfacts.device_file_users``).

        Reading every ``/proc/*/fd`` is the costly part (~3 ms for 130 processes), and
        who holds a GPU changes when the driver's list does: the holders found are kept
        and only described again until the driver's PIDs change, one of them is gone,
        or ``DEVICE_RESCAN_S`` has passed (a holder the driver does not list, such as a
        process that opened the device without a context, is found within that)."""
        if self.device_files is None:
            self.device_files = procfacts.in_container()
        if not self.device_files:
            return
        now = time.monotonic()
        held = self.device_holders
        if (
            held is None
            or driver is None
            or driver != self.device_driver_pids
            or now - self.device_scanned >= DEVICE_RESCAN_S
            or not all(os.path.exists(f"/proc/{pid}") for pid in held)
        ):
            held = self.device_holders = procfacts.device_file_holders()
            self.device_scanned, self.device_driver_pids = now, driver
        users = procfacts.describe_device_users(held, cpu=self.cpu_clock)
        self.out.send(protocol.ProcRecords(time.time(), "device-files", users))

    # --- logs, kernel log, cgroup, HTTP ----------------------------------------------
    def log_loop(self) -> None:
        """Follows the logs, the kernel log and the cgroup's memory events; sleeps until
        one of them changes (``Waker``), polling only what inotify cannot watch."""
        rounds = LogRounds(self)
        kmsg = rounds.kmsg
        waker = Waker(self.log_poll_s)
        if kmsg is not None and kmsg.device:
            waker.extra.append(kmsg.fd)
        elif kmsg is not None:  # a file: appended lines are a file-modified event
            waker.must_poll = not waker.watch(kmsg.path)
        if self.kernel and os.path.exists(rounds.events):
            # cgroup v2: a change in memory.events is a file-modified event
            waker.must_poll = not waker.watch(rounds.events)
        while True:
            busy = rounds.round()
            waker.watch_logs([tail.pattern for tail in self.logs])
            waker.wait(busy)

    def start_http(self, target: dict[str, Any]) -> None:
        """Scrape ``target`` from now on (once per tag), in the one HTTP thread."""
        with self.http_lock:
            if target["tag"] in self.http_tags:
                return
            self.http_tags.add(target["tag"])
            self.http_targets.append(target)
            first = not self.http_started
            self.http_started = True
        if first:
            self.http_wake_r, self.http_wake_w = os.pipe()
            os.set_blocking(self.http_wake_w, False)
            self.spawn("http", self.http_loop)
        else:
            with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
                os.write(self.http_wake_w, b"!")

    def discover_loop(self) -> None:
        """Find SGLang and vLLM servers from their command lines (``sglang_ports``,
        ``vllm_ports``) every 10 s, and scrape them."""
        said: dict[int, protocol.ServerInfo] = {}  # what was sent of each server
        first = True
        while True:
            self.discover_round(said, first, self.start_http)
            first = False
            time.sleep(10.0)

    def discover_round(
        self,
        said: dict[int, protocol.ServerInfo],
        first: bool,
        scrape: Callable[[dict[str, Any]], object],
    ) -> None:
        """One scan: each server found is scraped (``scrape(target)``), its info sent
        when new or changed (``said``: what was sent), and after the first scan its
        ``FirstRound``."""
        sglang = [t for t in self.http if str(t.get("tag", "")).startswith("sglang:")]
        template = sglang[0] if sglang else DISCOVERED_TARGET
        found, infos = scan_server_processes(self.proc)
        ports = found["sglang"] if self.sglang_discover else []
        targets = [
            {
                "url": f"http://127.0.0.1:{port}/metrics",
                "tag": f"sglang:{port}",
                "filter": template.get("filter"),
                "info": template.get("info"),
                "info_tag": f"sglang-info:{port}",
            }
            for port in ports
        ]
        vllm = found["vllm"] if self.vllm_discover else []
        targets += [
            {
                "url": f"http://127.0.0.1:{port}/metrics",
                "tag": f"vllm:{port}",
                "filter": self.vllm_filter,
                "info": ["/version"],
                "info_tag": f"vllm-info:{port}",
            }
            for port in vllm
        ]
        for target in targets:
            scrape(target)
        on = {"vllm": self.vllm_discover, "sglang": self.sglang_discover}
        for info in infos:
            if not on.get(info.engine):
                continue
            if said.get(info.port) != info:  # a new server, its GPUs or command changed
                said[info.port] = info
                self.out.send(info)
        if first:
            # vLLM's first: a monitor that waits on "discover" has both then
            if self.vllm_discover:
                self.out.send(protocol.FirstRound("discover-vllm", vllm))
            if self.sglang_discover:
                self.out.send(protocol.FirstRound("discover", ports))

    def http_loop(self) -> None:
        """Every HTTP target's scrapes in this one thread: each server's connection is
        non-blocking with its own deadline, so a slow or silent server delays none of
        the others (a thread per server cost a wake-up and a GIL hand-off per scrape)."""
        import select

        scrapes: dict[str, Scrape] = {}
        while True:
            with self.http_lock:  # targets added since (all of them after a restart)
                for target in self.http_targets[len(scrapes) :]:
                    scrapes[str(target["tag"])] = Scrape(target)
            poll = select.poll()
            poll.register(self.http_wake_r, select.POLLIN)
            busy: dict[int, Scrape] = {}
            wake = float("inf")
            now = time.monotonic()
            for scrape in scrapes.values():
                if not scrape.conn.busy and scrape.due <= now:
                    scrape.begin(self.out, self.interval)
                if scrape.conn.busy:
                    assert scrape.conn.sock is not None  # a busy connection has its socket
                    busy[scrape.conn.sock.fileno()] = scrape
                    poll.register(scrape.conn.sock, scrape.conn.events)
                    wake = min(wake, scrape.conn.deadline)
                else:
                    wake = min(wake, scrape.due)
            wait = max(wake - time.monotonic(), 0.0)
            for fd, _ in poll.poll(None if wait == float("inf") else int(wait * 1000) + 1):
                if fd == self.http_wake_r:
                    os.read(self.http_wake_r, 4096)
                elif fd in busy:
                    busy.pop(fd).step(self.out, self.interval)
            now = time.monotonic()
            for scrape in busy.values():
                if scrape.conn.deadline <= now:
                    scrape.expire(self.out, self.interval)

    # --- NVML ----------------------------------------------------------------------
    def nvml_call(self, call: Callable[[], Any]) -> tuple[bool, Any]:
        """``call()`` (NVML) in the NVML worker thread, waited for ``stall_limit``: a hung
        driver call must not freeze the agent. (False, None) when it did not return: it
        is said, NVML is given up for nvidia-smi (a process the watchdog can kill), and
        the worker is left to its fate. An exception is returned as the value."""
        limit = self.stall_limit(first=False)
        done, value = self.nvml_worker.call(call, limit)
        if done:
            return True, value
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

    def nvml_round(self) -> bool:
        """One round of NVML's GPU rows, or its error; False when NVML did not answer
        (``nvml_call``: given up for nvidia-smi)."""
        read = functools.partial(nvml_gpu_rows, self.nvml, self.fields, self.nvml_static)
        done, rows = self.nvml_call(read)
        if not done:
            return False
        if isinstance(rows, Exception):
            self.out.send(protocol.SmiError(time.time(), 1, f"NVML: {rows}"))
        else:
            self.send_rows(self.fields, rows)
        return True

    def nvml_loop(self) -> None:
        while self.nvml is not None:
            started = time.monotonic()
            if not self.nvml_round():
                break
            delay = self.interval - (time.monotonic() - started)
            if self.wake.wait(max(delay, 0.0)):
                self.wake.clear()
        self.smi_loop()


class LogRounds:
    """What the log loop reads each time it wakes: the followed logs, the kernel log and
    the cgroup's memory events; the first round says so (``FirstRound("logs")``)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.kmsg = KernelLog.open(agent.kmsg, agent.out) if agent.kernel else None
        self.events = "/sys/fs/cgroup/memory.events"
        self.last_events: str | None = None
        self.first = bool(agent.logs)

    def close(self) -> None:
        """The kernel log's file closed (a one-shot's round is over)."""
        if self.kmsg is not None:
            with contextlib.suppress(OSError):
                os.close(self.kmsg.fd)

    def round(self) -> bool:
        """One read of each; True when a log is busy (more to read at once)."""
        agent, out = self.agent, self.agent.out
        busy = False
        for tail in agent.logs:
            for msg in tail.poll():
                out.send(msg)
                busy = True
            for problem in tail.take_problems():
                out.send(problem)
            busy = busy or tail.holding()
        if self.first:  # every followed log polled once: a one-shot answer may go
            self.first = False
            out.send(protocol.FirstRound("logs"))
        if self.kmsg is not None:
            lines = self.kmsg.read()
            if lines:
                out.send(protocol.Kernel(time.time(), lines))
        if agent.kernel:
            try:
                with open(self.events) as f:
                    text = f.read()
            except OSError:
                text = None
            if text is not None and text != self.last_events:
                self.last_events = text
                out.send(protocol.MemoryEvents(time.time(), text))
        return busy


class Scrape:
    """One HTTP target (SGLang ``/metrics``) as the HTTP thread scrapes it: a kept-alive
    ``Connection``, what is under way on it (the page, or the server info after the
    server came up), and when the next scrape is due. Each answer or error is sent on
    as an ``Http`` message."""

    def __init__(self, target: dict[str, Any]) -> None:
        import re

        self.wanted = re.compile(target["filter"]) if target.get("filter") else None
        url, self.tag = str(target["url"]), str(target["tag"])
        self.info_tag = str(target.get("info_tag") or self.tag)
        try:
            host, port, self.path = split_url(url)
            self.bad: str | None = None
        except FetchError as e:  # said every interval, as a fetch that failed
            host, port, self.path, self.bad = "", 0, "/", str(e)
        base = self.path[: self.path.rindex("/")]
        self.info = [base + str(p) for p in target.get("info") or ()]
        self.conn = Connection(host, port)
        self.informed = False  # server info sent since the server last came up
        self.fetching = ""  # "page" or "info": what the connection is busy with
        self.info_left: list[str] = []  # server info paths not tried yet
        self.due = 0.0  # monotonic time of the next scrape
        self.started = 0.0
        self.t = 0.0

    def begin(self, out: Output, interval: float) -> None:
        """Start a scrape of the page (an error at once is sent at once)."""
        self.started = time.monotonic()
        self.t = time.time()
        self.fetching = "page"
        try:
            if self.bad is not None:
                raise FetchError(self.bad)
            self.conn.begin(self.path, PAGE_TIMEOUT_S, PAGE_MAX_BYTES)
        except FetchError as e:
            self.done(out, None, e, interval)

    def step(self, out: Output, interval: float) -> None:
        """The connection's socket is ready."""
        try:
            answer = self.conn.step()
        except FetchError as e:
            self.done(out, None, e, interval)
        else:
            if answer is not None:
                self.done(out, answer, None, interval)

    def expire(self, out: Output, interval: float) -> None:
        """The deadline of what is under way passed."""
        try:
            self.conn.expire()
        except FetchError as e:
            self.done(out, None, e, interval)

    def done(
        self,
        out: Output,
        answer: tuple[int, bytes] | None,
        error: Exception | None,
        interval: float,
    ) -> None:
        if self.fetching == "info":
            if answer is not None and answer[0] == 200:  # 404 on versions without a path
                self.info_left = []
                text = answer[1].decode("utf-8", "replace")
                out.send(protocol.Http(self.info_tag, time.time(), 200, text))
        else:
            msg = self.page_message(answer, error)
            out.send(msg)
            if msg.status is None:
                self.informed = False
            elif not self.informed and self.info:
                self.informed = True
                self.info_left = list(self.info)
        while self.info_left:  # the first server info path that answers 200, sent once
            self.fetching = "info"
            try:
                self.conn.begin(self.info_left.pop(0), INFO_TIMEOUT_S, INFO_MAX_BYTES)
                return
            except FetchError:  # no answer
                continue
        self.fetching = ""
        self.due = max(self.started + interval, time.monotonic() + 0.05)

    def page_message(
        self, answer: tuple[int, bytes] | None, error: Exception | None
    ) -> protocol.Http:
        if answer is None:  # refused, timeout, reset: the server is down
            return protocol.Http(self.tag, self.t, None, error=str(error))
        status, raw = answer
        # The counters were read somewhere between the request and the answer: the
        # midpoint, so a slow answer (a loaded machine) does not skew a rate.
        t = self.t + (time.monotonic() - self.started) / 2
        if status >= 400:
            return protocol.Http(self.tag, t, status, error=f"HTTP {status}")
        body = raw.decode("utf-8", "replace")
        if self.wanted is not None:  # exposition text ends in a newline: keep it so
            kept = list(filter(self.wanted.match, body.splitlines()))  # no Python loop
            body = "\n".join(kept) + "\n" if kept else ""
        return protocol.Http(self.tag, t, status, body)


def memory_key(fields: Sequence[str], rows: Sequence[str]) -> tuple[str, ...]:
    """What a change of the process list shows in a round: each GPU row's index and used
    memory (only the GPU count, where ``memory.used`` is not asked for). Empty: no GPU
    row."""
    return row_cells(fields, rows, ("index", "memory.used"))


def mig_indexes(fields: Sequence[str], rows: Sequence[str]) -> tuple[str, ...]:
    """The indexes of the GPU rows whose ``mig.mode.current`` is Enabled."""
    cells = row_cells(fields, rows, ("index", "mig.mode.current"))
    if "mig.mode.current" not in fields:
        return ()
    pairs = zip(cells[::2], cells[1::2])
    return tuple(index.strip() for index, mode in pairs if mode.strip() == "Enabled")


def smi_mig(smi: str, indexes: Sequence[str]) -> protocol.Mig:
    """The MIG instances of the GPUs ``indexes`` from ``nvidia-smi -L`` and ``-q -i``."""
    code, listed = run_once([smi, "-L"])
    query = listed
    if code == 0:
        code, query = run_once([smi, "-q", "-i", ",".join(indexes)])
    if code != 0:
        said = query.strip().splitlines()
        why = f"nvidia-smi exited {code}" + (f": {said[0][:200]}" if said else "")
        return protocol.Mig(time.time(), "nvidia-smi", [], [], why)
    gpus, instances = mig.smi_instances(listed, query)
    # its rows say MIG is on: a report that shows none is one this parser cannot read
    unread = None if gpus else "nvidia-smi -q shows no GPU in MIG mode (an unknown layout?)"
    return protocol.Mig(time.time(), "nvidia-smi", gpus, instances, unread)


def row_cells(fields: Sequence[str], rows: Sequence[str], wanted: Sequence[str]) -> tuple[str, ...]:
    """The cells of the ``wanted`` fields (those asked for; ``index`` first) of each GPU
    row, in a row. Rows that are not GPU rows (Xid text) are left out; a GPU name holding
    ", " (cells after the name shift) is allowed for."""
    if "index" not in fields:
        return ()
    ncols = len(fields)
    name = fields.index("name") if "name" in fields else ncols
    at = [fields.index(f) for f in wanted if f in fields]
    key: list[str] = []
    for row in rows:
        cells = row.split(", ")
        extra = len(cells) - ncols
        if extra < 0 or (extra > 0 and name == ncols):
            continue
        picked = [cells[i + extra if i > name else i] for i in at]
        if picked[0].strip().isdigit():
            key.extend(picked)
    return tuple(key)


def nvml_minors(nvml: Any) -> dict[str, int]:
    """Bus id -> device minor (``nvmlDeviceGetMinorNumber``) of each GPU NVML opens."""
    out: dict[str, int] = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            out[_s(nvml.nvmlDeviceGetPciInfo(h).busId)] = int(nvml.nvmlDeviceGetMinorNumber(h))
        except nvml.NVMLError:
            continue  # this GPU's row says why (an unopened device)
    return out


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
    except Exception as e:  # noqa: BLE001 - an older binding without a function: absent, not fatal
        return f"[{type(e).__name__}]"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# The cells that stay while the GPU is there (its identity, the board's maxima): read once
# and kept (``NvmlStatic``); the rest are read every round.
STATIC_FIELDS = frozenset(
    {"uuid", "name", "pci.bus_id", "clocks.max.sm", "pcie.link.gen.max", "pcie.link.width.max"}
)


class NvmlStatic:
    """Each GPU's ``STATIC_FIELDS`` cells by index, as read for the GPU count they came
    with: a count that changes forgets them all, a GPU whose handle or memory read fails
    (a lost GPU fails both) forgets its own, so a GPU in trouble is read in full; an
    error token is never kept ([N/A], not supported by the board, is), and nothing is
    kept where memory is not asked for."""

    def __init__(self) -> None:
        self.count = -1
        self.cells: dict[int, dict[str, str]] = {}


def nvml_gpu_rows(nvml: Any, fields: Sequence[str], static: NvmlStatic | None = None) -> list[str]:
    """One round of rows in nvidia-smi's csv,noheader,nounits shape, from NVML; with
    ``static``, the static cells come from it once read."""
    rows: list[str] = []
    now = time.time()
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    count = nvml.nvmlDeviceGetCount()
    if static is not None and static.count != count:
        static.count, static.cells = count, {}
    for i in range(count):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
        except nvml.NVMLError as e:  # every cell but the row's time and index fails alike:
            known = {"timestamp": stamp, "index": str(i)}  # the parser's unopened device
            rows.append(", ".join(known.get(f, f"[{e}]") for f in fields))
            if static is not None:
                static.cells.pop(i, None)
            continue
        wanted = [FIELD_VALUES[f] for f in fields if f in FIELD_VALUES]
        values = _field_values(nvml, h, wanted) if wanted else {}
        kept = static.cells.get(i, {}) if static is not None else {}
        once: dict[str, Any] = {}
        cells = [kept.get(f) or _nvml_field(nvml, h, i, f, stamp, values, once) for f in fields]
        if static is not None:
            if once.get("memory", (False,))[0]:  # the GPU answers (a lost one fails this)
                static.cells[i] = {
                    f: c
                    for f, c in zip(fields, cells)
                    if f in STATIC_FIELDS and (c[:1] != "[" or c == "[N/A]")
                }
            else:
                static.cells.pop(i, None)
        rows.append(", ".join(cells))
    return rows


def _once(once: dict[str, Any] | None, key: str, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` made once per GPU and round where ``once`` is given: its value (or its
    error) serves every cell read from it, as memory.total, .used and .free from one
    nvmlDeviceGetMemoryInfo."""
    if once is None:
        return call

    def cached() -> Any:
        if key not in once:
            try:
                once[key] = (True, call())
            except Exception as e:  # noqa: BLE001 - each cell reads it as if it made the call
                once[key] = (False, e)
        ok, value = once[key]
        if not ok:
            raise value
        return value

    return cached


# nvidia-smi fields NVML only gives through nvmlDeviceGetFieldValues (nvml.h field ids, the
# same in nvidia-ml-py 11.x-13.x pynvml.py): NVML_FI_DEV_MEMORY_TEMP (HBM boards: H100,
# H200; GDDR boards answer NOT_SUPPORTED, where nvidia-smi prints a bare N/A) and
# NVML_FI_DEV_POWER_INSTANT (milliwatts).
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230, drivers from R565; older ones answer
# NOT_SUPPORTED or an invalid-argument entry: [N/A]) is nvidia-smi's gpu_recovery_action.
FIELD_VALUES = {"temperature.memory": 82, "power.draw.instant": 186, "gpu_recovery_action": 230}
# nvmlGpuRecoveryAction_t (nvidia-ml-py 13.615.71's NVML_GPU_RECOVERY_ACTION_*, 0-7) as
# nvidia-smi spells it (only "None" is seen in CSV captures; 1-4 as ``nvidia-smi -q`` words
# them, 5-7 in NVML's own words: unverified): docs/formats.md 1.6.
RECOVERY_ACTIONS = {
    0: "None",
    1: "Reset",
    2: "Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
_NOT_SUPPORTED = 3
_VALUE_ATTRS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # valueType


def _field_values(nvml: Any, h: Any, ids: list[int]) -> dict[int, Any]:
    """Field id -> the filled c_nvmlFieldValue_t, or the error of the whole call."""
    try:
        got = nvml.nvmlDeviceGetFieldValues(h, ids)
    except Exception as e:  # noqa: BLE001 - NVMLError, or a binding without the call
        return dict.fromkeys(ids, e)
    return {int(v.fieldId): v for v in got}


def _field_value_text(nvml: Any, field: str, values: dict[int, Any] | None) -> str:
    value = (values or {}).get(FIELD_VALUES[field])
    if value is None:
        return "[N/A]"
    if isinstance(value, Exception):
        return _nvml_text(nvml, _raiser(value), str)
    if value.nvmlReturn != 0:
        if value.nvmlReturn == _NOT_SUPPORTED:
            return "N/A" if field == "temperature.memory" else "[N/A]"
        try:
            return f"[{nvml.NVMLError(value.nvmlReturn)}]"
        except Exception:  # noqa: BLE001 - a return code this binding cannot name
            return "[Unknown Error]"
    kind = int(value.valueType)
    number = getattr(value.value, _VALUE_ATTRS[kind] if 0 <= kind < 7 else "uiVal")
    if field == "power.draw.instant":
        return f"{number / 1000:.2f}"
    if field == "gpu_recovery_action":
        return RECOVERY_ACTIONS.get(int(number), str(number))
    return str(number)


def _raiser(e: Exception) -> Callable[[], Any]:
    def call() -> Any:
        raise e

    return call


def _memory(nvml: Any, h: Any) -> Any:
    try:
        return nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    except Exception:  # noqa: BLE001 - a binding or driver without v2: the v1 struct
        return nvml.nvmlDeviceGetMemoryInfo(h)


def _mib(v: int) -> str:
    return str(-(-v // (1024 * 1024)))  # nvidia-smi rounds each cell up


# The fields only NVML answers (no nvidia-smi lists them): never in an nvidia-smi query
NVML_ONLY_FIELDS = ("total_energy_consumption",)


def _nvml_field(
    nvml: Any,
    h: Any,
    i: int,
    field: str,
    stamp: str,
    values: dict[int, Any] | None = None,
    once: dict[str, Any] | None = None,
) -> str:
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
    if field in FIELD_VALUES:
        return _field_value_text(nvml, field, values)
    if field in ("utilization.gpu", "utilization.memory"):
        attr = "gpu" if field == "utilization.gpu" else "memory"
        rates = _once(once, "utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        return t(nvml, lambda: getattr(rates(), attr), str)
    if field.startswith("memory."):
        attr = field.split(".", 1)[1]
        memory = _once(once, "memory", lambda: _memory(nvml, h))
        return t(nvml, lambda: getattr(memory(), attr), _mib)
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
    if field == "total_energy_consumption":  # mJ since the driver loaded (Volta and newer)
        return t(nvml, lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h), str)
    health = _nvml_health_field(nvml, h, field, once)
    if health is not None:
        return health
    return "[N/A]"  # a field NVML has no call for here: absent, like nvidia-smi's [N/A]


def _yes_no(v: Any) -> str:
    return "Yes" if v else "No"


def _nvml_health_field(
    nvml: Any, h: Any, field: str, once: dict[str, Any] | None = None
) -> str | None:
    """The health facts' cells (``parsers.nvidia_smi.HEALTH_FIELDS``), from NVML; None
    for another field."""
    t = _nvml_text
    remapped = _once(once, "remapped", lambda: nvml.nvmlDeviceGetRemappedRows(h))
    calls: dict[str, tuple[Callable[[], Any], Callable[[Any], str]]] = {
        "pcie.link.gen.gpucurrent": (lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h), str),
        "pcie.link.gen.max": (lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h), str),
        "pcie.link.width.current": (lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h), str),
        "pcie.link.width.max": (lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(h), str),
        # (corrected rows, uncorrected rows, pending, failure occurred)
        "remapped_rows.pending": (lambda: remapped()[2], _yes_no),
        "remapped_rows.failure": (lambda: remapped()[3], _yes_no),
        "retired_pages.pending": (
            lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h),
            _yes_no,
        ),
        # nvmlDeviceGetMigMode: [current, pending]; NVML_DEVICE_MIG_ENABLE is 1
        "mig.mode.current": (
            lambda: nvml.nvmlDeviceGetMigMode(h)[0],
            lambda v: "Enabled" if v == mig.MIG_ENABLED else "Disabled",
        ),
    }
    got = calls.get(field)
    return None if got is None else t(nvml, got[0], got[1])


def _watts(mw: int) -> str:
    return f"{mw / 1000:.2f}"


def row_names(rows: Sequence[str]) -> dict[str, str]:
    """PID -> the process name of compute-process rows (``pid, process_name, ...``)."""
    out = {}
    for r in rows:
        cells = r.split(", ")
        out[cells[0].strip()] = cells[1].strip() if len(cells) > 1 else ""
    return out


def same_program(command: object, name: str) -> bool:
    """Whether ``/proc``'s command line is of the program the driver named (the last
    part of its first word; nvidia-smi may print the path or the 15-character comm): a
    PID of the driver's that is another process here (a number reused, a simulated host
    PID) is not described."""
    if not isinstance(command, str) or not name or name == "[Not Found]":
        return False
    ours = command.split(" ", 1)[0].replace(",", "?").rsplit("/", 1)[-1]
    theirs = name.rsplit("/", 1)[-1]
    return ours == theirs or ours[:15] == theirs[:15]  # a comm is 15 characters at most


def row_pids(rows: Sequence[str]) -> set[str]:
    """The PID cells of compute-process rows (``pid, ...``, as both sources write them)."""
    return {r.split(",", 1)[0].strip() for r in rows}


def nvml_process_rows(
    nvml: Any,
    memory: dict[str, int] | None = None,
    usage: list[list[Any]] | None = None,
    seen: dict[str, int] | None = None,
) -> list[str]:
    """Compute processes as ``pid, process_name, used_memory, gpu_uuid, gpu_bus_id`` rows.
    ``memory``: filled with each GPU's used MiB (by UUID) read right after its processes,
    as the sample reads it, so the client compares the two of one moment (a job that
    grows between a sample and this list is not "memory no process accounts for").
    ``usage``: filled with ``[uuid, pid, sm %, memory-bandwidth %]`` of each listed
    process (``nvml_process_usage``) on the GPUs whose samples could be read, ``seen``
    keeping each GPU's newest sample time from one list to the next."""
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
            procs = nvml_compute_processes(nvml, h)
            if memory is not None:
                memory[uuid] = int(_mib(_memory(nvml, h).used))
        except nvml.NVMLError:
            continue
        for pid, used in procs:
            mem = "[N/A]" if used is None else _mib(used)
            rows.append(f"{pid}, {_process_name(pid)}, {mem}, {uuid}, {bus}")
        if usage is not None and procs:
            shares = nvml_process_usage(nvml, h, uuid, {} if seen is None else seen)
            if shares:  # a process without a sample beside one with: it used none
                usage.extend([uuid, pid, *shares.get(pid, (0, 0))] for pid, _ in procs)
    return rows


NVML_ERROR_NOT_FOUND = 6  # nvmlDeviceGetProcessUtilization: no sample since lastSeen


def nvml_process_usage(
    nvml: Any, handle: Any, uuid: str, seen: dict[str, int]
) -> dict[int, tuple[int, int]] | None:
    """PID -> (SM %, memory-bandwidth %) from ``nvmlDeviceGetProcessUtilization``: the
    mean of each process's samples newer than the last read of this GPU (``seen``, in
    the samples' microseconds); the first read takes the last second's. Empty where
    there is no sample (NVML keeps one only for a process that used the GPU, and none
    on a MIG-sliced GPU, as its pmon shows: n/a, not 0), None where the call is not
    there or fails.

    nvidia-ml-py 13.615.71's pynvml.py ``nvmlDeviceGetProcessUtilization(handle,
    timeStamp)`` returns ``c_nvmlProcessUtilizationSample_t`` (pid, timeStamp, smUtil,
    memUtil, encUtil, decUtil) and raises ``NVMLError`` with NVML_ERROR_NOT_FOUND (and
    with 0, its first call's success) where there is no sample to return."""
    call = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
    if call is None:
        return None
    last = seen.get(uuid) or int((time.time() - 1.0) * 1e6)
    try:
        samples = call(handle, last)
    except nvml.NVMLError as e:
        if getattr(e, "value", None) in (NVML_ERROR_NOT_FOUND, 0):
            return {}
        return None
    sums: dict[int, list[int]] = {}
    newest = last
    for s in samples:
        if s.timeStamp <= last:
            continue
        acc = sums.setdefault(int(s.pid), [0, 0, 0])
        acc[0] += int(s.smUtil)
        acc[1] += int(s.memUtil)
        acc[2] += 1
        newest = max(newest, int(s.timeStamp))
    seen[uuid] = newest
    return {pid: (round(a[0] / a[2]), round(a[1] / a[2])) for pid, a in sums.items()}


def pmon_usage(text: str, pids: set[str]) -> list[list[Any]]:
    """``[gpu index, pid, sm %, mem %]`` of the ``pids`` in ``nvidia-smi pmon -s u``'s
    output, columns found by its header (``# gpu pid type sm mem enc dec jpg ofa
    command``, 590.48; older drivers lack jpg/ofa). ``-`` is no sample in the interval:
    0 % where another process on that GPU has one, else not known (a MIG-sliced GPU
    prints ``-`` for every process, busy or not); a process in several intervals
    (``-c N``) keeps its newest."""
    cols: dict[str, int] = {}
    out: dict[tuple[str, int], list[Any]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "#":
            if "pid" in words and not cols:
                cols = {w: k for k, w in enumerate(words[1:])}
            continue
        if not {"gpu", "pid", "sm", "mem"} <= cols.keys() or len(words) < len(cols):
            continue
        pid = words[cols["pid"]]
        if pid not in pids:
            continue
        pcts = [_pmon_pct(words[cols[c]]) for c in ("sm", "mem")]
        out[(words[cols["gpu"]], int(pid))] = [words[cols["gpu"]], int(pid), *pcts]
    sampled = {row[0] for row in out.values() if row[2] is not None}
    return [
        [gpu, pid, *(v or 0 for v in row[2:])] for (gpu, pid), row in out.items() if gpu in sampled
    ]


def _pmon_pct(word: str) -> int | None:
    return int(word) if word.isdigit() else None


# The process call the driver's library has, chosen once: (symbol, struct fields). pynvml
# 13.x's nvmlDeviceGetComputeRunningProcesses is _v3 only and raises
# NVMLLibraryMismatchError (not an NVMLError) where the library lacks it; 12.535.x raises
# NVMLError_FunctionNotFound; neither tries _v2 or v1. Like nvitop (api/libnvml.py), look
# the symbols up and call the one there is with the struct that driver fills: _v3 (with
# usedGpuCcProtectedMemory where the R535 confidential-computing call exists without
# nvmlDeviceGetRunningProcessDetailList), else _v2, else the unversioned v1.
_PROC_V1 = (("pid", "c_uint"), ("usedGpuMemory", "c_ulonglong"))
_PROC_V2 = (*_PROC_V1, ("gpuInstanceId", "c_uint"), ("computeInstanceId", "c_uint"))
_PROC_V3_CC = (*_PROC_V2, ("usedGpuCcProtectedMemory", "c_ulonglong"))
_proc_api: list[Any] = []  # [(symbol, ctypes struct)] once chosen
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1  # usedGpuMemory under WDDM


def _has_symbol(nvml: Any, name: str) -> bool:
    try:
        nvml._nvmlGetFunctionPointer(name)
    except nvml.NVMLError:  # NVMLError_FunctionNotFound
        return False
    return True


def _choose_proc_api(nvml: Any) -> tuple[str, Any]:
    import ctypes

    def struct(layout: Sequence[tuple[str, str]]) -> Any:
        fields = [(name, getattr(ctypes, kind)) for name, kind in layout]
        return type("ProcessInfo", (ctypes.Structure,), {"_fields_": fields})

    base = "nvmlDeviceGetComputeRunningProcesses"
    if _has_symbol(nvml, base + "_v3"):
        cc = _has_symbol(nvml, "nvmlDeviceGetConfComputeMemSizeInfo") and not _has_symbol(
            nvml, "nvmlDeviceGetRunningProcessDetailList"
        )
        return base + "_v3", struct(_PROC_V3_CC if cc else _PROC_V2)
    if _has_symbol(nvml, base + "_v2"):
        return base + "_v2", struct(_PROC_V2)
    return base, struct(_PROC_V1)


def nvml_compute_processes(nvml: Any, handle: Any) -> list[tuple[int, int | None]]:
    """(pid, used bytes or None) of the compute processes on ``handle``, through whichever
    of _v3 / _v2 / v1 the library has. A binding without ``_nvmlGetFunctionPointer`` is
    asked through its own function."""
    import ctypes

    if not callable(getattr(nvml, "_nvmlGetFunctionPointer", None)):
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return [(p.pid, p.usedGpuMemory) for p in procs]
    if not _proc_api:
        _proc_api.append(_choose_proc_api(nvml))
    symbol, struct = _proc_api[0]
    fn = nvml._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == 0:
        return []
    if ret != NVML_ERROR_INSUFFICIENT_SIZE:
        raise nvml.NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes started in between
    buffer = (struct * count.value)()
    ret = fn(handle, ctypes.byref(count), buffer)
    if ret != 0:
        raise nvml.NVMLError(ret)
    out: list[tuple[int, int | None]] = []
    for i in range(count.value):
        used = buffer[i].usedGpuMemory
        out.append((buffer[i].pid, None if used == NVML_VALUE_NOT_AVAILABLE else used))
    return out


def _process_name(pid: int) -> str:
    # Inside an unprivileged container NVML returns host PIDs; like nvidia-smi we can only
    # look in our own /proc, and say [Not Found] when the PID is not there.
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode("utf-8", "replace")
    except OSError:
        return "[Not Found]"
    return argv0.replace(",", "?") or "[Not Found]"


# What a discovered server is asked for when no configured one gives the monitor's spec.
DISCOVERED_TARGET = {"filter": None, "info": ["/server_info", "/get_server_info"]}


SGLANG_DEFAULT_PORT = 30000  # ServerArgs.port
# A top-level ``port:`` of a ``--config`` YAML file (SGLang's ConfigArgumentMerger turns
# each key into ``--KEY VALUE``): ``port: 31613``, ``port: "31613"``, a comment after it.
_YAML_PORT = re.compile(r"""port[ \t]*:[ \t]*(["']?)(\d{1,5})\1[ \t]*(?:#.*)?""")


def sglang_ports() -> list[int]:
    """Ports of SGLang servers running here, from /proc/*/cmdline: ``python -m
    sglang.launch_server ...`` and ``sglang serve ...`` (the console script, 0.5.5+:
    ``.../bin/python .../bin/sglang serve --port N``). See ``server_port``."""
    return scan_servers()["sglang"]


def scan_servers(proc: str = "/proc") -> dict[str, list[int]]:
    """The ports of the SGLang and vLLM servers running here, from /proc/*/cmdline, in
    one pass: ``{"sglang": [...], "vllm": [...]}``."""
    found, _ = scan_server_processes(proc)
    return found


def scan_server_processes(
    proc: str = "/proc",
) -> tuple[dict[str, list[int]], list[protocol.ServerInfo]]:
    """``scan_servers``' ports, and each vLLM server's ``ServerInfo``: its API server's
    PID, the parallel sizes of its command line and the ``/dev/nvidiaN`` its process tree
    holds (its engine core and workers are its descendants: ``VLLM::EngineCore``,
    ``VLLM::Worker_TP0``, multiprocessing's spawn children, whatever their names). Of
    several processes on one port the lowest PID is taken for the server (its API server
    processes are its children)."""
    found: dict[str, set[int]] = {"sglang": set(), "vllm": set()}
    children: dict[int, list[int]] = {}
    vllm: dict[int, tuple[int, list[str]]] = {}  # port -> (pid, argv)
    sglang: dict[int, tuple[int, list[str]]] = {}  # port -> its launcher's (pid, argv)
    for entry in sorted(os.listdir(proc), key=lambda e: (len(e), e)):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                stat_text = f.read().decode("utf-8", "replace")
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        parent = _parent_pid(stat_text)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
        if is_sglang_server(argv):
            port = server_port(argv, f"{proc}/{entry}/cwd")
            found["sglang"].add(port)
            sglang.setdefault(port, (pid, argv[:-1] if argv and not argv[-1] else argv))
        elif is_vllm_server(argv):
            port = server_port(argv, f"{proc}/{entry}/cwd", VLLM_DEFAULT_PORT)
            found["vllm"].add(port)
            vllm.setdefault(port, (pid, argv[:-1] if argv and not argv[-1] else argv))
    infos = []
    ours: dict[int, tuple[int, ...] | None] = {}  # procfacts.held_device's, for this scan
    for port, (pid, argv) in sorted(vllm.items()):
        sizes = vllm_parallel(argv)
        tree = _tree(children, pid)
        minors = sorted({m for p in tree for m in procfacts.held_devices(proc, p, ours)})
        infos.append(
            protocol.ServerInfo(
                "vllm", port, pid, sizes.get("tp"), sizes.get("pp"), sizes.get("dp"), minors,
                argv=protocol.bounded_argv(argv),
            )
        )  # fmt: skip
    for port, (pid, argv) in sorted(sglang.items()):  # how it was started: a hang's fix
        infos.append(protocol.ServerInfo("sglang", port, pid, argv=protocol.bounded_argv(argv)))
    return {k: sorted(v) for k, v in found.items()}, infos


def _parent_pid(stat_text: str) -> int | None:
    """The PPID of ``/proc/<pid>/stat`` (after the command's closing parenthesis)."""
    words = stat_text.rpartition(")")[2].split()
    return int(words[1]) if len(words) > 1 and words[1].isdigit() else None


def _tree(children: dict[int, list[int]], pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


# vLLM's parallel sizes as its FlexibleArgumentParser reads them (vllm/engine/arg_utils.py
# 0.34.0: ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``,
# ``--data-parallel-size``/``-dp``; underscores for dashes accepted; the last one wins)
_VLLM_SIZES = {
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--pipeline-parallel-size": "pp",
    "-pp": "pp",
    "--data-parallel-size": "dp",
    "-dp": "dp",
}


def vllm_parallel(argv: list[str]) -> dict[str, int]:
    """``{"tp": 4, "pp": 2}``: the sizes a vLLM server's command line gives."""
    out: dict[str, int] = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        key = _VLLM_SIZES.get(name.replace("_", "-") if name.startswith("--") else name)
        if key is None:
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if value.isdigit() and 0 < int(value) <= 65536:
            out[key] = int(value)
    return out


VLLM_DEFAULT_PORT = 8000  # FrontendArgs.port (vllm/entrypoints/common/cli_args.py, 0.34.0)


def is_vllm_server(argv: list[str]) -> bool:
    """vLLM's OpenAI server: ``vllm serve ...`` (the console script, or ``python
    .../bin/vllm serve``) or ``python -m vllm.entrypoints.openai.api_server ...``. Its
    engine-core and worker processes (``VLLM::EngineCore``, multiprocessing children)
    have other command lines and are not servers of their own."""
    if any(a == "vllm.entrypoints.openai.api_server" for a in argv):
        return True
    python = bool(argv) and os.path.basename(argv[0]).startswith("python")
    for i in range(len(argv) - 1):
        if argv[i + 1] != "serve":
            continue
        script = os.path.basename(argv[i]) == "vllm" and (i == 0 or python)
        module = i > 0 and argv[i - 1] == "-m" and argv[i] in ("vllm", "vllm.entrypoints.cli.main")
        if script or module:
            return True
    return False


def server_port(argv: list[str], cwd: str, default: int = SGLANG_DEFAULT_PORT) -> int:
    """The port an SGLang or vLLM server's ``argv`` listens on, as both read it: the last
    ``--port N`` / ``--port=N``, else ``port:`` in the YAML of ``--config FILE`` (a
    relative FILE from the process's ``cwd``) where this agent can read it, else
    ``default`` (SGLang's 30000, vLLM's 8000). Both merge the config's arguments before
    the command line's (SGLang's ConfigArgumentMerger, vLLM's FlexibleArgumentParser), so
    those win."""
    port = None
    config = None
    for i, a in enumerate(argv):
        if a == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            port = int(argv[i + 1])
        elif a.startswith("--port=") and a[7:].isdigit():
            port = int(a[7:])
        elif a == "--config" and i + 1 < len(argv):  # as SGLang: only this spelling
            config = argv[i + 1]
    if port is None and config:
        port = _config_port(os.path.join(cwd, config))
    return port if port is not None and 0 < port < 65536 else default


def _config_port(path: str) -> int | None:
    """``port`` at the top level of a YAML file (no YAML parser on the target: the one
    line is enough); None when the file cannot be read or has none."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    port = None
    for line in text.splitlines():
        m = _YAML_PORT.fullmatch(line.rstrip())
        if m is not None:
            port = int(m.group(2))  # a key given twice: YAML keeps the last
    return port


def is_sglang_server(argv: list[str]) -> bool:
    """``sglang.launch_server`` anywhere, or ``sglang serve``: the console script of
    0.5.5+ (run as ``sglang serve`` or, through its shebang, ``python .../bin/sglang
    serve``), or a wrapper's ``python -m sglang.cli.main serve`` (SGLang's own
    ``sglang.cli.main`` has no ``__main__`` block up to 0.5.23: only the script runs it)."""
    if any("sglang.launch_server" in a for a in argv):
        return True
    python = bool(argv) and os.path.basename(argv[0]).startswith("python")
    for i in range(len(argv) - 1):
        if argv[i + 1] != "serve":
            continue
        script = os.path.basename(argv[i]) == "sglang" and (i == 0 or python)
        module = i > 0 and argv[i - 1] == "-m" and argv[i] in ("sglang", "sglang.cli.main")
        if script or module:
            return True
    return False


KMSG_WANTED = ("NVRM: Xid", "Out of memory", "oom-kill", "Killed process", "oom_reaper")


def open_kmsg(out: Output, path: str = "/dev/kmsg") -> int | None:
    """``path`` (/dev/kmsg) opened at its end, or None (said once: unprivileged
    containers can't)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
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


class KernelLog:
    """The kernel log: /dev/kmsg from its end (a character device: one record per read),
    or a file lines are appended to (the simulator's own kernel log, a test's: small),
    read line by line from its start, so a line written just before the agent opened it
    is not lost (the engine ignores lines it has seen). ``read()``: the wanted lines
    that arrived since the last call."""

    def __init__(self, path: str, fd: int, device: bool) -> None:
        self.path = path
        self.fd = fd
        self.device = device
        self._partial = b""

    @classmethod
    def open(cls, path: str, out: Output) -> KernelLog | None:
        fd = open_kmsg(out, path)
        if fd is None:
            return None
        try:
            device = stat.S_ISCHR(os.fstat(fd).st_mode)
        except OSError:
            device = True
        if not device:
            os.lseek(fd, 0, os.SEEK_SET)
        return cls(path, fd, device)

    def read(self) -> list[str]:
        if self.device:
            return read_kmsg(self.fd)
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = self._partial + b"".join(chunks)
        whole, _, self._partial = data.rpartition(b"\n")
        texts = whole.decode("utf-8", "replace").split("\n") if whole else []
        return [t for t in texts if any(w in t for w in KMSG_WANTED)]


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
    one_malloc_arena()
    signal.signal(signal.SIGTERM, lambda *_: _shutdown(0))
    signal.signal(signal.SIGHUP, lambda *_: _shutdown(0))
    out = Output(sys.stdout)
    agent = Agent(options, out)
    agent.start()
    # Main thread: read commands until stdin closes, which means the client is gone.
    for line in sys.stdin:
        agent.handle_command(line)
    _shutdown(0)
