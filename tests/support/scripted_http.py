"""Real HTTP servers on 127.0.0.1 for the agent's HTTP client (``remote/fetch.py``): a
``Handler`` serving a large metrics ``PAGE`` in each body framing, and ``Scripted``, a raw
TCP server whose answers (and silences, closes, resets) a test scripts request by request,
and ``Huge``, a ``/metrics`` over the agent's 8 MiB bound.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

PAGE = b"".join(b'sglang:num_running_reqs{tp_rank="%d"} 3.0\n' % i for i in range(5000))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        # a client past its size limit hangs up mid-page (test_fetch's over-the-limit
        # tests): not the server's error, and no traceback on the suite's output
        with contextlib.suppress(ConnectionError):
            self._answer()

    def _answer(self) -> None:
        if self.path == "/metrics":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(PAGE), 7000):
                part = PAGE[i : i + 7000]
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/to-close":
            self.protocol_version = "HTTP/1.0"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(PAGE)
            self.close_connection = True
        else:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")


class Huge(BaseHTTPRequestHandler):
    """A ``/metrics`` of 10 MB (issue 28's oversized page), sent as fast as it is read."""

    protocol_version = "HTTP/1.1"
    PAGE = b"sglang:num_running_reqs 3.0\n" * (10_000_000 // 28)

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.PAGE)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the agent hangs up after the header
            self.wfile.write(self.PAGE)


class Scripted:
    """A raw TCP server on 127.0.0.1 that answers the n-th request of each connection
    with ``answer(conn_index, request_index)``: bytes to send, then ``"close"``,
    ``"reset"`` or ``"keep"``; ``None`` closes without a byte. Counts its connections."""

    def __init__(self, answer: Callable[[int, int], tuple[bytes | None, str]]) -> None:
        self.answer = answer
        self.accepted = 0
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            index, self.accepted = self.accepted, self.accepted + 1
            threading.Thread(target=self._connection, args=(conn, index), daemon=True).start()

    def _connection(self, conn: socket.socket, index: int) -> None:
        buf = b""
        with conn:
            for n in itertools.count():
                while b"\r\n\r\n" not in buf:
                    got = conn.recv(65536)
                    if not got:
                        return
                    buf += got
                request, buf = buf.split(b"\r\n\r\n", 1)
                self.requests.append(request)
                answer, then = self.answer(index, n)
                if answer is None:
                    return
                conn.sendall(answer)
                if then == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if then == "close":
                    return

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept (Linux), then the port is shut
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def ok(body: bytes = b"page\n", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)
