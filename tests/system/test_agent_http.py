"""The agent's one HTTP thread (``Agent.http_loop``) against real servers on 127.0.0.1:
every target on its own kept-alive connection and deadline, a silent server delaying
none of the others, the server info once each time a server comes up, a target added
later scraped at once; in real time (tests/unit/test_agent_http.py has the page filter)."""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpumon.backends.parsers import QUERY_FIELDS
from gpumon.backends.parsers.sglang import METRICS_LINE_FILTER
from gpumon.backends.remote import agent, protocol
from gpumon.backends.remote.protocol import AgentOptions
from gpumon.backends.workloads.sglang import SglangTracker

from scripted_http import Huge

pytestmark = pytest.mark.system

PAGE = (
    "# HELP sglang:num_running_reqs x\nsglang:num_running_reqs 3.0\n"
    "other 1\nsglang:token_usage 0.5\n"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_of: Server

    def log_message(self, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server_of.connections.append(self.connection)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, status = PAGE.encode(), 200
        elif self.path == "/get_server_info":
            body, status = b'{"version": "0.5.18"}', 200
        else:
            body, status = b"not found", 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server:
    """A keep-alive HTTP server on 127.0.0.1 that counts its connections; ``close`` ends
    them too (as a server process that goes away does)."""

    def __init__(self, port: int = 0) -> None:
        self.connections: list[socket.socket] = []
        handler = type("H", (Handler,), {"server_of": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        serve = {"poll_interval": 0.05}  # a quick shutdown
        threading.Thread(target=self.httpd.serve_forever, kwargs=serve, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in self.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


_NEVER = threading.Event()


class Out:
    """The agent's output, kept with the time each message went; after ``stop`` the
    thread that sends next waits for ever (a daemon: it ends with the tests)."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, Any]] = []
        self.lock = threading.Lock()
        self.stop = False

    def send(self, msg: Any) -> None:
        if self.stop:
            _NEVER.wait()
        with self.lock:
            self.sent.append((time.monotonic(), msg))

    def http(self, tag: str) -> list[tuple[float, protocol.Http]]:
        with self.lock:
            return [(at, m) for at, m in self.sent if isinstance(m, protocol.Http) and m.tag == tag]


@pytest.fixture
def out() -> Iterator[Out]:
    sink = Out()
    yield sink
    sink.stop = True


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made = [Server(), Server()]
    yield made
    for s in made:
        s.close()


def target(port: int, **more: Any) -> dict[str, Any]:
    return {"url": f"http://127.0.0.1:{port}/metrics", "tag": f"sglang:{port}", **more}


def start(out: Out, interval: float, targets: list[dict[str, Any]]) -> agent.Agent:
    options = AgentOptions(
        fields=list(QUERY_FIELDS), process_fields=[], nvidia_smi="nvidia-smi", interval=interval
    )
    loop = agent.Agent(options, out)  # type: ignore[arg-type]
    for t in targets:
        loop.start_http(t)
    return loop


def test_a_silent_server_delays_none_of_the_others(
    out: Out, servers: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent, "PAGE_TIMEOUT_S", 0.8)
    with socket.socket() as silent:  # accepts (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        quiet = silent.getsockname()[1]
        started = time.monotonic()
        start(out, 0.1, [target(quiet), *(target(s.port) for s in servers)])
        time.sleep(1.3)
        errors = out.http(f"sglang:{quiet}")  # before its close resets the next try
    names = [t.name for t in threading.enumerate()]
    assert names.count("http") >= 1 and not [n for n in names if n.startswith("sglang:")]
    for s in servers:
        got = out.http(f"sglang:{s.port}")
        assert len(got) >= 8, len(got)
        assert {m.status for _, m in got} == {200}
        assert all(b - a < 0.5 for (a, _), (b, _) in itertools.pairwise(got))
        assert len(s.connections) == 1  # the same connection, scrape after scrape
    assert [m.error for _, m in errors] == ["timed out"]  # at the deadline, once
    assert 0.75 < errors[0][0] - started < 1.2
    assert errors[0][1].status is None


def test_the_page_is_filtered_and_timed_at_the_midpoint(out: Out, servers: list[Server]) -> None:
    before = time.time()
    start(out, 0.1, [target(servers[0].port, filter=METRICS_LINE_FILTER)])
    time.sleep(0.3)
    (_, first), *_ = out.http(f"sglang:{servers[0].port}")
    assert first.body == "sglang:num_running_reqs 3.0\nsglang:token_usage 0.5\n"
    assert before <= first.t <= time.time()
    wanted = re.compile(METRICS_LINE_FILTER)
    assert all(wanted.match(line) for line in first.body.splitlines())


def test_server_info_once_each_time_the_server_comes_up(out: Out, servers: list[Server]) -> None:
    server = servers[0]
    info = {"info": ["/server_info", "/get_server_info"], "info_tag": "sglang-info:x"}
    start(out, 0.1, [target(server.port, **info)])
    time.sleep(0.5)
    assert [m.body for _, m in out.http("sglang-info:x")] == ['{"version": "0.5.18"}']
    server.close()  # down: refused, then up again on the same port
    time.sleep(0.4)
    assert any(m.status is None for _, m in out.http(f"sglang:{server.port}"))
    assert len(out.http("sglang-info:x")) == 1
    servers[0] = Server(server.port)
    time.sleep(0.5)
    assert len(out.http("sglang-info:x")) == 2
    assert out.http(f"sglang:{server.port}")[-1][1].status == 200


def test_a_target_added_later_is_scraped_at_once(out: Out, servers: list[Server]) -> None:
    loop = start(out, 30.0, [target(servers[0].port)])  # the next scrape is 30 s away
    time.sleep(0.3)
    added = time.monotonic()
    loop.start_http(target(servers[1].port))
    loop.start_http(target(servers[1].port))  # once per tag
    time.sleep(0.3)
    got = out.http(f"sglang:{servers[1].port}")
    assert len(got) == 1 and got[0][0] - added < 0.2
    assert len(out.http(f"sglang:{servers[0].port}")) == 1


def test_a_page_over_8_mib_is_said_and_the_server_is_down(out: Out) -> None:
    """Issue 28: a 10 MB page was an answer with every number missing (``up: true``,
    ``wait n/a`` for ever); it is an error as a hang or an HTTP 500 is."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    httpd.daemon_threads = True
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    port = httpd.server_address[1]
    try:
        start(out, 0.1, [target(port, filter=METRICS_LINE_FILTER)])
        deadline = time.monotonic() + 5
        while len(out.http(f"sglang:{port}")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        httpd.shutdown()
        httpd.server_close()
    got = [m for _, m in out.http(f"sglang:{port}")][:2]
    assert [(m.status, m.error, m.body) for m in got] == [
        (None, "page larger than 8 MiB: not read", "")
    ] * 2
    tracker = SglangTracker(port)
    tracker.observe_http(got[0].status, got[0].body, got[0].t, got[0].error)
    assert (tracker.up, tracker.error) == (False, "page larger than 8 MiB: not read")
