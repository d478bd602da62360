"""vLLM behind the real sshd (issue 38's "done when"): a stand-in ``vllm serve`` serving a
page made from vLLM 0.34.0's own metric declarations is found with no configuration and
shown in the snapshot; frozen while requests wait it is ``vllm_wedged`` while its
``/health`` answers 200; idle it is never wedged."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from own_servers import own_incomplete

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import make_monitor

from sshd_server import SshServer, free_port
from vllm_stand_in import start_vllm, stop_vllm
from waiting import until

pytestmark = pytest.mark.integration


def test_vllm_serve_is_in_the_first_snapshot_without_a_vllm_table(
    sshd: SshServer, tmp_path: Path, client_env: dict[str, str]
) -> None:
    port = free_port()
    proc, _ = start_vllm(tmp_path, port, "busy")
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml(interval=0.5))  # no [hosts.ct200.vllm] at all
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpumon.tui.cli", "--config", str(cfg), "snapshot",
             "ct200", "--json"],
            env=client_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        stop_vllm(proc)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    # discovery reads this machine's /proc: another test's stand-in servers may be on it
    # too (a parallel worker's, a user's demo); this test owns its port only
    assert port not in [s["port"] for s in data["sglang"]]
    [server] = [s for s in data["vllm"] if s["port"] == port]
    assert server["up"] is True
    assert server["model"] == "Qwen/Qwen3-8B"
    assert server["version"] == "0.34.0"  # its /version, read once
    assert server["running"] == 48 and server["waiting"] == 6  # two engines summed
    assert server["engines"] == 2
    assert server["token_usage"] == 0.62
    rate = server["gen_tokens_per_s"]  # two observations: a rate, two engines' worth
    assert rate is not None and rate > 0, server
    assert server["prompt_tokens_per_s"] is not None
    assert server["cache_hit_rate"] is None or 0 <= server["cache_hit_rate"] <= 1
    assert own_incomplete(data["incomplete"], [port]) == [], data["incomplete"]
    assert "sk-secret" not in res.stdout


async def test_a_frozen_vllm_is_wedged_behind_a_healthy_health_and_an_idle_one_is_not(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    hung_after = 5.0
    port = free_port()
    proc, mode = start_vllm(tmp_path, port, "busy")
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(container=200, interval=0.5)
        + f"[hosts.ct200.vllm]\nhung_after_s = {hung_after:g}\n"  # discovered: no ports
    )
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()

    def wedged() -> list[str]:
        return [a.message for a in monitor.alerts.active() if a.key == f"vllm_wedged:{port}"]

    try:
        trackers = monitor.workloads.vllm
        await until(lambda: trackers.get(port) and trackers[port].gen_tokens_per_s, 30, "rate")
        server = trackers[port]
        assert server.gen_tokens_per_s is not None and server.gen_tokens_per_s > 0
        assert wedged() == []
        mode.write_text("wedged")
        [message] = await until(wedged, hung_after + 30, "vllm_wedged")
        assert message.startswith(f"vllm :{port} wedged: 48 running, 6 waiting, no token for ")
        [alert] = [a for a in monitor.alerts.active() if a.kind == "vllm_wedged"]
        # raised once the silence since the counters last moved reached hung_after_s (on
        # the trackers' clock, Workloads.now: the alert's time is the wall clock's)
        assert server.counter_progress_at is not None
        silent = re.search(r"no token for (\d+) s", alert.raised_text)
        assert silent is not None and int(silent[1]) >= hung_after, alert.raised_text
        # the agent asked /health once it fired: 200, said as evidence, not as health
        await until(lambda: "/health answered 200" in " ".join(wedged()), 20, "/health")
        # idle: nothing running or waiting, the counters still frozen: the verdict ends
        mode.write_text("idle")
        await until(lambda: not wedged(), 20, "the verdict ends")
        idle_since = monitor.workloads.now()  # the trackers' clock
        # and stays ended over more than hung_after_s of idle pages
        await until(
            lambda: (server.last_update or 0) - idle_since > hung_after + 2.0, 30, "idle pages"
        )
        assert server.running == 0 and server.queued == 0
        assert wedged() == []
    finally:
        await monitor.stop()
        stop_vllm(proc)
