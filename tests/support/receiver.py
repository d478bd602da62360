"""A test HTTP receiver on 127.0.0.1 standing in for PagerDuty, ntfy, Slack and webhooks.

It records every POST it answered with success (path, headers, body) in order, answers 202 (or what
``answers`` says next: ``[429, 500]`` fails the next two), and can go down and come back
on the same port (``stop()`` / ``start()``) to play an outage.

    with Receiver() as rx:
        url = rx.url("/hook")
        ...
        rx.wait_for(3)            # at least 3 requests, or AssertionError
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus import Startable, free_port


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver(Startable):
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[Received] = []
        self.answers: list[int] = []  # statuses for the next requests (then 202)
        self.retry_after: str | None = None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 202
                self.send_response(status)
                if status == 429 and receiver.retry_after is not None:
                    self.send_header("Retry-After", receiver.retry_after)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                self.wfile.flush()
                if status < 300:  # counted once answered: a sender that got no answer retries
                    got = Received(self.path, dict(self.headers.items()), body, time.time())
                    receiver.on_received(got)
                    with receiver._lock:
                        receiver.requests.append(got)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def on_received(self, received: Received) -> None:
        """A request it took, before ``received()`` lists it (a stand-in applies it)."""

    def stop(self) -> None:
        """Go down: the port refuses connections until ``start()``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def wait_for(
        self, count: int, path: str | None = None, timeout: float = 30.0
    ) -> list[Received]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.received(path)
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(got)} of {count} requests to {path or 'any path'}")
            time.sleep(0.05)
