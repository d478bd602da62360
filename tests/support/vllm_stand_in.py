"""A stand-in vLLM OpenAI server for the tests: run as ``vllm serve MODEL --port N`` (a
script named ``vllm`` whose body runs this module's ``main``), it serves on 127.0.0.1:N

- ``/metrics``: the page captured from vLLM 0.34.0's metric declarations
  (tests/fixtures/upstream/vllm/0.34.0/metrics.prom), its token counters advanced with
  the wall clock while the server is ``busy``;
- ``/health``: 200 always (as vLLM's does while its engine loop is wedged);
- ``/version``: ``{"version": "0.34.0"}``.

At start it prints what vLLM 0.34.0's API server logs first: its non-default arguments,
``--api-key`` among them as it prints them, in a list and verbatim
(``vllm/entrypoints/serve/utils/api_utils.py`` ``log_non_default_args``).

The mode is read from the file named by ``VLLM_STAND_IN_MODE`` at every request:
``busy`` (tokens made, requests running and waiting), ``wedged`` (the same requests, the
counters frozen) or ``idle`` (nothing running or waiting, the counters frozen).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "fixtures/upstream/vllm/0.34.0/metrics.prom"
TOKENS_PER_S = 1900.0  # per engine
_COUNTER = re.compile(r"^(vllm:(?:generation|prompt)_tokens_total\{[^}]*\}) (\S+)$")
_GAUGE = re.compile(r"^(vllm:num_requests_(?:running|waiting)\{[^}]*\}) (\S+)$")


class _State:
    def __init__(self, mode_file: Path) -> None:
        self.mode_file = mode_file
        self.lock = threading.Lock()
        self.made = 0.0  # tokens made per engine since start
        self.last = time.monotonic()
        self.health_asked = 0

    def mode(self) -> str:
        try:
            return self.mode_file.read_text().strip() or "busy"
        except OSError:
            return "busy"

    def page(self) -> str:
        mode = self.mode()
        with self.lock:
            now = time.monotonic()
            if mode == "busy":
                self.made += (now - self.last) * TOKENS_PER_S
            self.last = now
            made = self.made
        out = []
        for line in PAGE.read_text().splitlines():
            m = _COUNTER.match(line)
            if m is not None:
                line = f"{m[1]} {float(m[2]) + made}"
            m = _GAUGE.match(line)
            if m is not None and mode == "idle":
                line = f"{m[1]} 0.0"
            out.append(line)
        return "\n".join(out) + "\n"


# A stand-in for vLLM's console script: a test starts it as vLLM is run (``start_vllm``)
VLLM_SCRIPT = f"""#!{sys.executable}
# A stand-in for vLLM's console script: `vllm serve MODEL --port N ...`
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from vllm_stand_in import main
sys.exit(main(sys.argv[1:]))
"""


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


API_KEY = "sk-secret"


def start_vllm(
    tmp_path: Path, port: int, mode: str, *, output: Path | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """``vllm serve Qwen/Qwen3-8B --port PORT --api-key ...`` in ``mode``, answering; the
    mode file. ``output``: the file its stdout and stderr go to (as ``vllm serve ... >
    FILE 2>&1``; None: the test's own)."""
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir(exist_ok=True)
    script.write_text(VLLM_SCRIPT)
    script.chmod(0o755)
    mode_file = tmp_path / f"mode-{port}"
    mode_file.write_text(mode)
    out = None if output is None else output.open("ab")
    proc = subprocess.Popen(
        [str(script), "serve", "Qwen/Qwen3-8B", "--port", str(port), "--api-key", API_KEY,
         "--tensor-parallel-size", "2"],
        env={**os.environ, "VLLM_STAND_IN_MODE": str(mode_file)}, start_new_session=True,
        stdout=out, stderr=subprocess.STDOUT if out is not None else None,
    )  # fmt: skip
    if out is not None:
        out.close()  # the server has its own
    deadline = time.monotonic() + 20
    while not _answers(port):
        assert proc.poll() is None, "the stand-in vLLM server exited"
        assert time.monotonic() < deadline, "the stand-in vLLM server did not start"
        time.sleep(0.05)
    return proc, mode_file


def stop_vllm(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def main(argv: list[str]) -> int:
    assert argv[0] == "serve", argv
    port = int(argv[argv.index("--port") + 1])
    state = _State(Path(os.environ["VLLM_STAND_IN_MODE"]))
    args = {
        "model_tag": argv[1],
        "port": port,
        "api_key": [argv[argv.index("--api-key") + 1]],
        "tensor_parallel_size": int(argv[argv.index("--tensor-parallel-size") + 1]),
    }
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(
        f"(APIServer pid={os.getpid()}) INFO {stamp} [api_utils.py:272] non-default args: {args}",
        flush=True,
    )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body, kind = state.page().encode(), "text/plain; version=0.0.4"
            elif self.path == "/health":
                state.health_asked += 1
                body, kind = b"", "application/json"
            elif self.path == "/version":
                body, kind = json.dumps({"version": "0.34.0"}).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
