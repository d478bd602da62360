"""A small HTTP/1.1 GET for the agent (standard library only, Python 3.8).

The agent scrapes SGLang's ``/metrics`` on 127.0.0.1 every interval. ``urllib.request``
would do it, but importing it (``http.client``, ``email``, ``ssl``...) costs the agent
about 7 MiB of RSS on the target, beside the training job, for a plain-text GET. This
speaks just what such servers answer: ``Content-Length``, ``chunked`` or read-to-close
bodies, no TLS, no redirects; every read is bounded in time and size.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    # socket (with selectors, array, math, _socket: ~0.5 MiB of RSS, measured) is
    # imported at the first fetch: an agent that scrapes no server never imports it.
    import socket

HEADER_MAX = 64 * 1024  # a status line and headers longer than this are not HTTP


class FetchError(Exception):
    """The server did not give an HTTP answer (refused, timed out, garbled)."""


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
    """GET ``url``: (status, body of at most ``limit`` bytes). The whole exchange takes
    at most about ``timeout`` seconds. Raises ``FetchError`` when there is no answer."""
    import socket

    host, port, path = split_url(url)
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            request = (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: gpumon-agent\r\n"
                "Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
            )
            sock.sendall(request.encode("latin-1"))
            return _Reader(sock, deadline).response(limit)
    except FetchError:
        raise
    except (OSError, ValueError, UnicodeError) as e:
        raise FetchError(f"{type(e).__name__}: {e}") from None


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.closed = False

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

    def response(self, limit: int) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > HEADER_MAX:
                raise FetchError("headers too long")
            if not self._more():
                raise FetchError("connection closed before the answer")
        status_line = self._line().decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise FetchError(f"not an HTTP answer: {status_line[:80]!r}")
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return int(parts[1]), self._chunked(limit)
        length = headers.get("content-length", "")
        if length.isdigit():
            return int(parts[1]), self._take(min(int(length), limit))
        while len(self.buf) < limit and self._more():
            pass
        return int(parts[1]), bytes(self.buf[:limit])

    def _chunked(self, limit: int) -> bytes:
        body = bytearray()
        while len(body) < limit:
            size_text = self._line().split(b";", 1)[0].strip()
            size = int(size_text, 16)
            if size == 0:
                break
            chunk = self._take(size)
            body += chunk
            if len(chunk) < size:  # closed mid-chunk: what came is what there is
                break
            self._take(2)  # the chunk's CRLF
        return bytes(body[:limit])
