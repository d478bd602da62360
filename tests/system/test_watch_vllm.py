"""``gpumon watch`` says the vLLM verdicts (issue 38 point 5): on the demo's ``--scenario
vllm`` (a vLLM 0.34.0 server on GPU 6 wedged since scenario time 90 s behind a ``/health``
that answers 200), run from 150 s, the watch's log opens a ``vllm_wedged`` incident on GPU
6 with the verdict's evidence, a webhook gets it, and its exporter shows both servers'
gauges and the alert."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prometheus import free_port
from receiver import Receiver
from waiting import until

pytestmark = pytest.mark.system

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]


def _metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


async def test_watch_pages_a_wedged_vllm_server(tmp_path: Path) -> None:
    with Receiver() as rx:
        cfg = tmp_path / "config.toml"
        cfg.write_text(
            '[watch]\nmin_open_s = 0\n\n[notify.hook]\nkind = "webhook"\n'
            f'url = "{rx.url("/hook")}"\ngroup_s = 1\n'
        )
        log, port = tmp_path / "watch.log", free_port()
        proc = subprocess.Popen(
            [*GPUMON, "watch", "demo", "--config", str(cfg), "--log-format", "json",
             "--scenario", "vllm", "--demo-time", "150", "--metrics-port", str(port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("ab"),
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip

        def opened() -> list[dict[str, Any]]:
            assert proc.poll() is None, log.read_text()[-2000:]
            lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
            return [x for x in lines if x.get("event") == "open" and x.get("kind") == "vllm_wedged"]

        try:
            [line] = await until(opened, 90, lambda: log.read_text()[-2000:], step=0.3)
            assert line["severity"] == "critical" and line["gpu"] == 6, line
            said = re.match(
                r"vllm :(\d+) wedged: 41 running, \d+ waiting, no token for \d+ s; "
                r"/health answered 200",
                line["headline"],
            )
            assert said, line
            # its fix: the engine core's stacks (the demo's engine core on GPU 6: CT 200's
            # PID 4318, scenario._VLLM_PID + 168 * 6 less the container's offset)
            assert line["fix"] == "its stacks: py-spy dump --native --pid 4318", line
            hooks = await until(lambda: rx.received("/hook"), 30, "the webhook", step=0.3)
            bodies = [h.json() for h in hooks]
            assert any("vllm_wedged" in json.dumps(b) for b in bodies), bodies
            metrics = _metrics(port)
            up = {lab["port"]: v for lab, v in metrics["gpumon_vllm_up"]}
            assert said[1] in up and len(up) == 2 and set(up.values()) == {1.0}, up
            made = {
                lab["port"]: v for lab, v in metrics["gpumon_vllm_generation_tokens_per_second"]
            }
            assert made[said[1]] == 0.0 and max(made.values()) > 1000, made
            active = {
                (lab["kind"], lab["severity"]): v for lab, v in metrics["gpumon_alerts_active"]
            }
            assert active[("vllm_wedged", "critical")] == 1
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
