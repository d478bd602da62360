"""Talking to Prometheus: values as strings, errors and partial answers as the API sends
them, GET or POST, auth headers, and no answer at all. The server here is a real HTTP
server on 127.0.0.1 (a thread) that answers what each test sets."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.fleet import (
    FleetSource,
    PrometheusClient,
    PrometheusError,
    PrometheusUnreachable,
)
from gpumon.backends.fleet.prom import GET_MAX, parse_response, parse_value

from dcgm_exporter import closed_port


@dataclass
class Answer:
    status: int = 200
    body: object = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]


class CannedPrometheus:
    """Answers every request with ``answer``; records what it was asked."""

    def __init__(self) -> None:
        self.answer = Answer()
        self.answer_for: Callable[[str], Answer] | None = None  # an answer per query
        self.seen: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, method: str, query: str) -> None:
                path = self.path.split("?", 1)[0]
                outer.seen.append(Seen(method, path, query, dict(self.headers.items())))
                a = outer.answer_for(query) if outer.answer_for else outer.answer
                data = a.body if isinstance(a.body, bytes) else json.dumps(a.body).encode()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(a.status)  # the client may have given up waiting
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                self._reply("GET", q.get("query", [""])[0])

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                q = urllib.parse.parse_qs(self.rfile.read(n).decode())
                self._reply("POST", q.get("query", [""])[0])

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 64  # a refresh connects 18 times at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serve = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        serve.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom() -> Iterator[CannedPrometheus]:
    server = CannedPrometheus()
    yield server
    server.close()


def vector(*rows: tuple[dict[str, str], str], warnings: list[str] | None = None) -> object:
    doc: dict[str, object] = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.5, v]} for m, v in rows],
        },
    }
    if warnings:
        doc["warnings"] = warnings
    return doc


def test_values_are_strings_nan_and_infinities_included() -> None:
    assert parse_value("12.5") == 12.5
    assert math.isnan(parse_value("NaN"))
    assert parse_value("+Inf") == math.inf and parse_value("-Inf") == -math.inf
    with pytest.raises(ValueError):
        parse_value(12.5)  # the API never sends a number
    with pytest.raises(ValueError):
        parse_value("twelve")


@pytest.mark.parametrize(
    ("status", "kind", "meaning"),
    [
        (400, "bad_data", "bad query"),
        (422, "execution", "cannot be executed"),
        (503, "timeout", "timed out or overloaded"),
    ],
)
def test_error_answers_say_status_type_and_message(status: int, kind: str, meaning: str) -> None:
    body = json.dumps({"status": "error", "errorType": kind, "error": "the reason"}).encode()
    with pytest.raises(PrometheusError) as e:
        parse_response(status, body, "query up")
    assert str(e.value) == f"query up: HTTP {status} ({meaning}): {kind}: the reason"
    assert (e.value.status, e.value.kind) == (status, kind)


def test_a_body_that_is_not_the_api_is_said_with_a_snippet() -> None:
    with pytest.raises(PrometheusError, match=r"HTTP 502, not a Prometheus API answer: '<html>bad"):
        parse_response(502, b"<html>bad gateway</html>", "query up")


def test_warnings_matrix_and_scalar() -> None:
    series, warnings = parse_response(
        200, json.dumps(vector(({"node": "a"}, "1"), warnings=["w1"])).encode(), "q"
    )
    assert warnings == ["w1"] and series[0].labels == {"node": "a"} and series[0].value == 1.0
    matrix = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {}, "values": [[1, "1"], [2, "+Inf"]]}],
        },
    }
    (m,) = parse_response(200, json.dumps(matrix).encode(), "q")[0]
    assert m.points == ((1.0, 1.0), (2.0, math.inf))
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [3, "7"]}}
    assert parse_response(200, json.dumps(scalar).encode(), "q")[0][0].value == 7.0
    broken = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]},
    }
    with pytest.raises(PrometheusError, match="malformed result"):
        parse_response(200, json.dumps(broken).encode(), "q")


async def test_short_queries_get_long_ones_post(prom: CannedPrometheus) -> None:
    prom.answer = Answer(body=vector())
    client = PrometheusClient(prom.url, headers={"Authorization": "Bearer t0k"})
    short, long = "up", "sum(" + "+".join(["up"] * (GET_MAX // 3)) + ")"
    await client.query(short, at=1700000000.0)
    await client.query(long)
    await client.query_range(short, 1, 2, 1)
    stats = client.take_stats()
    await client.close()
    assert [(s.method, s.path) for s in prom.seen] == [
        ("GET", "/api/v1/query"),
        ("POST", "/api/v1/query"),
        ("GET", "/api/v1/query_range"),
    ]
    assert prom.seen[1].query == long  # the whole expression, form-encoded
    assert all(s.headers["Authorization"] == "Bearer t0k" for s in prom.seen)
    assert stats.requests == 3 and stats.bytes > 0


async def test_basic_auth_and_a_refusal(prom: CannedPrometheus) -> None:
    prom.answer = Answer(status=401, body=b"Unauthorized")
    client = PrometheusClient(prom.url, basic_auth=("gpumon", "pw"))
    with pytest.raises(PrometheusError, match="HTTP 401: not allowed"):
        await client.query("up")
    await client.close()
    assert prom.seen[0].headers["Authorization"] == "Basic Z3B1bW9uOnB3"


async def test_nothing_listening_and_no_answer_in_time() -> None:
    nobody = PrometheusClient(f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(PrometheusUnreachable, match="unreachable"):
        await nobody.query("up")
    await nobody.close()
    with socket.socket() as silent:  # accepts (backlog), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        slow = PrometheusClient(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.2)
        with pytest.raises(PrometheusUnreachable, match=r"did not answer within 0\.2 s"):
            await slow.query("up")
        await slow.close()


async def test_nan_is_not_reported_and_warnings_reach_the_snapshot(prom: CannedPrometheus) -> None:
    prom.answer = Answer(body=vector(({"node": "n1"}, "NaN"), warnings=["partial: store down"]))
    source = FleetSource(FleetConfig("a", prom.url))
    snap = await source.refresh()
    await source.close()
    assert snap.error is None and snap.warnings == ("partial: store down",)
    (row,) = snap.rows
    assert row.node == "n1"
    assert (row.mem_used_mib, row.util_mean, row.power_w, row.gpus, row.last_seen) == (None,) * 5
    assert len(prom.seen) == len(source.queries.instant()) + 1  # one fixed set per refresh


async def test_an_error_keeps_the_last_rows_and_says_since_when(prom: CannedPrometheus) -> None:
    prom.answer = Answer(body=vector(({"node": "n1"}, "1")))
    source = FleetSource(FleetConfig("a", prom.url))
    good = await source.refresh()
    prom.answer = Answer(
        status=503, body={"status": "error", "errorType": "timeout", "error": "query timed out"}
    )
    bad = await source.refresh()
    again = await source.refresh()
    await source.close()
    assert bad.rows == good.rows and bad.data_at == good.data_at
    asked = len(source.queries.instant()) + 1
    assert bad.error is not None and bad.error.startswith(f"{asked} of {asked} queries failed: ")
    assert "HTTP 503 (timed out or overloaded): timeout: query timed out" in bad.error
    assert again.error_since == bad.error_since is not None


async def test_a_failed_query_does_not_make_every_node_down(prom: CannedPrometheus) -> None:
    """Only the newest-sample query fails (a 503): the nodes are not called down."""
    source = FleetSource(FleetConfig("a", prom.url))
    exprs = source.queries.instant()
    last_seen, no_series = exprs["last_seen"], {exprs["seen"], exprs["down"], exprs["alerts"]}

    ok = vector(({"node": "n1"}, "8"))
    failing = {"status": "error", "errorType": "timeout", "error": "query timed out"}

    def answer_for(query: str) -> Answer:
        if query == last_seen:
            return Answer(status=503, body=failing)
        return Answer(body=vector() if query in no_series else ok)

    prom.answer_for = answer_for
    snap = await source.refresh()
    await source.close()
    (row,) = snap.rows
    assert row.current and row.gpus == 8
    assert not {"exporter-down", "stale"} & {p.rule for p in row.problems}
    assert snap.error is not None and "1 of" in snap.error and "HTTP 503" in snap.error


def test_label_values_arrive_printable() -> None:
    """A node name is a target's text: a JSON escape for ESC must not reach the screen."""
    body = json.dumps(vector(({"node": "gpu\u001b]0;owned\u0007-1"}, "1"))).encode()
    (series,), _ = parse_response(200, body, "q")
    assert "\x1b" not in series.labels["node"] and "\x07" not in series.labels["node"]
    assert series.labels["node"].startswith("gpu")
