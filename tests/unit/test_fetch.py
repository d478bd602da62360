"""The agent's small HTTP GET (``remote/fetch.py``) against real HTTP servers on
127.0.0.1: Content-Length, chunked and read-to-close bodies, errors, limits, timeouts."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpumon.backends.remote.fetch import FetchError, http_get, split_url

PAGE = b"".join(b'sglang:num_running_reqs{tp_rank="%d"} 3.0\n' % i for i in range(5000))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
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


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("path", ["/metrics", "/chunked", "/to-close"])
def test_every_body_framing_gives_the_whole_page(server: str, path: str) -> None:
    assert http_get(server + path, timeout=5, limit=8 << 20) == (200, PAGE)


def test_an_error_status_is_an_answer_and_the_limit_cuts(server: str) -> None:
    assert http_get(server + "/nope", timeout=5, limit=1000) == (404, b"not found")
    status, body = http_get(server + "/chunked", timeout=5, limit=10_000)
    assert status == 200 and body == PAGE[:10_000]


def test_no_server_and_a_silent_server_are_errors_within_the_timeout() -> None:
    with socket.socket() as idle:  # bound, never accepting: nothing answers
        idle.bind(("127.0.0.1", 0))
        port = idle.getsockname()[1]
    with pytest.raises(FetchError, match="Refused"):
        http_get(f"http://127.0.0.1:{port}/metrics", timeout=2, limit=100)
    with socket.socket() as silent:  # accepts (backlog), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        with pytest.raises(FetchError, match="timed out"):
            http_get(f"http://127.0.0.1:{port}/metrics", timeout=0.3, limit=100)


def test_garbage_is_not_an_answer() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        with pytest.raises(FetchError, match="not an HTTP answer"):
            http_get(f"http://127.0.0.1:{port}/", timeout=2, limit=100)
        thread.join()


def test_split_url() -> None:
    assert split_url("http://127.0.0.1:30000/metrics") == ("127.0.0.1", 30000, "/metrics")
    assert split_url("http://localhost") == ("localhost", 80, "/")
    assert split_url("http://[::1]:8080/get_server_info") == ("::1", 8080, "/get_server_info")
    with pytest.raises(FetchError):
        split_url("https://example.invalid/")
