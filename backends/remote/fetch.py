"""A small HTTP/1.1 GET for the agent (standard library only, Python 3.8).

The agent scrapes SGLang's ``/metrics`` on 127.0.0.1 every interval. ``urllib.request``
would do it, but importing it (``http.client``, ``email``, ``ssl``...) costs the agent
about 7 MiB of RSS on the target, beside the training job, for a plain-text GET. This
speaks just what such servers answer: ``Content-Length``, ``chunked`` or read-to-close
bodies, no TLS, no redirects; every read is bounded in time and size. An answer is whole
or an error: a page over the size bound is refused (from its ``Content-Length`` before a
byte of it is read, else once the bound is passed), and one cut short by the close (fewer
bytes than its ``Content-Length``, a chunked body without its last chunk) is no answer.

``Connection`` keeps one persistent (keep-alive) connection to a server and reuses it
scrape after scrape: a new TCP connection per scrape (connect, accept, close on both
sides) was most of a scrape's cost. SGLang serves with uvicorn, which keeps an HTTP/1.1
connection open and closes it after ``timeout_keep_alive`` idle seconds (SGLang passes 5,
``SGLANG_TIMEOUT_KEEP_ALIVE`` since 0.5.1x): at 1 Hz the connection lives on; at a
longer interval, or when the server restarted, the reused connection is found closed and
the request goes once more on a fresh connection, within the same deadline. An answer
that cannot be followed by another on the same connection (``Connection: close``, a
body read to the close, a timeout, any error) drops it.

A ``Connection`` is non-blocking underneath (``begin``, then ``step`` whenever its socket
is ready for ``events``, until an answer), so that one thread can scrape every server,
each with its own deadline, a slow one delaying none of the others; ``get`` is the same
exchange waited for on its own.
"""

from __future__ import annotations

import errno
import os
import time

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    # socket (with selectors, array, math, _socket: ~0.5 MiB of RSS, measured) is
    # imported at the first fetch: an agent that scrapes no server never imports it.
    import socket
    from collections.abc import Callable, Generator
    from typing import Any

    Answer = tuple[int, bytes]

HEADER_MAX = 64 * 1024  # a status line and headers longer than this are not HTTP
NO_BODY = (204, 304)  # answers that never carry a body (a GET gets no 1xx from these)


class FetchError(Exception):
    """The server did not give an HTTP answer (refused, timed out, garbled)."""


class _Stale(Exception):
    """A reused connection ended before any byte of the answer: the server closed it."""


def split_url(url: str) -> tuple[str, int, str]:
    """``http://host[:port]/path`` -> (host, port, path)."""
    if not url.startswith("http://"):
        raise FetchError(f"only http:// URLs: {url!r}")
    rest = url[len("http://") :]
    hostport, slash, path = rest.partition("/")
    host, colon, port = hostport.rpartition(":")
    if not colon or not port.isdigit():
        host, port = hostport, "80"
    host = host.strip("[]")  # [::1]:30000
    return host, int(port), slash + path if slash else "/"


class _Job:
    """One GET under way on a ``Connection``."""

    def __init__(self, path: str, deadline: float, limit: int, request: bytes) -> None:
        self.path = path
        self.deadline = deadline
        self.limit = limit
        self.request = request
        self.addresses: list[Any] = []  # getaddrinfo's, left to try (connect)
        self.phase = ""  # "connect", "send", "receive"
        self.out = memoryview(request)
        self.reused = False  # on a kept connection (which the server may have closed)
        self.got = False  # any byte of the answer came
        self.parser = _Parser()  # a new one for each try (Connection._start)
        self.answer = self.parser.response(limit)


