"""Following log files on the target (standard library only, Python 3.8): the agent's
``LogTail``, shipped beside ``agent`` and ``protocol``.

New lines only, through rotation and truncation, with a bounded backlog at start. A log
that floods (a training loop printing every step, 200,000 lines a second and more) must
not delay its own OOM line: past ``LOG_MAX_LINES`` lines in one poll the lines are not
split and decoded one by one; the chunk is searched as bytes for the ``keep`` keywords
(each a C-speed ``bytes.find``) and only those lines and the newest ``LOG_FLOOD_NEWEST``
are sent, with the count of the rest. A log written faster than ``LOG_SCAN_BYTES`` per poll
is skipped ahead to its newest bytes, and the bytes skipped unread are reported too.
"""

from __future__ import annotations

import os
import re
import stat
import time

from . import protocol
from .logfile import not_regular, open_log

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    from typing import Any, Pattern

LOG_BACKLOG_BYTES = 64 * 1024  # at start, this much of each log's tail is sent as backlog
LOG_READ_BYTES = 4 << 20  # read (and scanned) in chunks of this; bounds the buffers
LOG_SCAN_BYTES = 32 << 20  # at most this much per file per poll (128 MB/s at 4 polls/s)
LOG_MAX_LINES = 2000  # lines per message; more means a flood (see LogTail.keep)
LOG_FLOOD_NEWEST = 200
LOG_PARTIAL_BYTES = 64 * 1024  # an unterminated line keeps at most its last this much

_REGEX_SPECIALS = set(".^$*+?{}[]\\|()")


def literal_alternatives(pattern: str) -> tuple[bytes, ...] | None:
    """The words of ``pattern`` when it is a plain alternation of literals
    (``of memory|Traceback|...``), as UTF-8 bytes; None when it is a real regex."""
    words = pattern.split("|")
    if not all(w and not (_REGEX_SPECIALS & set(w)) for w in words):
        return None
    return tuple(w.encode("utf-8") for w in words)


def keyword_lines(data: bytes, words: tuple[bytes, ...], pattern: Pattern[str]) -> list[bytes]:
    """The lines of ``data`` (newline-separated, in order) that ``pattern`` matches, found
    by searching the whole buffer for each of ``words`` instead of testing every line."""
    starts = set()
    for word in words:
        i = data.find(word)
        while i >= 0:
            start = data.rfind(b"\n", 0, i) + 1
            starts.add(start)
            end = data.find(b"\n", i)
            if end < 0:
                break
            i = data.find(word, end)
    out = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        line = data[start : end if end >= 0 else len(data)]
        if pattern.search(line.decode("utf-8", "replace")):
            out.append(line)
    return out


class _Flood:
    """What one poll of one file keeps when it reads more than LOG_MAX_LINES lines."""

    def __init__(self, keep: Pattern[str] | None, words: tuple[bytes, ...] | None):
        self.keep = keep
        self.words = words
        self.important: list[bytes] = []
        self.total = 0

    def scan(self, data: bytes) -> None:
        """Complete lines ``data`` (no trailing partial) that are not the newest."""
        if not data:
            return
        self.total += data.count(b"\n") + 1
        if self.keep is None:
            return
        if self.words is not None:
            found = keyword_lines(data, self.words, self.keep)
        else:
            found = [
                m.group(0)
                for m in re.finditer(b"[^\n]*(?:" + self.keep.pattern.encode() + b")[^\n]*", data)
            ]
        self.important.extend(found)
        room = LOG_MAX_LINES - LOG_FLOOD_NEWEST
        if len(self.important) > room:
            del self.important[:-room]


