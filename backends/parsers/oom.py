"""OOM and crash events in job logs (PyTorch, CUDA, NCCL, SGLang), one scanner per log file.

``LogScanner`` is fed the lines of one log in order and returns ``LogEvent``s. Formats:
docs/formats.md sections 5 (OOM shapes) and 6.11 (SGLang crash lines). Rules:

- A Python traceback is ONE event, raised at its key line (the exception line that ends
  it; ``Traceback (most recent call last):`` starts it). Frame lines are never matched.
  ``[rankN]:`` / ``[defaultN]:`` (torchrun) and ``(VllmWorker rank=N pid=M)`` prefixes
  group lines, so interleaved ranks keep separate tracebacks.
- Memory failures (CUDA OOM, CUDA runtime OOM, ``*_STATUS_ALLOC_FAILED``, NCCL
  ``Cuda failure 'out of memory'``, SGLang ``Not enough memory`` / KV allocator failures /
  graph capture failure, vLLM's KV cache that does not fit at start-up: ``vllm_kv_memory``)
  are raised at once. Other uncaught exceptions are ``job_crashed``
  (``sglang_error`` in an SGLang process), raised when their traceback ends or on
  ``flush()``, so an ``out of memory`` detail further down (NCCL prints it lines after the
  exception) turns the crash into a ``cuda_oom`` instead of adding a second event.
- Crash reports within ``AFTERMATH_LINES`` lines after a memory failure (SGLang
  ``SIGQUIT received``, torchrun ``ChildFailedError``, a chained exception) belong to it.
- ``KV cache pool is full. Retract requests.`` is a WARNING (``kv_cache_full``).
- SGLang's watchdog (``sglang_error``): the hard one (``Watchdog timeout
  (self.watchdog_timeout=300)`` up to 0.5.6, ``Scheduler watchdog timeout (…, self.soft=False)``
  from 0.5.7) is CRITICAL: five seconds later it SIGQUITs the server, and that shutdown
  belongs to it. The soft one (``--soft-watchdog-timeout``, ``self.soft=True``, from any of
  the server's processes) only dumps stacks while the server keeps running: a WARNING.
- The GPU a message names is the process's own CUDA ordinal. It is translated through
  ``CUDA_VISIBLE_DEVICES`` (given, or seen earlier in the log as ``CUDA_VISIBLE_DEVICES=5,6,7``);
  when that is unknown the event says so in ``gpu_note``.

Cheap on ordinary lines: a prefilter of substring tests rejects a line unless it holds a
rare keyword or a traceback is open. Never raises on arbitrary text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import Health, parse_visible_devices

AFTERMATH_LINES = 100
STALE_LINES = 200  # an open traceback that gets no line for this long is closed
MAX_MESSAGE = 240


# The same keywords as one regex, for the agent: in a flood of log lines it keeps the
# lines matching this (plus the newest) so an OOM line is never among those dropped.
# Literal alternatives only (the agent searches them as bytes): "atchdog timeout" is both
# SGLang's "Watchdog timeout" (<= 0.5.6) and "Scheduler watchdog timeout" (0.5.7+).
KEEP_PATTERN = (
    r"of memory|OutOfMemory|Traceback|enough memory|ALLOC_FAILED|OUT_OF_MEMORY|"
    r"cudaErrorMemory|KV cache pool|CUDA_VISIBLE_DEVICES|hit an exception|crashed with exit|"
    r"sigquit|SIGQUIT|atchdog timeout|Health check failed|Capture cuda graph|ChildFailedError|"
    # stalled collectives and torchrun's restarts (parsers/collective.py KEEP_WORDS)
    r"collective operation timeout|watchdog got stuck|dump signal due to a collective|"
    r"NCCL operations have failed|attempts left; will restart|first observed failure|"
    r"rank      :|exitcode  :|"
    # vLLM's start-up: no memory left for its KV cache (_VLLM_KV_MEMORY)
    r"for the cache blocks|stored in KV cache|available KV cache memory"
)


def _interesting(line: str) -> bool:
    """True when ``line`` holds a keyword that every event line (or traceback start) has.

    Plain substring tests: on ~100-character lines they beat one alternation regex by ~2x.
    """
    return (
        "of memory" in line  # out of memory / Out of memory / Prefill out of memory
        or "OutOfMemory" in line
        or "Traceback" in line
        or "enough memory" in line
        or "ALLOC_FAILED" in line
        or "OUT_OF_MEMORY" in line
        or "cudaErrorMemory" in line
        or "KV cache pool" in line
        or "CUDA_VISIBLE_DEVICES" in line
        or "hit an exception" in line
        or "crashed with exit" in line
        or "sigquit" in line
        or "SIGQUIT" in line
        or "atchdog timeout" in line  # Watchdog (<= 0.5.6) / Scheduler watchdog (0.5.7+)
        or "Health check failed" in line
        or "Capture cuda graph" in line
        or "ChildFailedError" in line
        or "for the cache blocks" in line
        or "stored in KV cache" in line
        or "available KV cache memory" in line
    )


_GROUP_PREFIX = lazy_pattern(
    r"\[(?:rank|default)(\d{1,5})\]:\s?"
    r"|\((?:VllmWorker|RayWorkerWrapper) rank=(\d{1,5})[^)]{0,40}\)\s"
)
_SGLANG_PREFIX = lazy_pattern(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?((?: [A-Z_]+\d+)*)\] ")
_RAY_PREFIX = lazy_pattern(r"\((?:\w+ )?pid=\d{1,10}(?:, ip=[0-9a-fA-F.:]{1,45})?\)\s")

_MEMORY_FAILURE = lazy_pattern(
    r"(?P<torch>torch\.(?:cuda\.)?OutOfMemoryError\b|\b(?:CUDA|HIP|XPU) out of memory\."
    r"|\bAllocation on device \d{1,4} would exceed allowed memory\. \(out of memory\))"
    r"|(?P<runtime>CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation)"
    r"|(?P<lib>\b(?:CUBLAS|CUDNN|CUSOLVER|CUSPARSE|CUFFT|CURAND)_STATUS_ALLOC_FAILED\b)"
    r"|(?P<nccl>Cuda failure (?:\d{1,4} )?'out of memory')"
    r"|(?P<startup>Not enough memory\. Please try to increase --mem-fraction-static)"
    r"|(?P<kvalloc>\b(?:Prefill out|Decode out|Out) of memory\. Try to lower your batch size)"
    r"|(?P<graph>Capture cuda graph failed)"
    # vLLM's own words (docs/formats.md 6.16): the KV cache does not fit at start-up, and
    # its warm-up's CUDA OOM (vllm/v1/worker/gpu_model_runner.py, 0.8.5-0.34.0)
    r"|(?P<vllmkv>No available memory for the cache blocks\."
    r"|is larger than the maximum number of tokens that can be stored in KV cache"
    r"|KV cache is needed, which is larger than the available KV cache memory)"
    r"|(?P<vllmwarm>CUDA out of memory occurred when warming up)"
)
# utils/watchdog.py (0.5.7+): f"{debug_name} watchdog timeout ({self.watchdog_timeout=},
# {self.soft=})"; scheduler_runtime_checker_mixin.py (<= 0.5.6): f"Watchdog timeout
# ({self.watchdog_timeout=})". The timeout prints as 300 (the default) or 300.0 (from the CLI).
_WATCHDOG = lazy_pattern(
    r"(?:\b(?P<who>[A-Z]\w{0,40}) watchdog|\bWatchdog) timeout "
    r"\(self\.watchdog_timeout=(?P<s>\d{1,9}(?:\.\d{1,6})?)(?:, self\.soft=(?P<soft>True|False))?\)"
)
_KV_FULL = lazy_pattern(r"KV cache pool is full\. Retract requests|Decode out of memory happened")
_CRASH_LINE = lazy_pattern(
    r"(?P<sub>Subprocess \S{1,80} \(pid=\d{1,10}\) crashed with exit code -?\d{1,4})"
    r"|(?P<sigquit>SIGQUIT received\.|Received sigquit from a child process)"
    r"|(?P<health>Health check failed\.)"
    r"|(?P<child>ChildFailedError)"
)
# Every `X hit an exception: {traceback}` of SGLang 0.4.3-0.5.23; the Multi*Router ones
# run with --tokenizer-worker-num > 1 (managers/multi_tokenizer_mixin.py).
_HIT = lazy_pattern(
    r"(Scheduler|DetokenizerManager|TokenizerManager|DataParallelController"
    r"|MultiTokenizerRouter|MultiDetokenizerRouter|TpModelWorkerClient|GrpcRequestManager)"
    r" hit an"
)
_CVD = lazy_pattern(r"CUDA_VISIBLE_DEVICES['\"]?\s{0,3}[=:]\s{0,3}['\"]?([A-Za-z0-9,\-]{0,400})")
_GPU_NUMBER = (
    lazy_pattern(r"\bGPU (\d{1,4}) has a total capaci?ty"),
    lazy_pattern(r"\bAllocation on device (\d{1,4}) would exceed"),  # cudaMallocAsync backend
    lazy_pattern(r"\(GPU (\d{1,4}); "),
    lazy_pattern(r"^\S{1,100}:\d{1,10}:\d{1,10} \[(\d{1,4})\] "),  # NCCL: host:pid:tid [dev]
    lazy_pattern(r"\b(?:cuda|xpu|hip):(\d{1,4})\b"),
    lazy_pattern(r"\bGPU ?(\d{1,4})\b"),
)
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_CONTINUATION = lazy_pattern(
    r"nccl\w{0,40}Error:|Last error:|Cuda failure|CUDA kernel errors might|For debugging consider"
    r"|Compile with `TORCH_USE|Try to allocate \d|Available tokens:|Possible solutions:|\d\. "
)
_TRIM_AFTER = lazy_pattern(
    r" is free\.| Of the allocated memory| If reserved (?:but unallocated )?memory"
)
# ValueError: ... / torch.AcceleratorError: ... / torch._dynamo.exc.Unsupported: ...
_EXCEPTION_LINE = lazy_pattern(
    r"(?:[A-Za-z_]\w{0,60}\.){0,8}[A-Za-z_]\w{0,80}(?:Error|Exception|Interrupt|Exit|Failure)\b"
    r"|(?:[a-z_]\w{0,60}\.){1,8}[A-Z]\w{0,80}:"
)
# What a memory failure tried and had free (formats.md 5.1's sizes; the lenient units of
# other allocators too): read here, said by the headline from the bytes (``size_words``).
_SIZE_TEXT = r"([\d.]{1,20}) ?(bytes|[KMGT]?i?B)\b"
_TRIED = lazy_pattern(rf"Tried to allocate {_SIZE_TEXT}", re.IGNORECASE)
_FREE = lazy_pattern(rf"of which {_SIZE_TEXT} (?:is )?free", re.IGNORECASE)
# c10/cuda/CUDACachingAllocator.cpp (torch 2.1 and later): one sentence per NVML process on the
# GPU, "Including non-PyTorch memory, this process has {size} memory in use. " for its own
# PID, else "Process {pid} has {size} memory in use. " (inside an LXC its own too: NVML
# gives the host's PID, which getpid() in the container never equals).
_IN_USE = lazy_pattern(
    rf"(?:Process (\d{{1,10}})|this process) has {_SIZE_TEXT} memory in use", re.IGNORECASE
)
_POWER = {"K": 1, "M": 2, "G": 3, "T": 4}
_SOURCE = ("raise ", "except ", 'File "', "#")
_NOT_CRASHES = ("KeyboardInterrupt", "SystemExit", "GeneratorExit")


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One event in a log. ``message`` is the key line, prefixes stripped and trimmed.

    ``local_gpu`` is the device number the process named; ``gpu`` the physical index when
    it could be translated (``gpu_uuid`` when CUDA_VISIBLE_DEVICES names UUIDs); ``gpu_note``
    says how (or that it could not be). ``context`` is e.g. ``rank 1`` or
    ``SGLang Scheduler TP0``.

    A memory failure's numbers where its line has PyTorch's (formats.md 5.1):
    ``tried_bytes`` (``Tried to allocate 2.00 GiB``) and ``free_bytes`` (``of which 90.00
    MiB is free``); without either, ``detail``: its words after "out of memory" (None:
    none). What PyTorch said each process on the GPU held: ``in_use_bytes``, its own
    (``this process has 93.70 GiB memory in use``), ``in_use_by_pid`` the others' as
    (PID, bytes) (``Process 2418873 has …``: inside an LXC the job's own under its host
    PID). ``health_check``: SGLang's ``Health check failed.``
    """

    kind: str  # cuda_oom | kv_cache_full | sglang_error | job_crashed | vllm_kv_memory
    severity: Health
    message: str
    line_no: int  # 1-based, of the key line, counted from the first line fed
    local_gpu: int | None = None
    gpu: int | None = None
    gpu_uuid: str | None = None
    gpu_note: str = ""
    context: str | None = None
    tried_bytes: int | None = None
    free_bytes: int | None = None
    detail: str | None = None
    health_check: bool = False
    in_use_bytes: int | None = None
    in_use_by_pid: tuple[tuple[int, int], ...] = ()

    @property
    def text(self) -> str:
        """One line for a person: context, the key line and the GPU note."""
        head = f"{self.context}: {self.message}" if self.context else self.message
        return f"{head} [{self.gpu_note}]" if self.gpu_note else head


