"""The simulated SGLang servers over real HTTP on 127.0.0.1, read by the real tracker."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpumon.backends.parsers import parse_sglang_log_line, parse_sglang_metrics
from gpumon.backends.remote.fetch import Connection, FetchError
from gpumon.backends.sim import (
    ENV_VARS,
    MODEL,
    TOKENS_PER_S,
    SglangServers,
    SimSettings,
    metrics_text,
    parse_ports,
    sglang_server,
)
from gpumon.backends.workloads import SglangTracker, sglang_totals

if TYPE_CHECKING:
    from gpumon.backends.sim.transport import SimTransport

pytestmark = pytest.mark.system

# ------------------------------------------------------------- the simulator over real HTTP


def free_ports(n: int) -> list[int]:
    """``n`` consecutive ports nobody listens on (checked by binding each), from a random
    start: two runs of the suite at once (two checkouts, a user's run beside CI) would
    otherwise both try the same range first."""
    start = random.randrange(42000, 50000)
    for base in range(start, 60000, 97):
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def fetch(port: int, path: str = "/metrics") -> tuple[int | None, str, str | None]:
    """(status, body, error) the way the agent reports a fetch."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode(), None
    except urllib.error.HTTPError as e:
        return e.code, "", f"HTTP {e.code}"
    except OSError as e:
        return None, "", f"{type(e).__name__}: {e}"


@pytest.fixture
def cluster() -> Iterator[SglangServers]:
    servers = SglangServers(SimSettings(scenario="sglang", t0=time.time()), free_ports(3))
    servers.start()
    yield servers
    servers.stop()


def test_real_servers_rates_match_the_configured_throughput(cluster: SglangServers) -> None:
    trackers = {p: SglangTracker(p) for p in cluster.ports}
    for _ in range(3):  # a rate needs two seconds of counters (MIN_RATE_SPAN_S)
        for port, tr in trackers.items():
            tr.observe_http(*fetch(port)[:2], time.time())
        time.sleep(1.0)
    for i, tr in enumerate(trackers.values()):
        snap = tr.snapshot_json()
        assert snap["up"] is True and snap["model"] == MODEL
        assert snap["gen_tokens_per_s"] == pytest.approx(TOKENS_PER_S[i], rel=0.07)
        assert 70 <= snap["running"] <= 74 and 6 <= snap["queued"] <= 10
        assert snap["token_usage"] == pytest.approx(0.87, abs=0.015)
        assert snap["cache_hit_rate"] == pytest.approx(1.55 / (1.55 + 2.2), abs=0.01)
        assert 0.01 < snap["itl_p50_s"] < 0.2 and 0.1 < snap["ttft_p50_s"] < 2.0
    total = sglang_totals(list(trackers.values())).gen_tokens_per_s
    assert total == pytest.approx(sum(TOKENS_PER_S[:3]), rel=0.07)


def test_real_server_endpoints(cluster: SglangServers) -> None:
    port = cluster.ports[0]
    assert fetch(port, "/health") == (200, "", None)
    status, body, _ = fetch(port, "/get_model_info")
    assert status == 200 and json.loads(body)["model_path"] == MODEL
    assert fetch(port, "/nope")[0] == 404
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_servers_keep_connections_alive_as_uvicorn_does(
    cluster: SglangServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP/1.1 keep-alive with TCP_NODELAY; an idle connection closed after the
    keep-alive timeout (short here); a server taken down or restarted closes its
    connections."""
    monkeypatch.setattr(sglang_server._Handler, "timeout", 0.3)
    conn = Connection("127.0.0.1", cluster.ports[0])
    try:
        for path in ("/metrics", "/server_info", "/metrics"):
            assert conn.get(path, timeout=5, limit=8 << 20)[0] == 200
        assert conn.connects == 1
        (served,) = cluster._open[cluster.ports[0]]  # as asyncio's: no Nagle delay
        assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        time.sleep(0.8)  # idle past the timeout: the server closed it
        assert conn.sock is not None and conn.sock.recv(1) == b""
        assert conn.get("/metrics", timeout=5, limit=8 << 20)[0] == 200
        assert conn.connects == 2
        cluster.restart(cluster.ports[0])
        assert conn.get("/metrics", timeout=5, limit=8 << 20)[0] == 200
        assert conn.connects == 3
        cluster.set_down(cluster.ports[0], "refuse")
        with pytest.raises(FetchError, match="Refused"):
            conn.get("/metrics", timeout=5, limit=8 << 20)
    finally:
        conn.close()


def test_server_going_down_and_coming_back(cluster: SglangServers) -> None:
    port = cluster.ports[1]
    tr = SglangTracker(port, min_rate_span_s=0.25)  # scrapes 0.3 s apart
    tr.observe_http(*fetch(port)[:2], time.time())
    time.sleep(0.3)
    tr.observe_http(*fetch(port)[:2], time.time())
    rate_before = tr.gen_tokens_per_s
    assert rate_before is not None and rate_before > 0
    cluster.set_down(port, "503")
    status, body, error = fetch(port)
    assert status == 503 and fetch(port, "/health")[0] == 503
    tr.observe_http(status, body, time.time(), error)
    assert tr.up is False and tr.stale and tr.gen_tokens_per_s == rate_before
    cluster.set_down(port, "refuse")
    status, body, error = fetch(port)
    assert status is None and error is not None
    tr.observe_http(status, body, time.time(), error)
    assert tr.up is False
    cluster.set_down(port, None)
    cluster.restart(port)  # it comes back as a fresh process: counters from 0
    tr.observe_http(*fetch(port)[:2], time.time())
    assert tr.up is True and tr.gen_tokens_per_s is None
    time.sleep(0.3)
    tr.observe_http(*fetch(port)[:2], time.time())
    assert tr.gen_tokens_per_s is not None and tr.gen_tokens_per_s > 0
    assert all(v is None or v >= 0 for _, v in tr.history)


def test_restart_while_up_is_counted_without_negative_rates(cluster: SglangServers) -> None:
    port = cluster.ports[2]
    tr = SglangTracker(port)
    tr.observe_http(*fetch(port)[:2], time.time())
    cluster.restart(port)
    time.sleep(0.2)
    tr.observe_http(*fetch(port)[:2], time.time())
    assert tr.restarts == 1 and tr.gen_tokens_per_s is None


def test_sim_metrics_are_deterministic_and_valid() -> None:
    s = SimSettings(scenario="sglang", seed=5)
    assert metrics_text(s, 3, 100.0, -9000.0) == metrics_text(
        SimSettings(seed=5), 3, 100.0, -9000.0
    )
    assert metrics_text(s, 3, 100.0, -9000.0) != metrics_text(
        SimSettings(seed=6), 3, 100.0, -9000.0
    )
    a = parse_sglang_metrics(metrics_text(s, 0, 100.0, -9000.0))
    b = parse_sglang_metrics(metrics_text(s, 0, 110.0, -9000.0))
    assert a.decode_tokens is not None and b.decode_tokens is not None
    assert (b.decode_tokens - a.decode_tokens) / 10 == pytest.approx(TOKENS_PER_S[0], rel=0.05)
    assert parse_ports("30000-30002,30005") == [30000, 30001, 30002, 30005]


def test_cli_serves_writes_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    ports = free_ports(2)
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(SimSettings(scenario="sglang", speed=10.0, t0=time.time()).to_env())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpumon.backends.sim.sglang_server",
            "--ports",
            f"{ports[0]}-{ports[1]}",
            "--down",
            str(ports[1]),
            "--log",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and "serving" in proc.stdout.readline()
        assert fetch(ports[0])[0] == 200 and fetch(ports[1])[0] == 503
        time.sleep(1.0)  # 10 s of scenario time: four decode log intervals
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(timeout=5) == 0 and time.monotonic() - started < 2.0
    finally:
        proc.kill()
        proc.wait()
    lines = (tmp_path / f"sglang-{ports[0]}.log").read_text().splitlines()
    decode = [s for s in map(parse_sglang_log_line, lines) if s and s.kind == "decode"]
    assert len(decode) >= 2
    assert all(s.gen_throughput and 1000 < s.gen_throughput < 1300 for s in decode)
    assert any('"GET /metrics HTTP/1.1" 200 OK' in ln for ln in lines)
    down_log = tmp_path / f"sglang-{ports[1]}.log"
    assert not down_log.exists() or "Decode batch" not in down_log.read_text()


async def test_two_demos_at_once_never_share_the_usual_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two demos starting together (two test workers, two terminals) both found 30000-30007
    free before either listened, and the second's servers could not listen: the first
    claims them (a flock held for its life), the second takes free ports, and once the
    first is disposed the usual ports are a demo's again.

    The other test workers' demos (and the user's) take 30000-30007 at any time: here the
    usual ports are a range this test found free (its claim, a lock named by the range, is
    this test's), not a fixed one something else may hold."""
    from gpumon.backends.config.load import HostConfig
    from gpumon.backends.monitor.compose import demo_settings, make_transport
    from gpumon.backends.sim import transport
    from gpumon.backends.sim.transport import SimTransport

    usual = tuple(free_ports(8))
    monkeypatch.setattr(transport, "USUAL_SGLANG_PORT", usual[0])
    host = HostConfig(name="demo", kind="demo")
    first = make_transport(host, demo_settings("sglang"))
    second = make_transport(host, demo_settings("sglang"))
    assert isinstance(first, SimTransport) and isinstance(second, SimTransport)
    try:
        assert first.sglang_ports == usual  # nothing else holds them
        assert len(second.sglang_ports) == 8 and not set(second.sglang_ports) & set(usual)
        # Each demo's servers' commands (the simulated host's /proc) name its own ports,
        # server i on GPU i, as the processes of a user's SGLang servers would.
        assert _commanded_ports(second) == list(second.sglang_ports)
        assert _commanded_ports(first) == list(usual)
    finally:
        await first.dispose()
        await second.dispose()
    third = make_transport(host, demo_settings("sglang"))
    assert isinstance(third, SimTransport)
    try:
        assert third.sglang_ports == usual
    finally:
        await third.dispose()


def _commanded_ports(demo: SimTransport) -> list[int]:
    """The ``--port N`` of the simulated SGLang servers' commands in the demo's simulated
    host ``/proc``, in GPU order (the PIDs grow with the GPU)."""
    root = Path(demo.host_proc_root)
    pids = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
    server = re.compile(rb"sglang\.launch_server\0--port\0(\d+)")
    found = [server.search((root / str(pid) / "cmdline").read_bytes()) for pid in pids]
    return [int(m[1]) for m in found if m]


def test_a_client_gone_from_a_hung_health_check_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The agent gives up on the hung server's /health_generate and goes; when the server
    answers (its 20 s, or its stop) the socket is gone. socketserver printed "Exception
    occurred during processing of request" and a traceback on stderr (ci13's log, from a
    `gpumon` child that exited mid-print); a real uvicorn logs nothing for it."""
    (port,) = free_ports(1)
    servers = SglangServers(SimSettings(scenario="hang", t0=time.time() - 120.0), [port])
    servers.start()
    try:
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET /health_generate HTTP/1.1\r\nHost: x\r\n\r\n")
        # gone at once (a reset): whether the handler is in its wait or still reading,
        # the peer is gone when it next touches the socket
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        client.close()
    finally:
        servers.stop()

    def handlers() -> list[str]:
        return [t.name for t in threading.enumerate() if "process_request" in t.name]

    deadline = time.monotonic() + 30
    while handlers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not handlers()
    err = capfd.readouterr().err
    assert "Exception occurred" not in err and "Traceback" not in err, err
