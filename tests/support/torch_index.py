"""The swap tests' local torch index: the stand-in wheels and index layout are the
simulator's (``gpumon.backends.sim.torch_index``); ``IndexServer`` serves ``<root>`` on
127.0.0.1 (the hosts' ``torch_index`` is ``<server.url>/<base>``).
"""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpumon.backends.sim.torch_index import (
    Spec,
    broken_wheel,
    build_index,
    build_wheel,
    matrix_files,
    release_bases,
    standard_bases,
    torch_wheel,
    torchvision_wheel,
    write_project_page,
)

__all__ = [
    "IndexServer",
    "Spec",
    "broken_wheel",
    "build_index",
    "build_wheel",
    "matrix_files",
    "release_bases",
    "standard_bases",
    "torch_wheel",
    "torchvision_wheel",
    "write_project_page",
]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class IndexServer:
    """Serves a directory over HTTP on 127.0.0.1 from a thread of the test process."""

    def __init__(self, root: Path) -> None:
        handler = partial(_Quiet, directory=str(root))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> IndexServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