def engine_event(event: LogEvent, engine: str) -> LogEvent:
    """``event`` of a serving engine's log as that engine's own: a CUDA OOM in a vLLM
    server's log is ``vllm_oom``, whose fix is vLLM's (alerts/kinds.py). Every other field
    is kept: the bytes it tried, the free and in-use figures the headline names."""
    if engine != "vllm" or event.kind != "cuda_oom":
        return event
    return replace(event, kind="vllm_oom")


class _Group:
    """Traceback state of one prefix group (one rank, or the unprefixed lines)."""

    __slots__ = ("chain", "context", "cvd", "failure", "pending", "state", "tail")

    def __init__(self) -> None:
        self.state = 0  # 0 idle, 1 in frames, 2 after the exception line
        self.chain = False  # a chain marker was seen: the next Traceback continues it
        self.failure = False  # a memory failure was raised for this chain
        self.pending: LogEvent | None = None  # crash raised when the traceback ends
        self.context: str | None = None
        self.cvd: str | None = None
        self.tail = 0


class LogScanner:
    """Stateful scanner for one log file; feed it every line, in order."""

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        self.cuda_visible_devices = cuda_visible_devices  # e.g. from /proc/PID/environ
        self.line_no = 0
        self._groups: dict[str, _Group] = {}
        self._open = 0  # groups with state != 0
        self._last_failure_line = -(10**9)
        self._last_traceback_line = 0  # last line that belonged to an open traceback

    # --- public ---------------------------------------------------------------------
    def feed(self, line: str) -> list[LogEvent]:
        return self.scan((line,))

    def scan(self, lines: Iterable[str]) -> list[LogEvent]:
        """Events in ``lines`` (no trailing newlines needed). Pending crashes stay pending."""
        out: list[LogEvent] = []
        for line in lines:
            self.line_no += 1
            if self._open or _interesting(line):
                self._line(line.rstrip("\r\n"), out)
        return out

    def flush(self) -> list[LogEvent]:
        """Raise crashes whose traceback may still continue (call at the end of a read)."""
        out: list[LogEvent] = []
        for group in self._groups.values():
            if group.pending is not None:
                out.append(group.pending)
                group.pending = None
        return out

    def translate(self, local: int, group: str = "") -> tuple[int | None, str | None, str]:
        """(physical index, uuid, note) for process-local device ``local``."""
        g = self._groups.get(group)
        value = (g.cvd if g is not None else None) or self.cuda_visible_devices
        devices = parse_visible_devices(value)
        if devices is None:
            return None, None, f"GPU {local} (process-local; CUDA_VISIBLE_DEVICES unknown)"
        if local >= len(devices):
            return None, None, f"GPU {local} (not in CUDA_VISIBLE_DEVICES={value})"
        entry = devices[local]
        if isinstance(entry, int):
            return entry, None, f"process GPU {local} = GPU {entry} (CUDA_VISIBLE_DEVICES={value})"
        return None, entry, f"process GPU {local} = {entry}"

    # --- one line ---------------------------------------------------------------------
    def _line(self, line: str, out: list[LogEvent]) -> None:
        key, context, text = "", None, line
        m = _GROUP_PREFIX.match(line)
        if m is not None:
            rank = m.group(1) or m.group(2)
            key, context, text = f"rank{rank}", f"rank {rank}", line[m.end() :]
        group = self._groups.get(key)
        if group is not None and group.state:
            self._last_traceback_line = self.line_no
            if self._traceback_line(group, key, text, out):
                return
        else:
            if self._open and self.line_no - self._last_traceback_line > STALE_LINES:
                for stale in self._groups.values():  # a traceback cut off: close it
                    if stale.state:
                        self._end(stale, out)
            if not _interesting(text):
                return
        self._plain_line(key, context, text, out)

    def _group(self, key: str) -> _Group:
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) > 4096:  # hostile input: bounded
                self._groups.clear()
                self._open = 0
            group = self._groups[key] = _Group()
        return group

    def _set_state(self, group: _Group, state: int) -> None:
        self._open += (state != 0) - (group.state != 0)
        group.state = state
        group.tail = 0

    def _traceback_line(self, group: _Group, key: str, text: str, out: list[LogEvent]) -> bool:
        """Handle a line of an open traceback; False when it ended it (process as plain)."""
        if group.state == 1:
            if not text.strip() or text[0] in " \t" or text.startswith("Traceback ("):
                return True  # frame, source or caret line (or a blank one)
            if _MEMORY_FAILURE.search(text) is None and _EXCEPTION_LINE.match(text) is None:
                return False  # another thread's output in between: a plain line
            self._set_state(group, 2)
            self._key_line(group, key, text, out)
            return True
        group.tail += 1
        stripped = text.strip()
        if text.startswith("Traceback (") and group.chain:
            group.chain = False
            self._set_state(group, 1)
            return True
        if stripped.startswith(_CHAIN):
            group.chain = True
            return True
        continuation = not stripped or text[0] in " \t" or _CONTINUATION.match(stripped) is not None
        if continuation and group.tail <= 12:
            m = _MEMORY_FAILURE.search(text)
            if m is not None and not group.failure:
                self._raise_failure(group, key, stripped, m, out)
            return True
        self._end(group, out)
        return False

    def _end(self, group: _Group, out: list[LogEvent]) -> None:
        if group.pending is not None:
            out.append(group.pending)
        group.pending, group.failure, group.chain, group.context = None, False, False, None
        self._set_state(group, 0)

    def _plain_line(self, key: str, context: str | None, text: str, out: list[LogEvent]) -> None:
        if "Traceback (most recent call last)" in text:
            group = self._group(key)
            if group.state:
                self._end(group, out)
            hit = _HIT.search(text)
            if hit is not None:
                sglang = _sglang_context(text)
                group.context = f"SGLang {hit.group(1)}{sglang}"
            else:
                group.context = context
            self._set_state(group, 1)
            return
        m = _MEMORY_FAILURE.search(text)
        if m is not None:
            if not text.lstrip().startswith(_SOURCE):  # source code shown outside a traceback
                self._raise_failure(self._group(key), key, _clean(text), m, out, context)
            return
        if "CUDA_VISIBLE_DEVICES" in text:
            cvd = _CVD.search(text)
            if cvd is not None and parse_visible_devices(cvd.group(1)) is not None:
                if key:
                    self._group(key).cvd = cvd.group(1)
                else:
                    self.cuda_visible_devices = cvd.group(1)
            return
        if _KV_FULL.search(text) is not None:
            out.append(LogEvent("kv_cache_full", Health.WARNING, _trim(_clean(text)), self.line_no))
            return
        watchdog = _WATCHDOG.search(text) if "atchdog timeout" in text else None
        if watchdog is not None:
            self._watchdog(watchdog, text, context, out)
            return
        crash = _CRASH_LINE.search(text)
        if crash is None:
            return
        if crash.group("health"):
            message = _trim(_clean(text))
            out.append(
                LogEvent("sglang_error", Health.WARNING, message, self.line_no, health_check=True)
            )
            return
        if self.line_no - self._last_failure_line <= AFTERMATH_LINES:
            return  # the shutdown that follows a memory failure already raised
        kind = "job_crashed" if crash.group("child") else "sglang_error"
        severity = Health.WARNING if kind == "job_crashed" else Health.CRITICAL
        out.append(LogEvent(kind, severity, _trim(_clean(text)), self.line_no, context=context))

    def _watchdog(
        self, m: re.Match[str], text: str, context: str | None, out: list[LogEvent]
    ) -> None:
        """SGLang's watchdog line: hard (the server is killed) or soft (a dump only)."""
        who = m.group("who") or "Scheduler"  # <= 0.5.6 only the scheduler had one
        seconds = f"{float(m.group('s')):g}"
        process = "scheduler" if who == "Scheduler" else who
        ctx = context or f"SGLang {who}{_sglang_context(text.strip())}"
        if m.group("soft") == "True":
            message = f"SGLang watchdog dump (soft): the {process} was stuck {seconds} s"
            out.append(LogEvent("sglang_error", Health.WARNING, message, self.line_no, context=ctx))
            return
        message = (
            f"SGLang watchdog: the {process} was stuck {seconds} s; "
            "the server is being killed (SIGQUIT)"
        )
        self._last_failure_line = self.line_no  # the SIGQUIT shutdown that follows is this
        out.append(LogEvent("sglang_error", Health.CRITICAL, message, self.line_no, context=ctx))

    def _key_line(self, group: _Group, key: str, text: str, out: list[LogEvent]) -> None:
        """The exception line that ends a traceback's frames."""
        stripped = text.strip()
        m = _MEMORY_FAILURE.search(text)
        if m is not None:
            if not group.failure:
                self._raise_failure(group, key, stripped, m, out)
            return
        if group.failure or group.pending is not None or stripped.startswith(_NOT_CRASHES):
            return
        if self.line_no - self._last_failure_line <= AFTERMATH_LINES:
            return
        sglang = group.context is not None and group.context.startswith("SGLang")
        kind = "sglang_error" if sglang else "job_crashed"
        severity = Health.CRITICAL if sglang else Health.WARNING
        group.pending = LogEvent(
            kind, severity, _trim(stripped), self.line_no, context=group.context
        )

    def _raise_failure(
        self,
        group: _Group,
        key: str,
        text: str,
        m: re.Match[str],
        out: list[LogEvent],
        context: str | None = None,
    ) -> None:
        torch = m.group("torch") or m.group("runtime") or m.group("lib") or m.group("vllmwarm")
        kind = "cuda_oom" if torch or m.group("nccl") else ""
        kind = kind or ("vllm_kv_memory" if m.group("vllmkv") else "sglang_error")
        message = _trim(text)
        line_no = self.line_no
        if group.pending is not None:  # the crash turned out to be a memory failure
            message = _trim(f"{text} — {group.pending.message}")
            line_no = group.pending.line_no
            group.pending = None
        local = _gpu_number(text)
        gpu, uuid, note = self.translate(local, key) if local is not None else (None, None, "")
        group.failure = group.state != 0
        self._last_failure_line = self.line_no
        ctx = group.context if group.state else context
        tried, free = _size(_TRIED.search(message)), _size(_FREE.search(message))
        own, by_pid = _in_use(text)
        detail = None
        if tried is None and free is None:
            detail = message.partition("out of memory")[2].strip(" .:;,") or None
        out.append(
            LogEvent(
                kind,
                Health.CRITICAL,
                message,
                line_no,
                local,
                gpu,
                uuid,
                note,
                ctx,
                tried_bytes=tried,
                free_bytes=free,
                detail=detail,
                in_use_bytes=own,
                in_use_by_pid=by_pid,
            )
        )


