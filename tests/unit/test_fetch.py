"""The agent's small HTTP GET (``remote/fetch.py``) against real HTTP servers on
127.0.0.1: Content-Length, chunked and read-to-close bodies, errors, limits, timeouts,
and the kept-alive ``Connection``: reuse, a connection the server closed (retried once),
the answers that end a connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import pytest

from gpumon.backends.remote.fetch import Connection, FetchError, split_url

from scripted_http import PAGE, Handler, Scripted, ok


def http_get(url: str, timeout: float, limit: int) -> tuple[int, bytes]:
    """One GET of ``url`` on a connection of its own (``Connection: close``)."""
    host, port, path = split_url(url)
    conn = Connection(host, port, keep_alive=False)
    try:
        return conn.get(path, timeout, limit)
    finally:
        conn.close()


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


def test_an_error_status_is_an_answer(server: str) -> None:
    assert http_get(server + "/nope", timeout=5, limit=1000) == (404, b"not found")


@pytest.mark.parametrize("path", ["/metrics", "/chunked", "/to-close"])
def test_a_page_over_the_limit_is_an_error_not_a_cut_page(server: str, path: str) -> None:
    """Issue 28: a cut page was an answer (the server "up", every number missing)."""
    with pytest.raises(FetchError, match=r"^page larger than 10 KiB: not read$"):
        http_get(server + path, timeout=5, limit=10 << 10)
    assert http_get(server + path, timeout=5, limit=len(PAGE))[1] == PAGE  # just fits


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


# --- Connection: one kept-alive connection per server -------------------------------


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    made: list[Scripted] = []

    def make(answer: Callable[[int, int], tuple[bytes | None, str]]) -> Scripted:
        made.append(Scripted(answer))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("path", ["/metrics", "/chunked"])
def test_a_connection_is_reused_scrape_after_scrape(server: str, path: str) -> None:
    host, port, _ = split_url(server)
    conn = Connection(host, port)
    try:
        for _ in range(3):
            assert conn.get(path, timeout=5, limit=8 << 20) == (200, PAGE)
        assert conn.get("/nope", timeout=5, limit=100) == (404, b"not found")
        assert conn.get(path, timeout=5, limit=8 << 20) == (200, PAGE)
        assert conn.connects == 1
    finally:
        conn.close()


def test_the_request_asks_keep_alive_and_the_one_shot_asks_close(
    scripted: Callable[..., Scripted],
) -> None:
    srv = scripted(lambda c, n: (ok(), "keep"))
    conn = Connection("127.0.0.1", srv.port)
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"page\n")
    conn.close()
    assert http_get(f"http://127.0.0.1:{srv.port}/metrics", timeout=2, limit=100)[0] == 200
    first, second = (r.lower() for r in srv.requests)
    assert first.startswith(b"get /metrics http/1.1\r\n") and b"connection:" not in first
    assert b"connection: close" in second


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_a_reused_connection_ending_before_the_answer_is_retried_once(
    scripted: Callable[..., Scripted], how: str
) -> None:
    """The server closes it just as the request goes (after the idle check): EOF or a
    reset before any byte of the answer sends the request again on a fresh connection."""

    def answer(c: int, n: int) -> tuple[bytes | None, str]:
        if c == 0 and n == 1:
            return (None, "") if how == "eof" else (b"", "reset")
        return ok(b"%d:%d\n" % (c, n)), "keep"

    srv = scripted(answer)
    conn = Connection("127.0.0.1", srv.port)
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"0:0\n")
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"1:0\n")
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"1:1\n")
    assert (srv.accepted, conn.connects, len(srv.requests)) == (2, 2, 4)
    conn.close()


def test_no_retry_on_a_fresh_connection_nor_after_part_of_the_answer(
    scripted: Callable[..., Scripted],
) -> None:
    fresh = scripted(lambda c, n: (None, ""))
    conn = Connection("127.0.0.1", fresh.port)
    with pytest.raises(FetchError, match="closed before the answer"):
        conn.get("/metrics", timeout=2, limit=100)
    assert fresh.accepted == 1 and conn.sock is None
    half = scripted(lambda c, n: (ok(), "keep") if n == 0 else (b"HTTP/1.1 200 OK\r\n", "close"))
    conn = Connection("127.0.0.1", half.port)
    conn.get("/metrics", timeout=2, limit=100)
    with pytest.raises(FetchError, match="closed before the answer"):
        conn.get("/metrics", timeout=2, limit=100)
    assert half.accepted == 1 and conn.sock is None


def test_a_retry_that_finds_the_server_gone_is_refused(
    scripted: Callable[..., Scripted],
) -> None:
    srv = scripted(lambda c, n: (ok(), "keep") if n == 0 else (None, ""))
    conn = Connection("127.0.0.1", srv.port)
    conn.get("/metrics", timeout=2, limit=100)
    srv.close()  # no new connections: the retry is refused
    with pytest.raises(FetchError, match="Refused"):
        conn.get("/metrics", timeout=2, limit=100)
    assert conn.sock is None


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (ok(extra=b"Connection: close\r\n"), b"page\n"),  # the server says so
        (b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\npage\n", b"page\n"),  # 1.0: no
        (b"HTTP/1.1 200 OK\r\n\r\npage\n", b"page\n"),  # read to the close
        (ok() + b"HTTP/1.1 200 OK\r\n", b"page\n"),  # bytes nobody asked for
    ],
    ids=["connection-close", "http-1.0", "read-to-close", "extra-bytes"],
)
def test_answers_that_end_the_connection_drop_it(
    scripted: Callable[..., Scripted], answer: bytes, body: bytes
) -> None:
    srv = scripted(lambda c, n: (answer, "close" if b"content-length" not in answer else "keep"))
    conn = Connection("127.0.0.1", srv.port)
    for _ in range(2):
        assert conn.get("/metrics", timeout=2, limit=100) == (200, body)
        assert conn.sock is None
    assert srv.accepted == conn.connects == 2


def test_chunked_with_trailers_keeps_the_connection_in_step(
    scripted: Callable[..., Scripted],
) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    srv = scripted(lambda c, n: (chunked if n != 1 else ok(), "keep"))
    conn = Connection("127.0.0.1", srv.port)
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"abcde")
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"page\n")
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"abcde")
    with pytest.raises(FetchError, match="page larger than 4 bytes"):
        conn.get("/metrics", timeout=2, limit=4)
    assert conn.sock is None and srv.accepted == 1
    conn.close()


def test_a_page_over_the_limit_is_refused_from_its_header_unread(
    scripted: Callable[..., Scripted],
) -> None:
    """A Content-Length over the limit ends the exchange at the header: the body (here
    never sent) is not waited for, nor read (issue 28: 10 MB a second cost the agent
    16 % of a core)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (10 << 20)
    srv = scripted(lambda c, n: (head, "keep"))
    conn = Connection("127.0.0.1", srv.port)
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"^page larger than 8 MiB: not read$"):
        conn.get("/metrics", timeout=5, limit=8 << 20)
    assert time.monotonic() - started < 4  # the answer, not the 5 s timeout
    assert conn.sock is None


@pytest.mark.parametrize(
    "answer",
    [
        ok(b"x" * 500)[:-400],  # Content-Length 500, 100 bytes, then the close
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\nde",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    ],
    ids=["content-length", "mid-chunk", "no-last-chunk"],
)
def test_an_answer_cut_by_the_close_is_an_error(
    scripted: Callable[..., Scripted], answer: bytes
) -> None:
    """Issue 28: fewer bytes than announced before the close counted as an answer."""
    srv = scripted(lambda c, n: (answer, "close"))
    conn = Connection("127.0.0.1", srv.port)
    with pytest.raises(FetchError, match="closed mid-answer"):
        conn.get("/metrics", timeout=2, limit=1000)
    assert conn.sock is None


def test_garbage_on_a_reused_connection_is_an_error_not_a_retry(
    scripted: Callable[..., Scripted],
) -> None:
    srv = scripted(lambda c, n: (ok() if n == 0 else b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "keep"))
    conn = Connection("127.0.0.1", srv.port)
    conn.get("/metrics", timeout=2, limit=100)
    with pytest.raises(FetchError, match="not an HTTP answer"):
        conn.get("/metrics", timeout=2, limit=100)
    assert conn.sock is None and srv.accepted == 1
