"""The fleet's vLLM rules against a real Prometheus (Debian's) scraping stand-in vLLM
servers beside a stand-in dcgm-exporter: each serves a page made from one release's own
metric declarations (tests/fixtures/upstream/vllm/), its values set by the test. A server
with requests and its generation counter frozen is ``vllm-wedged`` on its node; one whose
KV cache is nearly full while it preempts is ``vllm-kv-pressure``, by V1's
``kv_cache_usage_perc`` and by V0's ``gpu_cache_usage_perc``; a busy server, an idle one
and a full cache that preempts nothing are not; a server whose series name no node is
said in the snapshot's warnings, never dropped in silence."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.fleet import FleetQueries, FleetSnapshot, FleetSource
from gpumon.backends.model import Health

from dcgm_exporter import fleet, serving
from prom_fleet import PROMETHEUS, FleetPrometheus
from upstream_captures import UPSTREAM
from waiting import until

pytestmark = pytest.mark.system

WINDOW_S = 4  # the vLLM rules' window, shortened from hung_after_s' 60 s
_SERIES = re.compile(r"^(vllm:[a-z_]+)\{([^}]*)\} (\S+)$")


@dataclass
class StandIn:
    """One vLLM server: its release's page with these values (per engine); ``busy``
    moves its token counters on with the clock, ``preempting`` its preemptions."""

    release: str
    node: str | None  # the ``hostname`` label its series carry (None: none)
    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.3
    busy: bool = False
    preempting: bool = False

    def page(self, started: float) -> str:
        moved = time.monotonic() - started
        out = []
        for line in (UPSTREAM / "vllm" / self.release / "metrics.prom").read_text().splitlines():
            m = _SERIES.match(line)
            if m is None:
                out.append(line)
                continue
            name, labels, value = m[1], m[2], float(m[3])
            if name == "vllm:num_requests_running":
                value = self.running
            elif name == "vllm:num_requests_waiting":
                value = self.waiting
            elif name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
                value = self.kv
            elif name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
                value += 500.0 * moved if self.busy else 0.0
            elif name == "vllm:num_preemptions_total":
                value += round(3.0 * moved) if self.preempting else 0.0
            host = f'hostname="{self.node}",' if self.node else ""
            out.append(f"{name}{{{host}{labels}}} {value}")
        return "\n".join(out) + "\n"


@dataclass
class Serving:
    server: ThreadingHTTPServer
    stand_in: StandIn

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


def _serve(stand_in: StandIn) -> Serving:
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = stand_in.page(started).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Serving(server, stand_in)


STAND_INS = {
    "wedged": StandIn("0.34.0", "node-0001", running=24, waiting=3),
    "busy": StandIn("0.8.5", "node-0002", running=24, waiting=3, busy=True),
    "idle": StandIn("0.34.0", "node-0003"),
    "pressure": StandIn(
        "0.6.6.post1", "node-0004", running=30, kv=0.97, busy=True, preempting=True
    ),
    "full": StandIn("0.34.0", "node-0005", running=30, kv=0.97, busy=True),
    "v1-pressure": StandIn("0.34.0", "node-0006", running=8, kv=0.95, busy=True, preempting=True),
    "nowhere": StandIn("0.8.5", None, running=5),  # wedged, its series name no node
}


@pytest.fixture(autouse=True)
def _need_prometheus() -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("Debian package prometheus not installed; .ci/run installs it")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[FleetPrometheus, dict[str, Serving]]]:
    servers = {name: _serve(replace(s)) for name, s in STAND_INS.items()}
    try:
        with serving(fleet(6)) as exporter:
            jobs = {"dcgm": [exporter.target], "vllm": [s.instance for s in servers.values()]}
            prom = FleetPrometheus(tmp_path, jobs).start()
            try:
                prom.wait_for("vllm:num_requests_running", 7)
                yield prom, servers
            finally:
                prom.stop()
    finally:
        for s in servers.values():
            s.server.shutdown()
            s.server.server_close()


def _refresh(url: str) -> FleetSnapshot:
    """One refresh of a new source, from a thread (``until``'s ``in_thread``)."""

    async def once() -> FleetSnapshot:
        config = FleetConfig("lab", url)
        queries = FleetQueries(vllm_hung_after_s=WINDOW_S)
        source = FleetSource(config, queries=queries)
        try:
            return await source.refresh()
        finally:
            await source.close()

    return asyncio.run(once())


async def test_a_wedged_engine_and_kv_pressure_are_fleet_problems(
    lab: tuple[FleetPrometheus, dict[str, Serving]],
) -> None:
    prom, servers = lab
    found: list[FleetSnapshot] = []

    def judged() -> bool:
        snap = _refresh(prom.url)
        found.append(snap)
        rules = {
            r.node: [p.rule for p in r.problems if p.rule.startswith("vllm")] for r in snap.rows
        }
        # the three that fire: the others are judged at the same refresh
        return all(rules.get(n) for n in ("node-0001", "node-0004", "node-0006"))

    def said() -> str:
        last = found[-1] if found else None
        return (
            f"the vLLM rules: {[] if last is None else [(r.node, r.problems) for r in last.rows]}"
        )

    # a window of history must pass before a counter's growth over it is known
    await until(judged, 60, said, step=0.5, in_thread=True)
    snap = found[-1]
    assert snap.error is None
    rows = {r.node: r for r in snap.rows}
    vllm = {
        n: [(p.rule, p.severity) for p in r.problems if p.rule.startswith("vllm")]
        for n, r in rows.items()
    }
    assert vllm == {
        "node-0001": [("vllm-wedged", Health.CRITICAL)],  # 0.34.0: two engines, frozen
        "node-0002": [],  # busy
        "node-0003": [],  # idle: nothing running or waiting, counters frozen
        "node-0004": [("vllm-kv-pressure", Health.WARNING)],  # V0's gpu_cache_usage_perc
        "node-0005": [],  # full, but nothing preempted
        "node-0006": [("vllm-kv-pressure", Health.WARNING)],  # V1's kv_cache_usage_perc
    }
    wedged = servers["wedged"].instance
    assert rows["node-0001"].vllm_wedged == ((wedged, 54.0),)  # 2 x (24 running + 3 waiting)
    [problem] = rows["node-0001"].problems
    assert problem.message == f"vLLM wedged: {wedged} (54 requests): no token for {WINDOW_S} s"
    [(instance, usage, preempted)] = rows["node-0004"].vllm_kv_pressure
    assert instance == servers["pressure"].instance and usage == pytest.approx(0.97)
    assert preempted is not None and preempted > 0
    assert (
        rows["node-0004"]
        .problems[0]
        .message.startswith(f"vLLM KV cache nearly full, requests preempted: {instance} (97% KV, ")
    )
    nowhere = servers["nowhere"].instance
    assert any(w.startswith(f"vLLM {nowhere} wedged, on no node") for w in snap.warnings), (
        snap.warnings
    )
    # the wedged server makes a token: the problem ends within a window
    servers["wedged"].stand_in.busy = True

    def ended() -> bool:
        snap = _refresh(prom.url)
        found.append(snap)
        return not [r for r in snap.rows if r.node == "node-0001" and r.problems]

    await until(ended, 30, said, step=0.5, in_thread=True)