def _in_use(text: str) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """What an OOM line says its own process (``this process has``) and each other
    process (``Process 2418873 has``) held on the GPU, in bytes."""
    own: int | None = None
    by_pid: list[tuple[int, int]] = []
    for m in _IN_USE.finditer(text):
        size = _size_of(m.group(2), m.group(3))
        if size is None:
            continue
        if m.group(1) is None:
            own = size
        else:
            by_pid.append((int(m.group(1)), size))
    return own, tuple(by_pid)


def _size(m: re.Match[str] | None) -> int | None:
    """Bytes of a size ``_TRIED`` or ``_FREE`` found (``2.00 GiB``, ``0 bytes``): PyTorch's
    ``format_size`` spells them in powers of 1024 (formats.md 5.1). A unit says the size
    is above the one below it (exactly 1 GiB is ``1024.00 MiB``): ``1.00 GiB`` is read as
    a byte more than 1 GiB, so that ``size_words`` says it in GiB again."""
    return None if m is None else _size_of(m.group(1), m.group(2))


def _size_of(number_text: str, unit: str) -> int | None:
    try:
        number = float(number_text)
    except ValueError:
        return None
    power: int = _POWER.get(unit[0].upper(), 0)
    size = round(number * (1 << 10 * power))
    return max(size, (1 << 10 * power) + 1) if 1 <= power <= 3 else size


def _gpu_number(text: str) -> int | None:
    for pattern in _GPU_NUMBER:
        m = pattern.search(text)
        if m is not None:
            return int(m.group(1))
    return None


def _sglang_context(text: str) -> str:
    m = _SGLANG_PREFIX.match(text)
    return m.group(1) if m is not None else ""


def _clean(text: str) -> str:
    """The message without SGLang's ``[date time TP0]`` or Ray's ``(pid=N)`` prefix."""
    text = text.strip()
    m = _SGLANG_PREFIX.match(text) or _RAY_PREFIX.match(text)
    return text[m.end() :] if m is not None else text


def _trim(text: str) -> str:
    """One line of at most MAX_MESSAGE characters; an allocator message ends at "is free."."""
    text = " ".join(text.split())
    m = _TRIM_AFTER.search(text)
    if m is not None:
        text = text[: m.end()] if m.group(0) == " is free." else text[: m.start()]
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
