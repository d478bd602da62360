"""The agent's kept-alive HTTP ``Connection`` (``remote/fetch.py``) in real time against
servers on 127.0.0.1: a connection the server closed while idle is opened again, and a
request that outlives its timeout drops the connection (tests/unit/test_fetch.py has the
rest, with no waits)."""

from __future__ import annotations

import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from gpumon.backends.remote.fetch import Connection, FetchError

from scripted_http import PAGE, Handler, Scripted, ok

pytestmark = pytest.mark.system


def test_a_connection_the_server_closed_while_idle_is_opened_again() -> None:
    """The simulator's idle timeout (uvicorn's timeout_keep_alive) closes it meanwhile."""
    handler = type("Idle", (Handler,), {"timeout": 0.2})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    conn = Connection("127.0.0.1", httpd.server_address[1])
    try:
        assert conn.get("/metrics", timeout=5, limit=8 << 20) == (200, PAGE)
        assert conn.get("/metrics", timeout=5, limit=8 << 20) == (200, PAGE)
        assert conn.connects == 1
        time.sleep(0.6)
        assert conn.get("/metrics", timeout=5, limit=8 << 20) == (200, PAGE)
        assert conn.connects == 2
    finally:
        conn.close()
        httpd.shutdown()
        httpd.server_close()


def test_a_timeout_drops_the_connection() -> None:
    def answer(c: int, n: int) -> tuple[bytes | None, str]:
        if n == 1:
            time.sleep(1.0)  # silent past the deadline
        return ok(), "keep"

    srv = Scripted(answer)
    conn = Connection("127.0.0.1", srv.port)
    conn.get("/metrics", timeout=2, limit=100)
    started = time.monotonic()
    with pytest.raises(FetchError, match="timed out"):
        conn.get("/metrics", timeout=0.3, limit=100)
    assert time.monotonic() - started < 0.9
    assert conn.sock is None
    assert conn.get("/metrics", timeout=2, limit=100) == (200, b"page\n")  # a fresh one
    assert conn.connects == 2
    conn.close()
    srv.close()