class LogTail:
    """Follows one log path or glob: new lines only, through rotation and truncation.

    ``filter`` (a regex) keeps the lines worth sending; the last line of every poll is
    always sent too (progress lines only matter at their newest). Files that appear
    after the start are read from their beginning. A progress bar's redraw (tqdm writes
    ``"\\r" + bar``, no newline) is sent once it is complete: at the next ``\\r`` or
    newline, or when the file has not grown for one poll.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pattern = os.path.expanduser(str(spec["path"]))
        self.tag = str(spec.get("tag") or self.pattern)
        self.filter = re.compile(spec["filter"]) if spec.get("filter") else None
        self.keep = re.compile(spec["keep"]) if spec.get("keep") else None
        self.keep_words = literal_alternatives(spec["keep"]) if spec.get("keep") else None
        # path -> [inode, offset, partial bytes, whether that partial was sent already]
        self.files: dict[str, list[Any]] = {}
        self.problems: dict[str, str] = {}  # path -> why it cannot be read (said once)
        self._said: list[protocol.LogProblem] = []
        self.started = False
        self.last_glob = 0.0

    def _paths(self) -> list[str]:
        import glob

        if any(ch in self.pattern for ch in "*?["):
            return sorted(glob.glob(self.pattern))
        return [self.pattern]

    def poll(self) -> list[protocol.Log]:
        """New lines; changes in readability wait in ``take_problems()``."""
        now = time.monotonic()
        if not self.started or now - self.last_glob > 2.0:
            self.last_glob = now
            for path in self._paths():
                if path not in self.files and self._exists(path):
                    self.files[path] = [None, 0, b"", False]
        out = []
        for path, state in list(self.files.items()):
            msg = self._poll_file(path, state, backlog=not self.started)
            if msg is not None:
                out.append(msg)
        self.started = True
        return out

    def holding(self) -> bool:
        """Whether a progress bar's redraw waits to be sent once it sits still."""
        return any(st[2].startswith(b"\r") and not st[3] for st in self.files.values())

    def take_problems(self) -> list[protocol.LogProblem]:
        """The changes in which paths can be read since the last call."""
        said, self._said = self._said, []
        return said

    def _exists(self, path: str) -> bool:
        """Whether ``path`` is there to follow; one that is there but hidden from us (a
        directory we may not enter) is a problem, said. Absent is not: it may come."""
        try:
            os.stat(path)
        except PermissionError as e:
            self._say(path, e)
            return False
        except OSError:
            return False
        return True

    def _say(self, path: str, error: OSError | None) -> None:
        """A change in whether ``path`` can be read becomes one LogProblem message."""
        problem = None if error is None else (error.strerror or type(error).__name__)
        if problem == self.problems.get(path):
            return
        if problem is None:
            del self.problems[path]
        else:
            self.problems[path] = problem
        self._said.append(protocol.LogProblem(self.tag, path, problem))

    def _poll_file(self, path: str, state: list[Any], backlog: bool) -> protocol.Log | None:
        try:
            st = os.stat(path)
        except PermissionError as e:
            self._say(path, e)
            return None
        except OSError:
            return None  # rotated away; a new file at the same path is picked up below
        if not stat.S_ISREG(st.st_mode):
            # a directory, a FIFO (its open waits for a writer), a device: nothing to follow
            self._say(path, not_regular(path, st.st_mode))
            state[:] = [None, 0, b"", False]  # a file there later is all new
            return None
        inode, offset, partial, sent = state
        if inode is not None and st.st_ino != inode:
            offset, partial, sent = 0, b"", False  # rotated: the new file is all new
        elif st.st_size < offset:
            offset, partial, sent = 0, b"", False  # truncated in place
        if backlog:
            offset = max(st.st_size - LOG_BACKLOG_BYTES, 0)
        skipped = 0
        if st.st_size - offset > LOG_SCAN_BYTES:
            # Written faster than we can even scan: jump to the newest bytes, say how much
            # was skipped unread (an OOM line in there is not seen).
            skipped = st.st_size - LOG_READ_BYTES - offset
            offset, partial, sent = st.st_size - LOG_READ_BYTES, b"", False
        try:
            with open_log(path) as f:
                self._say(path, None)
                if st.st_size == offset:
                    redraw = partial.startswith(b"\r") and len(partial) > 1
                    state[:] = [st.st_ino, offset, partial, sent or redraw]
                    if redraw and not sent:
                        # A progress bar's redraw that stayed as it is for a poll: complete.
                        return self._message(path, st, backlog, [partial[1:]], 0, 0)
                    return None
                f.seek(offset)
                return self._read(f, path, state, st, offset, partial, sent, backlog, skipped)
        except OSError as e:
            self._say(path, e)
            return None

    def _read(
        self,
        f: Any,
        path: str,
        state: list[Any],
        st: os.stat_result,
        offset: int,
        pending: bytes,
        sent: bool,
        backlog: bool,
        skipped: int,
    ) -> protocol.Log | None:
        """Reads what is new in chunks. A poll's lines go out as they are up to
        LOG_MAX_LINES lines and LOG_READ_BYTES bytes; past that it is a flood: each
        finished chunk is keyword-scanned, and the newest lines are kept."""
        cut_first = backlog and offset > 0  # the first backlog line is probably cut
        end = min(st.st_size, offset + LOG_SCAN_BYTES)
        blobs: list[bytes] = []  # complete lines, newline-joined, not yet scanned
        size = lines = 0
        flood: _Flood | None = None
        while offset < end:
            chunk = f.read(min(LOG_READ_BYTES, end - offset))
            if not chunk:
                break
            offset += len(chunk)
            if sent:  # the held redraw went out when it sat still
                if chunk[:1] in (b"\r", b"\n"):
                    pending = b""  # and it is finished: not again
                    if chunk[:1] == b"\n":
                        chunk = chunk[1:]  # the end of that line, not an empty one
                sent = False
            pending += chunk
            cut = pending.rfind(b"\n")
            if cut < 0:
                pending = pending[-LOG_PARTIAL_BYTES:]  # no line end in sight: bounded
                continue
            blob, pending = pending[:cut], pending[cut + 1 :]
            if cut_first:
                cut_first = False
                if b"\n" not in blob:
                    continue
                blob = blob.split(b"\n", 1)[1]
            size += len(blob)
            lines += blob.count(b"\n") + 1
            blobs.append(blob)
            if flood is None and (lines > LOG_MAX_LINES or size > LOG_READ_BYTES):
                flood = _Flood(self.keep or self.filter, self.keep_words)
            if flood is not None:
                for older in blobs[:-1]:  # the newest blob holds the newest lines
                    flood.scan(older)
                del blobs[:-1]
        complete = [ln for blob in blobs for ln in blob.split(b"\n")]
        if b"\r" in pending:  # a progress bar redraws with \r: its updates count as lines
            head, _, rest = pending.rpartition(b"\r")
            if head:
                complete.append(head)
            pending = b"\r" + rest
        state[:] = [st.st_ino, offset, pending[-LOG_PARTIAL_BYTES:], False]
        if flood is None and len(complete) > LOG_MAX_LINES:
            flood = _Flood(self.keep or self.filter, self.keep_words)
        if flood is None:
            return self._message(path, st, backlog, complete, 0, skipped)
        newest = complete[-LOG_FLOOD_NEWEST:]
        flood.scan(b"\n".join(complete[:-LOG_FLOOD_NEWEST]))
        total = flood.total + len(newest)
        return self._message(path, st, backlog, flood.important + newest, total, skipped)

    def _message(
        self,
        path: str,
        st: os.stat_result,
        backlog: bool,
        raw: list[bytes],
        total: int,
        skipped: int,
    ) -> protocol.Log | None:
        """The Log for ``raw`` lines; ``total``: how many lines there were (a flood)."""
        lines = [ln.decode("utf-8", "replace").rstrip("\r") for ln in raw]
        if not lines and not skipped:
            return None
        if self.filter is not None and lines:
            last = lines[-1]
            lines = [ln for ln in lines if self.filter.search(ln)]
            if not lines or lines[-1] is not last:
                lines.append(last)
        dropped = max(total - len(lines), 0)
        # lines written before the agent came: when, as far as the file says
        written = st.st_mtime if backlog else None
        return protocol.Log(self.tag, path, time.time(), backlog, lines, dropped, skipped, written)


