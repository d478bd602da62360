"""Flight recorder: the last 30 minutes of one host in memory, written out around a critical alert.

``FlightRecorder.record(sample)`` keeps each sample as one compact JSON line (GPU values
as arrays in ``GPU_FIELDS`` order: about 2 KB for 8 GPUs, 4 KB with their processes), and
every ``CHUNK_SAMPLES`` lines compressed together with zlib (~200 B a line: 30 min of
8 GPUs at 1 Hz holds ~0.4 MB instead of ~7 MB of the dashboard's RSS, for ~1.4 ms a minute).
``on_alert(alert)`` keeps the alert; a CRITICAL one schedules a recording of
``before_s`` (10 min) before to ``after_s`` (1 min) after it. The monitor calls
``flush_due(now)`` after each sample: once the minute after has passed, the window is
written in one go as ``.jsonl.gz`` to ``$XDG_STATE_HOME/gpumon/recordings/`` (default
``~/.local/state``). ``flush_now()`` writes a pending recording at shutdown.

File format (one JSON object per line):

1. ``{"type": "header", "version": 1, "host", "created", "alert": {...}, "window": [t0, t1],
   "gpu_fields": [...], "process_fields": [...]}``
2. ``{"type": "sample", "host", "time", "source", "skipped_lines", "gpus": [[...], ...],
   "processes": [[...], ...]}`` and, where GPUs were listed but not read,
   ``"unreadable": [{"bus_id", "index", "reason", "said", "device"}, ...]``
   (``sample_to_json``; ``sample_from_json`` rebuilds the HostSample exactly, ``None``
   stays ``None``)
3. ``{"type": "alert", "key", "active", "acknowledged", "last_seen", **Alert.to_json()}``
4. ``{"type": "log", "time", "tag", "path", "backlog", "lines": [...], "dropped"}``: the new
   lines of a followed log (``record_log``; at most ``LOG_LINES_KEPT`` per read, the
   newest), so a replay's jobs pane and log alerts come from the lines as they came; the
   last read of each log before the window is included as backlog. The header's
   ``"jobs": [{"name", "gpus"}]`` names the jobs those lines belong to, and its
   ``"container"`` (the watched Proxmox CT id, ``null`` for none) tells a replay which
   processes are another container's, so its ``foreign_process`` alerts, the evidence of
   a held GPU, come back from the samples as they came live.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import logging
import math
import re
import time
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.alerts.store import Alert
from gpumon.backends.errors import GpumonError
from gpumon.backends.listeners import Listeners
from gpumon.backends.masking import mask_command
from gpumon.backends.model import (
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    Source,
    UnreadableGpu,
    iso_time,
)
from gpumon.backends.parsers.mig import mig_record, parse_mig_records
from gpumon.backends.paths import recordings_dir
from gpumon.backends.recording.oneshot import OneShotIncidents

log = logging.getLogger(__name__)

VERSION = 1
WRITTEN_MAX = 32  # paths of recordings this session remembers (the files stay)
GPU_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GpuSample))
PROCESS_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GpuProcess))
_GPU_INDEX = {name: i for i, name in enumerate(GPU_FIELDS)}
_HEALTH = GPU_FIELDS.index("health")
_PROBLEMS = GPU_FIELDS.index("problems")
_COMPRESS_LEVEL = 6
LOG_LINES_KEPT = 200  # per read of a log: a flood keeps its newest lines
LOG_READS_KEPT = 4096  # reads of all logs kept in memory
CHUNK_SAMPLES = 60  # sample lines compressed together in memory (a minute at 1 Hz)
_CHUNK_LEVEL = 6  # zlib: 20x on sample lines; level 1 is 14x for half the time


class RecordingError(GpumonError):
    """A file that is not a gpumon recording (or not gzip at all)."""


@dataclass(frozen=True, slots=True)
class Recording:
    """A loaded recording. ``truncated``: the file ended early; ``problems`` says what."""

    header: dict[str, Any]
    samples: list[HostSample]
    alerts: list[dict[str, Any]]
    truncated: bool = False
    problems: tuple[str, ...] = ()
    logs: list[dict[str, Any]] = field(default_factory=list)  # "log" lines, in order


def sample_to_json(sample: HostSample) -> dict[str, Any]:
    """A JSON-ready dict of ``sample``; GPUs and processes as arrays in field order."""
    gpus = []
    for gpu in sample.gpus:
        row: list[Any] = [getattr(gpu, name) for name in GPU_FIELDS]
        row[_HEALTH] = gpu.health.value
        row[_PROBLEMS] = list(gpu.problems)
        gpus.append(row)
    return {
        "type": "sample",
        "host": sample.host,
        "time": sample.time,
        "source": None if sample.source is None else sample.source.value,
        "skipped_lines": sample.skipped_lines,
        "gpus": gpus,
        "processes": [[getattr(p, name) for name in PROCESS_FIELDS] for p in sample.processes],
        **({"unreadable": [u.to_json() for u in sample.unreadable]} if sample.unreadable else {}),
        **({"mig": [mig_record(i) for i in sample.mig]} if sample.mig else {}),
    }


def sample_from_json(
    data: Mapping[str, Any],
    gpu_fields: tuple[str, ...] = GPU_FIELDS,
    process_fields: tuple[str, ...] = PROCESS_FIELDS,
) -> HostSample:
    """The HostSample ``sample_to_json`` made. Field lists come from the file's header, so
    a recording with fewer or more fields still loads (unknown ones are ignored).

    Raises ValueError / TypeError / KeyError for a malformed object.
    """
    gpus = []
    for row in data["gpus"]:
        values = {name: row[i] for i, name in enumerate(gpu_fields) if name in _GPU_INDEX}
        if "health" in values:
            values["health"] = Health(values["health"])
        if "problems" in values:
            values["problems"] = tuple(values["problems"])
        gpus.append(GpuSample(**values))
    processes = []
    for row in data.get("processes") or ():
        values = dict(zip(process_fields, row, strict=True))
        for name in ("gpus", "minors"):  # tuples, written as JSON arrays
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        if isinstance(values.get("command"), str):  # a recording older than the masking
            values["command"] = mask_command(values["command"])
        processes.append(GpuProcess(**{k: v for k, v in values.items() if k in PROCESS_FIELDS}))
    source = data.get("source")
    return HostSample(
        host=str(data["host"]),
        time=float(data["time"]),
        source=None if source is None else Source(source),
        gpus=tuple(gpus),
        processes=tuple(processes),
        skipped_lines=int(data.get("skipped_lines", 0)),
        unreadable=tuple(
            UnreadableGpu(
                None if u["bus_id"] is None else str(u["bus_id"]),
                None if u["index"] is None else int(u["index"]),
                str(u["reason"]),
                None if u.get("said") is None else str(u["said"]),
                bool(u.get("device", True)),
            )
            for u in data.get("unreadable") or ()
        ),
        mig=parse_mig_records(data.get("mig") or []),
    )


def _alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "type": "alert",
        "key": alert.key,
        "active": alert.active,
        "acknowledged": alert.acknowledged,
        "epoch": alert.time,
        "last_seen": alert.last_seen,
        **alert.to_json(),
    }


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# The recorder's own parts, never compared nor printed: no generated __eq__ or __repr__,
# each compiled at import on the one-shot's path (issue 41).
@dataclass(slots=True, eq=False, repr=False)
class _Chunk:
    """``CHUNK_SAMPLES`` sample lines, compressed: their times, and the lines joined by
    newlines (a JSON line has none of its own) through zlib."""

    times: array[float]
    blob: bytes

    def lines(self) -> list[str]:
        return zlib.decompress(self.blob).decode().split("\n")


@dataclass(eq=False, repr=False)  # as _Chunk
class _Pending:
    alert: Alert
    due: float
    path: Path


class FlightRecorder:
    """Keeps ``keep_s`` seconds of samples and alerts; writes one window per critical alert.

    ``written_listeners`` (``on_written`` among them) hear ``path`` after each file is
    written. Writing errors are logged and kept in ``last_error``; they never raise into
    the caller. ``max_samples`` bounds
    memory when the sampling interval is short.
    """

    def __init__(
        self,
        host: str,
        keep_s: float = 1800.0,
        clock: Callable[[], float] = time.time,
        *,
        before_s: float = 600.0,
        after_s: float = 60.0,
        max_samples: int = 3600,
        directory: Path | None = None,
        on_written: Callable[[Path], None] | None = None,
    ) -> None:
        self.host = host
        self.keep_s = keep_s
        self.clock = clock
        self.before_s = before_s
        self.after_s = after_s
        self.max_samples = max_samples
        self.directory = directory  # None: recordings_dir() when the alert comes
        self.written_listeners: Listeners[[Path]] = Listeners("recording listener")
        if on_written is not None:
            self.written_listeners.add(on_written)
        self.written: list[Path] = []  # the newest WRITTEN_MAX recordings, oldest first
        self._windows: dict[Path, tuple[float, float]] = {}  # written path -> its window
        self.last_error: str | None = None
        self.last_write_s: float | None = None  # seconds the last write took
        # The samples kept, oldest first: compressed chunks (the oldest's first ``_skip``
        # already dropped), then the newest lines as they are (fewer than CHUNK_SAMPLES).
        self._chunks: deque[_Chunk] = deque()
        self._skip = 0
        self._open_times: list[float] = []
        self._open_lines: list[str] = []
        self._count = 0
        self._alerts: deque[tuple[float, Alert]] = deque()
        self._logs: deque[tuple[float, str, dict[str, Any]]] = deque()  # (time, path, entry)
        self._pending: _Pending | None = None
        self.jobs: list[dict[str, Any]] = []  # [{"name", "gpus"}]: the header's "jobs"
        self.container: int | None = None  # the watched CT: the header's "container"
        # A one-shot command's: one recording per incident across its runs (``oneshot``)
        self.one_shot: OneShotIncidents | None = None
        self.reused: Path | None = None  # the earlier run's recording this run kept to

    def per_incident(self) -> None:
        """Record as a one-shot command (``check``, ``snapshot``) does: an incident an
        earlier run already recorded is not recorded again (``oneshot.OneShotIncidents``);
        call ``end_run`` when the run ends."""
        folder = self.directory or recordings_dir()
        self.one_shot = OneShotIncidents(folder / f".oneshot-{_safe(self.host)}.json")

    def end_run(self, active: Sequence[Alert]) -> None:
        """A one-shot run ends: remember the incidents open now (``active``) for the next."""
        if self.one_shot is None:
            return
        try:
            self.one_shot.close(active, self.clock())
        except OSError as e:
            self.last_error = f"cannot write {self.one_shot.file}: {e.strerror or e}"
            log.warning("%s: %s", self.host, self.last_error)

    @property
    def pending_path(self) -> Path | None:
        """Where the scheduled recording will be written, or None."""
        return None if self._pending is None else self._pending.path

    def recordings(self) -> list[tuple[float, float, Path]]:
        """(start, end, path) of the recordings this session wrote, oldest first, then the
        scheduled one: which recording holds an incident is the one whose window does."""
        out = [(*self._windows[p], p) for p in self.written if p in self._windows]
        pending = self._pending
        if pending is not None:
            out.append((*self._window(pending.alert), pending.path))
        return out

    def _window(self, alert: Alert) -> tuple[float, float]:
        return alert.time - self.before_s, alert.time + self.after_s

    def __len__(self) -> int:
        return self._count

    def recording_of(self, when: float) -> tuple[Path, bool] | None:
        """The recording whose window holds the time ``when`` (an alert's): (path, True)
        once written, (path, False) while it is pending; the newest when several do; None
        when no recording of this session holds it."""
        pending = self._pending
        if pending is not None and pending.alert.time - self.before_s <= when <= pending.due:
            return pending.path, False
        for path in reversed(self.written):
            start, end = self._windows.get(path, (math.inf, -math.inf))
            if start <= when <= end:
                return path, True
        return None

    def memory_bytes(self) -> int:
        """Approximate bytes held by the sample lines (for the status line and tests)."""
        chunks = sum(len(c.blob) + 8 * len(c.times) + 150 for c in self._chunks)
        return chunks + sum(len(line) + 90 for line in self._open_lines)

    def record(self, sample: HostSample) -> None:
        self._open_times.append(sample.time)
        self._open_lines.append(_dumps(sample_to_json(sample)))
        self._count += 1
        if len(self._open_lines) >= CHUNK_SAMPLES:
            blob = zlib.compress("\n".join(self._open_lines).encode(), _CHUNK_LEVEL)
            self._chunks.append(_Chunk(array("d", self._open_times), blob))
            self._open_times, self._open_lines = [], []
        horizon = sample.time - self.keep_s
        while self._count and (self._oldest_time() < horizon or self._count > self.max_samples):
            self._drop_oldest()

    def _oldest_time(self) -> float:
        return self._chunks[0].times[self._skip] if self._chunks else self._open_times[0]

    def _drop_oldest(self) -> None:
        self._count -= 1
        if not self._chunks:
            del self._open_times[0], self._open_lines[0]
            return
        self._skip += 1
        if self._skip == len(self._chunks[0].times):
            self._chunks.popleft()
            self._skip = 0

    def _sample_lines(self, start: float, end: float) -> Iterator[list[str]]:
        """The kept sample lines with ``start <= time <= end``, oldest first, a chunk's at
        a time (only the chunks that hold one are decompressed, one at a time)."""
        for i, chunk in enumerate(self._chunks):
            first = self._skip if i == 0 else 0
            times = chunk.times[first:]
            if any(start <= t <= end for t in times):
                lines = chunk.lines()[first:]
                yield [line for t, line in zip(times, lines, strict=True) if start <= t <= end]
        pairs = zip(self._open_times, self._open_lines, strict=True)
        yield [line for t, line in pairs if start <= t <= end]

    def record_log(
        self, tag: str, path: str, lines: Sequence[str], at: float, *, backlog: bool = False
    ) -> None:
        """Keep one read of the followed log ``path`` (its newest ``LOG_LINES_KEPT`` lines)."""
        if not lines:
            return
        kept = list(lines[-LOG_LINES_KEPT:])
        entry = {
            "type": "log",
            "time": at,
            "tag": tag,
            "path": path,
            "backlog": backlog,
            "lines": kept,
            "dropped": len(lines) - len(kept),
        }
        self._logs.append((at, path, entry))
        horizon = at - self.keep_s
        logs = self._logs
        while logs and (logs[0][0] < horizon or len(logs) > LOG_READS_KEPT):
            logs.popleft()

    def _log_lines(self, start: float, end: float) -> list[str]:
        """The log reads in the window, after the last read of each log before it (as
        backlog: what the log said when the window opened)."""
        before: dict[str, dict[str, Any]] = {}
        inside: list[str] = []
        for t, path, entry in self._logs:
            if t < start:
                before[path] = entry
            elif t <= end:
                inside.append(_dumps(entry))
        return [_dumps({**entry, "backlog": True}) for entry in before.values()] + inside

    def keep_alert(self, alert: Alert) -> None:
        """Keep ``alert`` for the windows written later, scheduling nothing (``gpumon
        bundle`` writes its own window)."""
        self._alerts.append((alert.time, alert))
        horizon = self.clock() - self.keep_s
        while self._alerts and self._alerts[0][0] < horizon:
            self._alerts.popleft()

    def on_alert(self, alert: Alert) -> None:
        """Keep ``alert``; a CRITICAL one schedules a recording unless one is pending."""
        self.keep_alert(alert)
        if alert.severity is Health.CRITICAL and self._pending is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(alert.time))
            name = f"{_safe(self.host)}-{stamp}-{_safe(alert.kind)}.jsonl.gz"
            folder = self.directory or recordings_dir()
            self._pending = _Pending(alert, alert.time + self.after_s, folder / name)

    def flush_due(self, now: float | None = None) -> Path | None:
        """Write the pending recording once its minute after has passed; the path, or None."""
        pending = self._pending
        now = self.clock() if now is None else now
        if pending is None or now < pending.due:
            return None
        return self._write(pending)

    def flush_now(self) -> Path | None:
        """Write the pending recording now (shutdown), with what there is."""
        return None if self._pending is None else self._write(self._pending)

    def _write(self, pending: _Pending) -> Path | None:
        self._pending = None
        if self.one_shot is not None:
            kept = self.one_shot.recording_of(pending.alert, self.clock())
            if kept is not None:  # an earlier run recorded this incident: one is enough
                self.reused = kept
                return None
        path = self.write_window(pending.alert, pending.path)
        if path is not None and self.one_shot is not None:
            self.one_shot.wrote(pending.alert, path)
        if path is not None:
            start, end = self._window(pending.alert)
            self.written = [*self.written[-(WRITTEN_MAX - 1) :], path]
            self._windows = {p: self._windows.get(p, (start, end)) for p in self.written}
            self.written_listeners.emit(path)
        return path

    def write_window(self, alert: Alert, path: Path) -> Path | None:
        """Write the window around ``alert`` (``before_s`` before to ``after_s`` after it,
        what is kept of it) to ``path`` now; the path, or None when it could not be written
        (``last_error`` says why). Neither remembered in ``written`` nor heard by the
        listeners: ``gpumon bundle`` writes one for its archive, not as an incident's."""
        start, end = self._window(alert)
        header = {
            "type": "header",
            "version": VERSION,
            "host": self.host,
            "created": iso_time(time.time()),
            "alert": _alert_json(alert),
            "window": [start, end],
            "gpu_fields": list(GPU_FIELDS),
            "process_fields": list(PROCESS_FIELDS),
            "jobs": self.jobs,
            "container": self.container,
        }
        parts = itertools.chain(
            [[_dumps(header)]],
            self._sample_lines(start, end),  # lazily: one chunk's lines at a time
            [[_dumps(_alert_json(a)) for t, a in self._alerts if start <= t <= end]],
            [self._log_lines(start, end)],
        )
        began = time.perf_counter()
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A part at a time: the window's text never exists whole (a 10-minute window
            # of 8 GPUs is ~2.6 MB of JSON, which the dashboard's RSS would keep).
            with gzip.GzipFile(tmp, "wb", _COMPRESS_LEVEL, mtime=0) as out:
                for part in parts:
                    if part:
                        out.write(("\n".join(part) + "\n").encode())
            tmp.replace(path)
        except OSError as e:
            self.last_error = f"cannot write {path}: {e.strerror or e}"
            log.warning("%s: %s", self.host, self.last_error)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return None
        self.last_write_s = time.perf_counter() - began
        return path


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "host"


def host_recordings(host: str, folder: Path | None = None) -> list[Path]:
    """The recordings the flight recorder wrote of ``host`` in ``folder`` (default
    ``recordings_dir()``), newest first: their names are ``HOST-YYYYmmdd-HHMMSS-KIND``.
    Another host whose name begins the same may be among them: its header says."""
    folder = folder or recordings_dir()
    try:
        found = list(folder.glob(f"{_safe(host)}-*.jsonl.gz"))
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name.removeprefix(_safe(host)), reverse=True)


