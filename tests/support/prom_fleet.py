"""A real Prometheus (Debian's /usr/bin/prometheus) for the fleet tests: 127.0.0.1, a
free port kept across ``stop()``/``start()`` (a restart), its own data directory, a short
scrape interval and ``honor_labels`` on every job (one fake exporter speaks for many
nodes, as a federation or pushgateway would).

Until the watch work's tests/support/prometheus.py is on main, this is the fleet's own.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dcgm_exporter import closed_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class FleetPrometheus:
    """Prometheus scraping ``jobs`` (job name -> "host:port" targets)."""

    def __init__(
        self,
        root: Path,
        jobs: Mapping[str, Sequence[str]],
        *,
        scrape_interval: str = "1s",
        scrape_timeout: str = "1s",
        args: Sequence[str] = (),
    ) -> None:
        self.root = root / "prometheus"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = closed_port()
        self.jobs = {k: list(v) for k, v in jobs.items()}
        self.scrape_interval = scrape_interval
        self.scrape_timeout = scrape_timeout
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> FleetPrometheus:
        config = {  # JSON is YAML
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_timeout,
            },
            "scrape_configs": [
                {"job_name": job, "honor_labels": True, "static_configs": [{"targets": t}]}
                for job, t in self.jobs.items()
            ],
        }
        path = self.root / "prometheus.yml"
        path.write_text(json.dumps(config))
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={self.root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    *self.args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        tail = self.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"prometheus did not get ready on {self.url}:\n{tail}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            body = json.loads(r.read())
        return list(body["data"]["result"])

    def wait_for(self, expr: str, count: int = 1, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``expr`` has at least ``count`` series; returns them."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= count:
                return result
            time.sleep(0.25)
        raise AssertionError(f"{expr!r}: {len(result)} series after {timeout} s, wanted {count}")

    def wait_for_xid_history(self, gpus: int, window_s: int) -> None:
        """Waits until each of ``gpus`` GPUs has more than one step of the fleet's Xid
        window (``window_s`` / 15) in its Xid gauge: an Xid is a change against the value
        a step before, so a GPU needs that history before a change can show."""
        samples = max(1, window_s // 15) + 2  # at 1 s scrapes
        self.wait_for(f"count_over_time(DCGM_FI_DEV_XID_ERRORS[1m]) >= {samples}", gpus)
