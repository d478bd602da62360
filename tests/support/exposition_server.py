"""An HTTP server on 127.0.0.1 that answers like one SGLang release, from its fixtures.

``tests/fixtures/sglang/<version>/`` holds ``metrics.prom`` and ``metrics_later.prom`` (the
same page 5 s later) and ``server_info.json``. ``/metrics`` serves the page at the time
asked: every value that differs between the two pages (counters, histogram counts) moves
on linearly from the moment the server started, so two scrapes see the release's rates.
``/get_server_info`` answers the info; ``/server_info`` only where the release has it
(0.5.9 and later). ``metrics=False`` answers ``/metrics`` with 404 (a server started
without ``--enable-metrics``). Run as a program (``python exposition_server.py DIR
--port N``) it serves until killed: the stand-in ``sglang`` console script does that.
"""

from __future__ import annotations

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
LATER_S = 5.0  # metrics_later.prom is the page this much later
SERVER_INFO_SINCE = (0, 5, 9)  # /server_info beside /get_server_info


def _value(line: str) -> tuple[str, float] | None:
    if not line or line.startswith("#"):
        return None
    head, _, value = line.rpartition(" ")
    try:
        return head, float(value)
    except ValueError:
        return None


class ReleasePage:
    """The two fixture pages of one release, interpolated to any moment."""

    def __init__(self, directory: Path) -> None:
        first = (directory / "metrics.prom").read_text(encoding="utf-8").splitlines()
        later = (directory / "metrics_later.prom").read_text(encoding="utf-8").splitlines()
        if len(first) != len(later):
            raise ValueError(f"{directory}: the two pages do not line up")
        self.lines: list[tuple[str, float, float] | str] = []
        for a, b in zip(first, later, strict=True):
            va, vb = _value(a), _value(b)
            if va is None or vb is None or va[1] == vb[1]:
                self.lines.append(a)
            else:
                self.lines.append((va[0], va[1], (vb[1] - va[1]) / LATER_S))

    def text(self, elapsed: float) -> str:
        out = []
        for line in self.lines:
            if isinstance(line, str):
                out.append(line)
            else:
                head, start, rate = line
                out.append(f"{head} {start + rate * elapsed!r}")
        return "\n".join(out) + "\n"


class ExpositionServer:
    def __init__(self, version: str, port: int, *, metrics: bool = True) -> None:
        self.version = version
        self.directory = FIXTURES / version
        self.page = ReleasePage(self.directory)
        self.info = (self.directory / "server_info.json").read_bytes()
        self.metrics = metrics
        self.port = port
        self.started = time.monotonic()
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = server.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, path: str) -> tuple[int, bytes]:
        self.requests.append(path)
        new_info = tuple(int(p) for p in self.version.split(".")) >= SERVER_INFO_SINCE
        if path == "/metrics" and self.metrics:
            return 200, self.page.text(time.monotonic() - self.started).encode()
        if path == "/get_server_info" or (path == "/server_info" and new_info):
            return 200, self.info
        return 404, b'{"detail":"Not Found"}'

    def start(self) -> ExpositionServer:
        self.started = time.monotonic()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


CONSOLE_SCRIPT = """#!{python}
# Stand-in for SGLang's `sglang` console script (sglang.cli.main): `sglang serve ... --port N`
# answers as SGLang {version} from gpumon's fixtures.
import sys

sys.path.insert(0, {support!r})
from exposition_server import main

main([{version!r}, *sys.argv[2:]])
"""


def write_console_script(directory: Path, version: str) -> Path:
    """An executable ``sglang`` in ``directory`` serving ``version`` (see CONSOLE_SCRIPT)."""
    import sys

    path = directory / "sglang"
    path.write_text(
        CONSOLE_SCRIPT.format(
            python=sys.executable, version=version, support=str(Path(__file__).parent)
        )
    )
    path.chmod(0o755)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("version")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args(argv)
    server = ExpositionServer(args.version, args.port).start()
    try:
        server.thread.join()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
