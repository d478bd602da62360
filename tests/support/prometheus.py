"""Real Prometheus and Alertmanager (the Debian packages) on 127.0.0.1 for the tests.

Each server runs from ``/usr/bin`` with its own configuration file and data directory
under a temporary folder, on free ports, and with Alertmanager's cluster listener off
(it would otherwise bind 0.0.0.0:9094). ``start()`` returns once the server answers
``/-/ready``; ``stop()`` ends it (SIGTERM, then SIGKILL). Nothing here talks to any
address but 127.0.0.1.

    with PrometheusServer(tmp_path, scrape_targets=["127.0.0.1:9464"]) as prom:
        prom.query("gpumon_oom_events_total")
    with AlertmanagerServer(tmp_path) as am:
        am.alerts()
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET ``url`` and decode its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


class Startable:
    """``with X() as x``: ``start()`` on entry, ``stop()`` on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(Startable):
    """A child server process with a readiness URL; use as a context manager."""

    name = "server"

    def __init__(self, root: Path) -> None:
        self.root = root / self.name
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until ``/-/ready`` answers 200; on failure raise
        RuntimeError with the end of the server's log."""
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        tail = self.log.read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready on {self.url}:\n{tail}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class PrometheusServer(_Server):
    """Prometheus scraping ``scrape_targets`` ("host:port") every ``scrape_interval``."""

    name = "prometheus"

    def __init__(self, root: Path, scrape_targets: list[str], scrape_interval: str = "1s") -> None:
        super().__init__(root)
        self.scrape_targets = scrape_targets
        self.scrape_interval = scrape_interval

    def command(self) -> list[str]:
        # Prometheus reads YAML; JSON is YAML, so the standard library writes it.
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "gpumon", "static_configs": [{"targets": self.scrape_targets}]}
            ],
        }
        path = self.root / "prometheus.yml"
        path.write_text(json.dumps(config))
        return [
            PROMETHEUS,
            f"--config.file={path}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (``data.result``); raises on an
        error answer."""
        q = urllib.parse.urlencode({"query": promql})
        body = get_json(f"{self.url}/api/v1/query?{q}")
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return list(body["data"]["result"])

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll ``query(promql)`` until it returns a non-empty result; raise
        AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql!r} stayed empty for {timeout:.0f} s")
            time.sleep(0.5)

    def targets(self) -> list[dict[str, Any]]:
        return list(get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"])


class AlertmanagerServer(_Server):
    """Alertmanager with one do-nothing receiver (alerts stay visible in its API)."""

    name = "alertmanager"

    def command(self) -> list[str]:
        config = {
            "route": {
                "receiver": "null",
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [{"name": "null"}],
        }
        path = self.root / "alertmanager.yml"
        path.write_text(json.dumps(config))
        return [
            ALERTMANAGER,
            f"--config.file={path}",
            f"--storage.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]

    def alerts(self, active: bool = True, resolved: bool = False) -> list[dict[str, Any]]:
        """Alerts from ``GET /api/v2/alerts`` (by default only the active ones)."""
        q = urllib.parse.urlencode(
            {
                "active": str(active).lower(),
                "silenced": "true",
                "inhibited": "true",
                "unprocessed": "true",
            }
        )
        alerts = get_json(f"{self.url}/api/v2/alerts?{q}")
        if not resolved:
            return [a for a in alerts if a.get("status", {}).get("state") != "resolved"]
        return list(alerts)
