"""A small HTTP/1.1 GET for the agent (standard library only, Python 3.8).

The agent scrapes SGLang's ``/metrics`` on 127.0.0.1 every interval. ``urllib.request``
would do it, but importing it (``http.client``, ``email``, ``ssl``...) costs the agent
about 7 MiB of RSS on the target, beside the training job, for a plain-text GET. This
speaks just what such servers answer: ``Content-Length``, ``chunked`` or read-to-close
bodies, no TLS, no redirects; every read is bounded in time and size.

``Connection`` keeps one persistent (keep-alive) connection to a server and reuses it
scrape after scrape: a new TCP connection per scrape (connect, accept, close on both
sides) was most of a scrape's cost. SGLang serves with uvicorn, which keeps an HTTP/1.1
connection open and closes it after ``timeout_keep_alive`` idle seconds (SGLang passes 5,
``SGLANG_TIMEOUT_KEEP_ALIVE`` since 0.5.1x): at 1 Hz the connection lives on; at a
longer interval, or when the server restarted, the reused connection is found closed and
the request goes once more on a fresh connection, within the same deadline. An answer
that cannot be followed by another on the same connection (``Connection: close``, a
body read to the close, one cut at the limit, a timeout, any error) drops it.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    # socket (with selectors, array, math, _socket: ~0.5 MiB of RSS, measured) is
    # imported at the first fetch: an agent that scrapes no server never imports it.
    import socket

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


def http_get(url: str, timeout: float, limit: int) -> tuple[int, bytes]:
    """GET ``url`` on a connection of its own (``Connection: close``): (status, body of
    at most ``limit`` bytes). The whole exchange takes at most about ``timeout`` seconds.
    Raises ``FetchError`` when there is no answer."""
    host, port, path = split_url(url)
    conn = Connection(host, port, keep_alive=False)
    try:
        return conn.get(path, timeout, limit)
    finally:
        conn.close()


class Connection:
    """GETs to one server over one reused connection (see the module docstring). Not
    thread-safe: one caller at a time."""

    def __init__(self, host: str, port: int, keep_alive: bool = True) -> None:
        self.host = host
        self.port = port
        self.keep_alive = keep_alive
        self.sock: socket.socket | None = None
        self.connects = 0  # connections opened (for tests and the bench)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self, path: str, timeout: float, limit: int) -> tuple[int, bytes]:
        """GET ``path``: (status, body of at most ``limit`` bytes) within about
        ``timeout`` seconds; ``FetchError`` when there is no answer."""
        deadline = time.monotonic() + timeout
        try:
            try:
                return self._exchange(path, deadline, limit)
            except _Stale:  # closed by the server while idle: once more, on a new one
                self.close()
                return self._exchange(path, deadline, limit)
        except _Stale:  # a fresh connection never raises it; for the type checker
            self.close()
            raise FetchError("connection closed before the answer") from None
        except FetchError:
            self.close()
            raise
        except (OSError, ValueError, UnicodeError) as e:
            self.close()
            raise FetchError(f"{type(e).__name__}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _idle_closed(self, sock: socket.socket) -> bool:
        """The idle connection was closed by the server (EOF or reset waiting), or holds
        bytes nobody asked for: not to be used again."""
        import socket

        try:
            sock.setblocking(False)
            sock.recv(1, socket.MSG_PEEK)  # b"": closed; a byte: out of step
            return True
        except BlockingIOError:
            return False  # open, nothing pending: the usual case
        except OSError:
            return True

    def _exchange(self, path: str, deadline: float, limit: int) -> tuple[int, bytes]:
        import socket

        reused = self.sock is not None
        if self.sock is not None and self._idle_closed(self.sock):
            self.close()
            reused = False
        if self.sock is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchError("timed out")
            self.sock = socket.create_connection((self.host, self.port), timeout=left)
            self.connects += 1
        sock = self.sock
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "User-Agent: gpumon-agent\r\nAccept-Encoding: identity\r\n"
            + ("\r\n" if self.keep_alive else "Connection: close\r\n\r\n")
        )
        reader = _Reader(sock, deadline)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(request.encode("latin-1"))
            status, body, keep = reader.response(limit)
        except (ConnectionResetError, BrokenPipeError):
            if reused and not reader.got:
                raise _Stale() from None
            raise
        except FetchError:
            if reused and not reader.got and reader.closed:
                raise _Stale() from None
            raise
        if not (keep and self.keep_alive) or reader.buf:  # extra bytes: out of step
            self.close()
        return status, body


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.closed = False
        self.got = False  # any byte of the answer came

    def _more(self) -> bool:
        """Reads what the socket has; False at its end."""
        if self.closed:
            return False
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise FetchError("timed out")
        import socket

        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise FetchError("timed out") from None
        if not data:
            self.closed = True
            return False
        self.got = True
        self.buf += data
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if len(self.buf) > HEADER_MAX or not self._more():
                raise FetchError("connection closed mid-answer")
        at = self.buf.index(b"\r\n")
        line = bytes(self.buf[:at])
        del self.buf[: at + 2]
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n and self._more():
            pass
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def response(self, limit: int) -> tuple[int, bytes, bool]:
        """(status, body, whether the connection can carry another request)."""
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > HEADER_MAX:
                raise FetchError("headers too long")
            if not self._more():
                raise FetchError("connection closed before the answer")
        status_line = self._line().decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise FetchError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = self._line()
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
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
            body, complete = self._chunked(limit)
            return status, body, keep and complete
        length = headers.get("content-length", "")
        if length.isdigit():
            want = int(length)
            body = self._take(min(want, limit))
            return status, body, keep and want <= limit and len(body) == want
        while len(self.buf) < limit and self._more():
            pass
        return status, bytes(self.buf[:limit]), False  # read to the close

    def _chunked(self, limit: int) -> tuple[bytes, bool]:
        """(body, whether it ended as chunked bodies end: a last chunk, trailers, CRLF)."""
        body = bytearray()
        complete = True
        while len(body) < limit:
            size_text = self._line().split(b";", 1)[0].strip()
            size = int(size_text, 16)
            if size == 0:
                try:
                    while self._line():  # trailers, up to the empty line
                        pass
                except FetchError:  # closed (or silent) before it: the body is whole
                    return bytes(body), False
                return bytes(body), complete
            chunk = self._take(size)
            body += chunk
            if len(chunk) < size:  # closed mid-chunk: what came is what there is
                return bytes(body[:limit]), False
            complete = self._take(2) == b"\r\n" and complete  # the chunk's CRLF
        return bytes(body[:limit]), False
