"""``gpumon watch`` over real SSH (sshd on 127.0.0.1): it watches every configured host,
SIGHUP adds a new host and drops a removed one without touching the others, and the
exporter serves each host's GPUs and agent state; every log line's time is ISO 8601 with
its offset and the last line says why the watch stopped."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prometheus import free_port
from sshd_server import SshServer

pytestmark = pytest.mark.integration


def agent_up(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        s.labels["host"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpumon_agent_up"
        for s in family.samples
    }


def wait_for(what: str, check: Callable[[], bool], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()}"
        time.sleep(0.2)


def test_sighup_adds_and_drops_hosts_the_others_keep_running(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml("box-a"))
    log = tmp_path / "watch.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon.tui.cli", "watch", "--config", str(cfg),
         "--metrics-port", str(port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        env=client_env,
    )  # fmt: skip
    try:
        wait_for("box-a up", lambda: _safe(port).get("box-a") == 1.0, log)
        cfg.write_text(sshd.config_toml("box-a") + sshd.config_toml("box-b"))
        proc.send_signal(signal.SIGHUP)
        wait_for("box-b up", lambda: _safe(port).get("box-b") == 1.0, log)
        wait_for("the log line", lambda: "now watching box-b" in log.read_text(), log)
        assert "box-a" not in log.read_text().split("config reloaded:")[1].split("\n")[0]
        cfg.write_text(sshd.config_toml("box-b"))
        proc.send_signal(signal.SIGHUP)
        wait_for("box-a gone", lambda: set(_safe(port)) == {"box-b"}, log)
        wait_for("the log line", lambda: "stopped watching box-a" in log.read_text(), log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        lines = log.read_text().splitlines()
        for line in lines:  # the time as the JSON log says it: ISO 8601 with its offset
            assert dt.datetime.fromisoformat(line.split(" ", 1)[0]).utcoffset() is not None
        assert lines[-1].endswith(" INFO stopped: SIGTERM")  # the last line says why
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _safe(port: int) -> dict[str, float]:
    try:
        return agent_up(port)
    except OSError:
        return {}