class Connection:
    """GETs to one server over one reused connection (see the module docstring). One
    request at a time; not thread-safe."""

    def __init__(self, host: str, port: int, keep_alive: bool = True) -> None:
        self.host = host
        self.port = port
        self.keep_alive = keep_alive
        self.sock: socket.socket | None = None
        self.connects = 0  # connections opened (tests read it)
        self.job: _Job | None = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # --- one GET, waited for -------------------------------------------------------
    def get(self, path: str, timeout: float, limit: int) -> Answer:
        """GET ``path``: (status, body of at most ``limit`` bytes) within about
        ``timeout`` seconds; ``FetchError`` when there is no answer."""
        import select

        self.begin(path, timeout, limit)
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.expire()
            assert self.sock is not None
            poll = select.poll()
            poll.register(self.sock, self.events)
            if poll.poll(int(left * 1000) + 1):
                answer = self.step()
                if answer is not None:
                    return answer

    # --- the same, step by step (for one thread serving many) ----------------------
    @property
    def busy(self) -> bool:
        return self.job is not None

    @property
    def deadline(self) -> float:
        return self.job.deadline if self.job is not None else float("inf")

    @property
    def events(self) -> int:
        """What ``sock`` is to be waited for (``select.poll`` flags) while busy."""
        import select

        return (
            select.POLLIN
            if self.job is not None and self.job.phase == "receive"
            else select.POLLOUT
        )

    def begin(self, path: str, timeout: float, limit: int) -> None:
        """Start ``GET path``; raises ``FetchError`` at once when it cannot start."""
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "User-Agent: gpumon-agent\r\nAccept-Encoding: identity\r\n"
            + ("\r\n" if self.keep_alive else "Connection: close\r\n\r\n")
        ).encode("latin-1")
        self.job = _Job(path, time.monotonic() + timeout, limit, request)
        self._guarded(self._start, True)

    def step(self) -> Answer | None:
        """Progress when ``sock`` is ready: the answer once complete, else None (wait
        again, for ``events``: the socket may be a new one). Raises ``FetchError``."""
        answer: Answer | None = self._guarded(self._step)
        return answer

    def expire(self) -> None:
        """The deadline passed: the request is given up, the connection dropped."""
        self._fail()
        raise FetchError("timed out")

    def _fail(self) -> None:
        self.job = None
        self.close()

    def _guarded(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            try:
                return call(*args)
            except _Stale:  # closed by the server while idle: once more, on a new one
                self.close()
                self._start(False)
                return None
        except FetchError:
            self._fail()
            raise
        except (OSError, ValueError, UnicodeError) as e:
            self._fail()
            raise FetchError(f"{type(e).__name__}: {e}") from None
        except BaseException:
            self._fail()
            raise

    def _start(self, reuse: bool) -> None:
        import socket

        job = self.job
        assert job is not None
        if self.sock is not None and not (reuse and self._open(self.sock)):
            self.close()
        job.reused = self.sock is not None
        job.out = memoryview(job.request)
        job.got = False
        job.parser = _Parser()
        job.answer = job.parser.response(job.limit)
        next(job.answer)  # to its first wait for bytes
        if self.sock is not None:
            job.phase = "send"
            self._step()  # a request this small goes at once: no wait to be writable
            return
        job.addresses = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        self._connect(None)

    def _connect(self, error: OSError | None) -> None:
        """A non-blocking connect to the next address (as ``socket.create_connection``
        tries them); the last one's error when none is left."""
        import socket

        job = self.job
        assert job is not None
        while job.addresses:
            family, kind, proto, _, address = job.addresses.pop(0)
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (0, errno.EINPROGRESS):
                self.sock = sock
                self.connects += 1
                job.phase = "connect"
                return
            sock.close()
            error = OSError(code, os.strerror(code))  # ConnectionRefusedError, ...
        raise error if error is not None else OSError("no address")

    def _open(self, sock: socket.socket) -> bool:
        """The idle connection is still open (not closed by the server, no bytes that
        nobody asked for): fit for the next request."""
        import socket

        try:
            sock.recv(1, socket.MSG_PEEK)  # b"": closed; a byte: out of step
            return False
        except BlockingIOError:
            return True  # open, nothing pending: the usual case
        except OSError:
            return False

    def _step(self) -> Answer | None:
        import socket

        job, sock = self.job, self.sock
        assert job is not None and sock is not None
        if job.phase == "connect":
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self.close()
                self._connect(OSError(code, os.strerror(code)))
                return None
            job.phase = "send"
        if job.phase == "send":
            try:
                job.out = job.out[sock.send(job.out) :]
            except BlockingIOError:
                return None
            except (ConnectionResetError, BrokenPipeError):
                if job.reused:
                    raise _Stale() from None
                raise
            if not job.out:
                job.phase = "receive"
            return None
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return None
        except ConnectionResetError:
            if job.reused and not job.got:
                raise _Stale() from None
            raise
        if not data and job.reused and not job.got:
            raise _Stale()
        job.got = job.got or bool(data)
        try:
            job.answer.send(data)
            return None
        except StopIteration as done:
            status, body, keep = done.value
        self.job = None
        if not (keep and self.keep_alive) or job.parser.buf:  # extra bytes: out of step
            self.close()
        return status, body


class _Parser:
    """An HTTP answer, parsed as its bytes come: ``response`` is a generator that is
    sent each read (b"" at the end of the connection) and returns (status, body,
    whether the connection can carry another request)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.closed = False

    def _more(self) -> Generator[None, bytes, bool]:
        """Waits for the next read; False at the end of the connection."""
        if self.closed:
            return False
        data = yield
        if not data:
            self.closed = True
            return False
        self.buf += data
        return True

    def _line(self) -> Generator[None, bytes, bytes]:
        while b"\r\n" not in self.buf:
            if len(self.buf) > HEADER_MAX or not (yield from self._more()):
                raise FetchError("connection closed mid-answer")
        at = self.buf.index(b"\r\n")
        line = bytes(self.buf[:at])
        del self.buf[: at + 2]
        return line

    def _take(self, n: int) -> Generator[None, bytes, bytes]:
        while len(self.buf) < n and (yield from self._more()):
            pass
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def response(self, limit: int) -> Generator[None, bytes, tuple[int, bytes, bool]]:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > HEADER_MAX:
                raise FetchError("headers too long")
            if not (yield from self._more()):
                raise FetchError("connection closed before the answer")
        at = self.buf.index(b"\r\n\r\n")  # the status line and headers, at once
        status_line, *lines = self.buf[:at].decode("latin-1").split("\r\n")
        del self.buf[: at + 4]
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise FetchError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            if name == "connection" and "connection" in headers:
                value = headers[name] + "," + value
            headers[name] = value
        tokens = {t.strip() for t in headers.get("connection", "").lower().split(",")}
        # HTTP/1.1 keeps the connection unless told; 1.0 closes it unless told
        keep = "keep-alive" in tokens if parts[0] == "HTTP/1.0" else "close" not in tokens
        if status in NO_BODY:
            return status, b"", keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body, complete = yield from self._chunked(limit)
            return status, body, keep and complete
        length = headers.get("content-length", "")
        if length.isdigit():
            want = int(length)
            if want > limit:  # refused from its header: not a byte of it is read
                raise FetchError(too_large(limit))
            body = yield from self._take(want)
            if len(body) < want:
                raise FetchError(f"connection closed mid-answer ({len(body)} of {want} bytes)")
            return status, body, keep
        while len(self.buf) <= limit and (yield from self._more()):
            pass
        if len(self.buf) > limit:
            raise FetchError(too_large(limit))
        return status, bytes(self.buf), False  # read to the close

    def _chunked(self, limit: int) -> Generator[None, bytes, tuple[bytes, bool]]:
        """(body, whether it ended as chunked bodies end: a last chunk, trailers, CRLF).
        A body over ``limit`` or cut before its last chunk raises ``FetchError``."""
        body = bytearray()
        complete = True
        while True:
            size_text = (yield from self._line()).split(b";", 1)[0].strip()
            size = int(size_text, 16)
            if size == 0:
                try:
                    while (yield from self._line()):  # trailers, up to the empty line
                        pass
                except FetchError:  # closed before it: the body is whole
                    return bytes(body), False
                return bytes(body), complete
            if len(body) + size > limit:
                raise FetchError(too_large(limit))
            chunk = yield from self._take(size)
            body += chunk
            if len(chunk) < size:
                raise FetchError("connection closed mid-answer (in a chunk)")
            complete = (yield from self._take(2)) == b"\r\n" and complete  # the chunk's CRLF


def too_large(limit: int) -> str:
    """The error of a page over ``limit`` bytes: ``page larger than 8 MiB: not read``."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size and limit % size == 0:
            return f"page larger than {limit // size} {unit}: not read"
    return f"page larger than {limit} bytes: not read"
