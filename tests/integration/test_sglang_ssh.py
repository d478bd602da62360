"""SGLang servers behind the real sshd: the agent fetches /metrics on the target's
localhost and the monitor turns counters into rates; a server goes down and comes back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor

from sshd_server import SshServer, free_port
from waiting import until

pytestmark = pytest.mark.integration


def start_servers(ports: list[int]) -> subprocess.Popen[bytes]:
    env = {**os.environ, **demo_settings("sglang").to_env()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon.backends.sim.sglang_server", "--ports",
         ",".join(map(str, ports))],
        env=env, start_new_session=True,
    )  # fmt: skip
    import socket

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", ports[-1])) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("simulated SGLang servers did not start")


async def test_rates_over_ssh_and_a_server_going_down_and_back(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    ports = [free_port(), free_port()]
    servers = start_servers(ports)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(container=200, interval=0.5)
        + f"[hosts.ct200.sglang]\nports = {ports}\ndiscover = false\n"
    )
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()
    try:
        trackers = monitor.workloads.sglang
        await until(
            lambda: all(trackers[p].gen_tokens_per_s is not None for p in ports), 20, "rates"
        )
        for p in ports:
            t = trackers[p]
            assert t.up and t.model == "Qwen/Qwen3-8B"
            assert t.gen_tokens_per_s is not None and 900 < t.gen_tokens_per_s < 1500
            assert t.running is not None and t.running > 0
            assert t.snapshot_json()["version"] == "0.5.18"  # its /server_info, read once
        os.killpg(servers.pid, signal.SIGKILL)
        servers.wait()
        await until(lambda: all(trackers[p].up is False for p in ports), 10, "down")
        assert trackers[ports[0]].stale and trackers[ports[0]].error
        servers = start_servers(ports)
        await until(
            lambda: all(trackers[p].up and trackers[p].gen_tokens_per_s for p in ports),
            20,
            "back up with rates",
        )
        rate = trackers[ports[0]].gen_tokens_per_s
        assert rate is not None and rate > 0  # never negative across the restart
    finally:
        await monitor.stop()
        if servers.poll() is None:
            os.killpg(servers.pid, signal.SIGKILL)
            servers.wait()