# inotify(7) event bits: a file in a watched directory written, created, moved or removed.
_IN_EVENTS = 0x2 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_IGNORED = 0x8000  # the watch is gone (its directory was removed)
LOG_IDLE_S = 2.0  # with every followed directory watched: a safety poll this often
LOG_MIN_GAP_S = 0.05  # a flood's events are taken together, at most this often


class Waker:
    """Lets the log loop sleep until there is work: a followed file's directory changed
    (inotify, through ctypes), a kernel log record or a cgroup memory event arrived, or a
    timeout. Where inotify is not there (not Linux, no libc, out of watches, a directory
    that does not exist yet or is a glob), ``wait`` is the plain fixed poll it replaces."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.fd: int | None = None
        self.watched: dict[str, int] = {}  # path -> watch descriptor (-1: could not)
        self.unwatched: list[str] = []  # followed patterns no watch covers (polled)
        self.extra: list[int] = []  # other fds to wake on (/dev/kmsg)
        self.must_poll = False  # something else cannot be watched: poll every poll_s
        self._last = 0.0
        try:
            import ctypes

            self._libc = ctypes.CDLL(None, use_errno=True)
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        self.fd = fd if fd >= 0 else None

    def watch(self, path: str) -> bool:
        """Wake when ``path`` (a directory: anything in it; a file: it) changes."""
        if path not in self.watched:
            wd = -1
            if self.fd is not None:
                wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_EVENTS)
            self.watched[path] = wd
        return self.watched[path] >= 0

    def watch_logs(self, patterns: list[str]) -> None:
        """The directories of followed paths (called every poll: a directory that
        appears later is watched from then on)."""
        self.unwatched = []
        for pattern in patterns:
            directory = os.path.dirname(pattern) or "."
            plain = not any(ch in directory for ch in "*?[")
            if not (plain and os.path.isdir(directory) and self.watch(directory)):
                self.unwatched.append(pattern)

    @property
    def complete(self) -> bool:
        """Every change that matters wakes us: no fixed short poll needed."""
        return self.fd is not None and not self.unwatched and not self.must_poll

    def wait(self, busy: bool) -> None:
        """Until the next poll. ``busy``: the last poll had news (or holds a progress bar
        redraw), so poll again within ``poll_s`` even without an event."""
        import select

        timeout = self.poll_s if busy or not self.complete else LOG_IDLE_S
        fds = [fd for fd in [self.fd, *self.extra] if fd is not None]
        if fds:
            ready = select.select(fds, [], [], timeout)[0]
            if self.fd is not None and self.fd in ready:
                self._drain(self.fd)
        else:
            time.sleep(timeout)
        gap = time.monotonic() - self._last
        if gap < LOG_MIN_GAP_S:
            time.sleep(LOG_MIN_GAP_S - gap)
        self._last = time.monotonic()

    def _drain(self, fd: int) -> None:
        """Reads the pending events; a watch the kernel dropped (its directory was
        removed: IN_IGNORED) is forgotten, so the directory made again is watched anew."""
        import struct

        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            at = 0
            while at + 16 <= len(data):
                wd, mask, _cookie, size = struct.unpack_from("iIII", data, at)
                at += 16 + size
                if mask & _IN_IGNORED:
                    for path, known in list(self.watched.items()):
                        if known == wd:
                            del self.watched[path]