def load_recording(path: Path) -> Recording:
    """Read a recording. A truncated file keeps what could be read (``truncated``, ``problems``).

    Raises RecordingError when the file is not gzip, has no valid header, or is a newer
    version; OSError when it cannot be read.
    """
    raw = bytearray()
    problems: list[str] = []
    truncated = False
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 16):
                raw += chunk
    except gzip.BadGzipFile as e:
        raise RecordingError(f"{path}: not a gzip file ({e})") from None
    except (EOFError, zlib.error) as e:
        truncated = True
        problems.append(f"file is truncated or damaged ({e}); kept what could be read")
    lines = bytes(raw).split(b"\n")
    if not lines or not lines[0].strip():
        raise RecordingError(f"{path}: empty recording")
    try:
        header = untrusted.loads(lines[0])
    except ValueError:
        raise RecordingError(f"{path}: first line is not a JSON header") from None
    if not isinstance(header, dict) or header.get("type") != "header":
        raise RecordingError(f"{path}: first line is not a gpumon recording header")
    if header.get("version") != VERSION:
        raise RecordingError(f"{path}: unsupported recording version {header.get('version')!r}")
    gpu_fields = tuple(header.get("gpu_fields") or GPU_FIELDS)
    process_fields = tuple(header.get("process_fields") or PROCESS_FIELDS)
    samples: list[HostSample] = []
    alerts: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = untrusted.loads(line)
            if obj.get("type") == "sample":
                samples.append(sample_from_json(obj, gpu_fields, process_fields))
            elif obj.get("type") == "alert":
                alerts.append(obj)
            elif obj.get("type") == "log":
                logs.append(_log_from_json(obj))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            last = number == len(lines) and truncated
            problems.append(f"line {number}: {'cut off' if last else 'unreadable'} ({e})")
    return Recording(header, samples, alerts, truncated, tuple(problems), logs)


def _log_from_json(obj: dict[str, Any]) -> dict[str, Any]:
    """A "log" line checked: time, tag, path, backlog and lines of the right types (else
    TypeError, and the loader skips the line)."""
    lines = obj.get("lines")
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise TypeError("log lines are not a list of strings")
    tag, path = obj.get("tag"), obj.get("path")
    if not isinstance(tag, str) or not isinstance(path, str):
        raise TypeError("log tag or path is not a string")
    return {
        "time": float(obj["time"]),
        "tag": tag,
        "path": path,
        "backlog": bool(obj.get("backlog")),
        "lines": lines,
    }
