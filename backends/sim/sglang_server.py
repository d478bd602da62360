"""Simulated SGLang servers: ``python -m gpumon.backends.sim.sglang_server --ports 30000-30007``.

Real HTTP servers on 127.0.0.1 (one thread each, all in this process) serving what
SGLang v0.5.18 serves to a monitor: ``/metrics`` (Prometheus text from ``sglang_model``),
``/health`` (200, empty body), ``/model_info`` and ``/get_model_info``, ``/v1/models``,
over HTTP/1.1 keep-alive as uvicorn serves them (an idle connection closed after
``KEEP_ALIVE_S``; a stopped or restarted server's connections closed with it).
The i-th port is the server of GPU i. ``--down PORT`` makes that server answer 503 to
everything; ``--down PORT:refuse`` leaves its port closed. ``--log DIR`` writes
``DIR/sglang-PORT.log`` for each server: a v0.5.18 ``Decode batch`` line every 40 decode
steps, some ``Prefill batch`` lines, and an access line per request. Settings come from
``GPUMON_SIM_*`` (``SimSettings.from_env``); SIGTERM or Ctrl+C stops it at once.
``--vllm-ports`` serves scenario ``vllm``'s vLLM servers beside them (``VllmServers``).

Tests and the demo use ``SglangServers`` directly: it can take a server down, bring it
back and restart it (its counters start again from 0) while running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from gpumon.backends.sim.scenario import (
    HANG_AT,
    SimSettings,
    scenario_time,
    vllm_stopped_at,
    wall_time,
)
from gpumon.backends.sim.sglang_model import (
    CONTEXT_LEN,
    HUNG_INDEX,
    LOG_INTERVAL_S,
    MAX_TOTAL_TOKENS,
    MODEL,
    UPTIME_AT_T0,
    log_lines,
    log_stamp,
    metrics_text,
    stopped_at,
)
from gpumon.backends.sim.state import with_state
from gpumon.backends.sim.vllm_model import LOG_INTERVAL_S as VLLM_LOG_INTERVAL_S
from gpumon.backends.sim.vllm_model import MAX_MODEL_LEN as VLLM_MAX_MODEL_LEN
from gpumon.backends.sim.vllm_model import MODEL as VLLM_MODEL
from gpumon.backends.sim.vllm_model import UPTIME_AT_T0 as VLLM_UPTIME_AT_T0
from gpumon.backends.sim.vllm_model import VERSION as VLLM_VERSION
from gpumon.backends.sim.vllm_model import metrics_text as vllm_metrics_text
from gpumon.backends.sim.vllm_model import stats_line

HOST = "127.0.0.1"
# uvicorn's timeout_keep_alive, which SGLang passes as 5 (SGLANG_TIMEOUT_KEEP_ALIVE in
# 0.5.18, a literal 5 in 0.5.6): an idle keep-alive connection is closed after it.
KEEP_ALIVE_S = 5.0
HEALTH_CHECK_TIMEOUT_S = 20.0  # SGLang's SGLANG_HEALTH_CHECK_TIMEOUT
HANG_LOG_BACKLOG = 60  # log intervals (~150 s) written at start in the hang scenario
DownMode = Literal["503", "refuse"]
MODEL_INFO = {
    "model_path": MODEL,
    "tokenizer_path": MODEL,
    "is_generation": True,
    "preferred_sampling_params": None,
    "weight_version": "default",
    "has_image_understanding": False,
    "has_audio_understanding": False,
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
}
# The keys gpumon reads of a v0.5.18 `/server_info` (one GPU per server on the CT200).
SERVER_INFO = {
    "model_path": MODEL,
    "served_model_name": MODEL,
    "tp_size": 1,
    "pp_size": 1,
    "dp_size": 1,
    "enable_dp_attention": False,
    "max_total_num_tokens": MAX_TOTAL_TOKENS,
    "version": "0.5.18",
}


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (gpumon's agent gave up on a hung /health_generate, or
    stopped) is no error of the server: socketserver printed "Exception occurred during
    processing of request" and a traceback on stderr, into the terminal of whatever ran
    the demo (a real uvicorn logs nothing for it). Anything else is still printed."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # As uvicorn serves SGLang: HTTP/1.1 keep-alive, an idle connection closed after
    # KEEP_ALIVE_S (the socket timeout on the wait for the next request line), and
    # TCP_NODELAY (asyncio sets it on every TCP transport): without it the body, written
    # after the headers, waits for the client's delayed ACK (~5 ms on a kept connection).
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = KEEP_ALIVE_S
    disable_nagle_algorithm = True
    cluster: SglangServers
    port: int

    def setup(self) -> None:
        super().setup()
        self.cluster.opened(self.port, self.connection)

    def finish(self) -> None:
        self.cluster.closed(self.port, self.connection)
        super().finish()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        status, ctype, body = self.cluster.answer(self.port, path)
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.cluster.access_log(self.port, self.client_address, self.requestline, status)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # access lines go to --log, not stderr


class SglangServers:
    """The simulated servers on ``ports`` (server i = GPU i), started by ``start()``."""

    log_name = "sglang"  # the logs are ``DIR/<log_name>-PORT.log``
    log_interval = LOG_INTERVAL_S
    uptime_at_t0 = UPTIME_AT_T0

    def __init__(
        self,
        settings: SimSettings,
        ports: list[int],
        *,
        down: dict[int, DownMode] | None = None,
        log_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.down: dict[int, DownMode] = dict(down or {})
        self.log_dir = log_dir
        self.clock = clock
        self.started = dict.fromkeys(ports, -self.uptime_at_t0)  # scenario time of each start
        self._servers: dict[int, ThreadingHTTPServer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._logged = dict.fromkeys(ports, -1)  # last decode log epoch written
        self._threads: list[threading.Thread] = []
        self._open: dict[int, set[socket.socket]] = {port: set() for port in ports}

    # ------------------------------------------------------------------ control
    def now(self) -> float:
        return scenario_time(self.settings, self.clock())

    def start(self) -> None:
        """Listen on every port not marked ``refuse``; raises OSError when a port is taken."""
        self.follow_state()
        try:
            for port in self.ports:
                if self.down.get(port) != "refuse":
                    self._listen(port)
        except OSError:
            self.stop()
            raise
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            now = self.now()
            # A log starts now, not at the server's start; in ``hang`` it holds the last
            # ``HANG_LOG_BACKLOG`` log intervals, so a log read from its tail says when the
            # hung server last decoded.
            back = self.log_backlog()
            for port in self.ports:
                self._logged[port] = int((now - self.started[port]) // self.log_interval) - back
            # the backlog is on disk before a server answers: what a reader finds at its
            # start is the same on a loaded machine and an idle one
            self.write_logs()
        if self.log_dir is not None or self.follows_state:
            name = f"{self.log_name}-sim-log"
            thread = threading.Thread(target=self._loop, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.shutdown()
            server.server_close()
        for port in self.ports:
            self._drop_connections(port)

    def set_down(self, port: int, mode: DownMode | None) -> None:
        """Take server ``port`` down (503 or a closed port) or, with None, bring it back."""
        with self._lock:
            if mode is None:
                self.down.pop(port, None)
            else:
                self.down[port] = mode
            server = self._servers.pop(port, None) if mode == "refuse" else None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._drop_connections(port)
        if mode != "refuse" and port not in self._servers and not self._stop.is_set():
            self._listen(port)

    def restart(self, port: int) -> None:
        """Server ``port`` restarts now: its counters begin again from 0."""
        with self._lock:
            self.started[port] = self.now()
            self._logged[port] = -1
        self._drop_connections(port)  # a new process: the old one's connections are gone

    # ------------------------------------------------------------------ serving
    def opened(self, port: int, conn: socket.socket) -> None:
        with self._lock:
            self._open[port].add(conn)

    def closed(self, port: int, conn: socket.socket) -> None:
        with self._lock:
            self._open[port].discard(conn)

    def _drop_connections(self, port: int) -> None:
        """A stopped server's kept-alive connections end with it (as uvicorn's do)."""
        with self._lock:
            conns, self._open[port] = list(self._open[port]), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _listen(self, port: int) -> None:
        handler = type("Handler", (_Handler,), {"cluster": self, "port": port})
        server = _QuietServer((HOST, port), handler)
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        thread.start()
        with self._lock:
            self._servers[port] = server
        self._threads.append(thread)

    def answer(self, port: int, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of ``GET path`` on server ``port``."""
        if self.down.get(port):
            return 503, "application/json", b'{"detail":"Service Unavailable"}'
        if path == "/metrics":
            index = self.ports.index(port)
            text = metrics_text(self.settings, index, self.now(), self.started[port])
            return 200, "text/plain; version=0.0.4; charset=utf-8", text.encode()
        if path == "/health_generate" and self._hung(port):
            # SGLang waits HEALTH_CHECK_TIMEOUT (20 s) for a token, logs it, answers 503
            if self._stop.wait(HEALTH_CHECK_TIMEOUT_S):
                return 503, "text/plain; charset=utf-8", b""
            now = self.now()
            tic = time.strftime("%H:%M:%S", time.localtime(wall_time(self.settings, now - 20)))
            beat = time.strftime("%H:%M:%S", time.localtime(wall_time(self.settings, HANG_AT)))
            self._append(port, [
                f"{log_stamp(self.settings, now)} Health check failed. Server couldn't get a "
                f"response from detokenizer for last 20 seconds. tic start time: {tic}. "
                f"last_heartbeat time: {beat}"
            ])  # fmt: skip
            return 503, "text/plain; charset=utf-8", b""
        if path in ("/health", "/health_generate", "/ping"):
            return 200, "text/plain; charset=utf-8", b""
        if path in ("/model_info", "/get_model_info"):
            return 200, "application/json", json.dumps(MODEL_INFO).encode()
        if path in ("/server_info", "/get_server_info"):
            info = {**SERVER_INFO, "port": port}
            return 200, "application/json", json.dumps(info).encode()
        if path == "/v1/models":
            model = {"id": MODEL, "object": "model", "owned_by": "sglang", "root": MODEL}
            data = {"object": "list", "data": [{**model, "max_model_len": CONTEXT_LEN}]}
            return 200, "application/json", json.dumps(data).encode()
        return 404, "application/json", b'{"detail":"Not Found"}'

    def _hung(self, port: int) -> bool:
        """Whether server ``port`` is the hung one of scenario ``hang`` by now."""
        index = self.ports.index(port)
        stop = stopped_at(self.settings, index, self.started[port])
        return index == HUNG_INDEX and stop is not None and self.now() >= stop

    # ------------------------------------------------------------------ logs
    def _log_path(self, port: int) -> Path:
        assert self.log_dir is not None
        return self.log_dir / f"{self.log_name}-{port}.log"

    def log_backlog(self) -> int:
        """Log intervals written at start: in ``hang`` the last ``HANG_LOG_BACKLOG``."""
        return HANG_LOG_BACKLOG if self.settings.scenario == "hang" else 1

    def epoch_lines(self, index: int, epoch: int, started: float) -> list[str]:
        """The lines server ``index`` writes at its ``epoch``-th log interval."""
        return log_lines(self.settings, index, epoch, started)

    def _append(self, port: int, lines: list[str]) -> None:
        if self.log_dir is None or not lines:
            return
        with self._lock, self._log_path(port).open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

    def access_log(self, port: int, client: Any, request: str, status: int) -> None:
        stamp = time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(self.clock()))
        phrase = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
        line = f'{stamp} INFO:     {client[0]}:{client[1]} - "{request}" {status} {phrase}'
        self._append(port, [line])

    def write_logs(self) -> None:
        """Append every decode log line due by now (called by the log thread)."""
        now = self.now()
        for port in self.ports:
            if self.down.get(port):
                continue
            index, started = self.ports.index(port), self.started[port]
            due = int((now - started) // self.log_interval)
            lines: list[str] = []
            for epoch in range(max(self._logged[port] + 1, due - 100), due + 1):
                if epoch > 0:
                    lines += self.epoch_lines(index, epoch, started)
            self._logged[port] = max(due, self._logged[port])
            self._append(port, lines)

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self.follow_state()
            if self.log_dir is not None:
                with contextlib.suppress(OSError):  # the directory went away: keep serving
                    self.write_logs()

    # ------------------------------------------------------------------ state dir
    follows_state = False  # whether what the simulator's state dir records changes a server

    def follow_state(self) -> None:
        """Take in what the simulator's state dir says now (``VllmServers``: a server
        stopped); nothing for SGLang's, whose stops and restarts the demo makes itself."""


# vLLM's backlog written at start: the last ~3 min, so a log read from its tail says when
# the wedged engine last made a token
BACKLOG_INTERVALS = 18
API_SERVER_PID = 3104


class VllmServers(SglangServers):
    """Simulated vLLM servers on ``ports`` (server k: the k-th vLLM GPU), scenario
    ``vllm``: what vLLM's OpenAI API server answers a monitor (``vllm/entrypoints/openai/
    api_server.py``, 0.34.0): ``/metrics`` (``sim.vllm_model``), ``/health`` (200 with an
    empty body while the engine core is alive: a wedged one still is), ``/version`` and
    ``/v1/models``. Its log ``DIR/vllm-PORT.log`` gets the stats line every 10 s (none at
    vLLM's default level once two intervals made no token) and uvicorn's access lines. A
    server whose API server was killed is gone (``follow_state``); a restart is not
    simulated: the counters are the scenario's."""

    log_name = "vllm"
    log_interval = VLLM_LOG_INTERVAL_S
    uptime_at_t0 = VLLM_UPTIME_AT_T0
    follows_state = True

    def follow_state(self) -> None:
        """A server whose API server was killed (``sim.kill``, recorded in the state dir:
        ``scenario.vllm_stopped_at``) is gone: from then on its port refuses connections,
        as a dead server's does, and its log says nothing more."""
        settings = with_state(self.settings)
        if not settings.kills:
            return
        now = self.now()
        for k, port in enumerate(self.ports):
            if self.down.get(port) != "refuse" and vllm_stopped_at(settings, k, now) is not None:
                self.set_down(port, "refuse")

    def answer(self, port: int, path: str) -> tuple[int, str, bytes]:
        if self.down.get(port):
            return 503, "application/json", b'{"detail":"Service Unavailable"}'
        if path == "/metrics":
            text = vllm_metrics_text(self.settings, self.ports.index(port), self.now())
            return 200, "text/plain; version=0.0.4; charset=utf-8", text.encode()
        if path == "/health":
            return 200, "application/json", b""
        if path == "/version":
            return 200, "application/json", json.dumps({"version": VLLM_VERSION}).encode()
        if path == "/v1/models":
            model = {"id": VLLM_MODEL, "object": "model", "owned_by": "vllm", "root": VLLM_MODEL}
            data = {"object": "list", "data": [{**model, "max_model_len": VLLM_MAX_MODEL_LEN}]}
            return 200, "application/json", json.dumps(data).encode()
        return 404, "application/json", b'{"detail":"Not Found"}'

    def log_backlog(self) -> int:
        return BACKLOG_INTERVALS

    def epoch_lines(self, index: int, epoch: int, started: float) -> list[str]:
        t = started + epoch * self.log_interval
        line = stats_line(self.settings, index, math.floor(t / self.log_interval + 0.5))
        return [] if line is None else [line]

    def access_log(self, port: int, client: Any, request: str, status: int) -> None:
        """uvicorn's access line (its own format, unstamped) behind vLLM's process prefix."""
        phrase = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
        line = f'(APIServer pid={API_SERVER_PID}) INFO:     {client[0]}:{client[1]} - "{request}" '
        self._append(port, [f"{line}{status} {phrase}"])


def parse_ports(text: str) -> list[int]:
    """``"30000-30007"`` or ``"30000,30002"``; raises ValueError."""
    ports: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if not 1 <= first <= last <= 65535 or last - first > 255:
            raise ValueError(f"bad port range {part!r}")
        ports += range(first, last + 1)
    return ports


def _down_spec(text: str) -> tuple[int, DownMode]:
    port, _, mode = text.partition(":")
    if mode not in ("", "503", "refuse"):
        raise argparse.ArgumentTypeError(f"--down {text}: mode must be 503 or refuse")
    return int(port), "refuse" if mode == "refuse" else "503"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpumon-sim-sglang", description="simulated SGLang servers"
    )
    parser.add_argument("--ports", default="30000-30007", help="range or list (server i = GPU i)")
    parser.add_argument("--down", action="append", type=_down_spec, default=[], metavar="PORT")
    parser.add_argument("--log", type=Path, help="write per-server logs into this directory")
    parser.add_argument(
        "--vllm-ports", default="", help="also serve simulated vLLM servers (scenario vllm)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="the servers start now (a server process started as a job), not up since before t0",
    )
    args = parser.parse_args(argv)
    try:
        settings = SimSettings.from_env(os.environ)
        ports = parse_ports(args.ports)
        vllm_ports = parse_ports(args.vllm_ports) if args.vllm_ports else []
    except ValueError as e:
        parser.error(str(e))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    servers = [SglangServers(settings, ports, down=dict(args.down), log_dir=args.log)]
    if vllm_ports:
        servers.append(VllmServers(settings, vllm_ports, log_dir=args.log))
    try:
        for cluster in servers:
            cluster.start()
        if args.fresh:
            for port in ports:
                servers[0].restart(port)
    except OSError as e:
        for cluster in servers:
            cluster.stop()
        print(f"gpumon-sim-sglang: cannot listen: {e.strerror or e}", flush=True)
        return 2
    also = f" and vLLM on ports {args.vllm_ports}" if vllm_ports else ""
    print(f"gpumon-sim-sglang: serving {MODEL} on {HOST} ports {args.ports}{also}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for cluster in servers:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
