"""SGLang 0.4.3-0.5.23 through the real agent over the real sshd: a test HTTP server on
127.0.0.1 answers with each release's fixture page (tests/support/exposition_server.py),
the agent fetches it (and the server info) on the target, the monitor reads the numbers
the server means. Also: log mode per release, `sglang serve` discovery, and the snapshot
knowing every configured server up or down."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from exposition_server import FIXTURES, ExpositionServer, write_console_script
from sglang_releases import CASES

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import make_monitor
from gpumon.backends.workloads import SglangTracker

from sshd_server import SshServer, free_port
from waiting import until

pytestmark = pytest.mark.integration


def _config(sshd: SshServer, tmp_path: Path, table: str) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml(container=200, interval=0.5) + "[hosts.ct200.sglang]\n" + table)
    return cfg


@pytest.mark.parametrize("version", CASES)
async def test_each_release_over_ssh_reads_as_the_server_means(
    version: str, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    port = free_port()
    server = ExpositionServer(version, port).start()
    cfg = _config(sshd, tmp_path, f"ports = [{port}]\ndiscover = false\n")
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()
    try:
        trackers = monitor.workloads.sglang
        await until(
            lambda: trackers[port].gen_tokens_per_s is not None and trackers[port].info is not None,
            30,
            "a rate and the server info",
        )
        t: SglangTracker = trackers[port]
        want = CASES[version]
        assert (t.running, t.queued) == (want.page.running, want.page.queued)
        assert t.token_usage == pytest.approx(want.page.token_usage, abs=1e-9)
        assert t.gen_tokens_per_s == pytest.approx(want.page.gen_tokens_per_s, rel=0.1)
        out = t.snapshot_json()
        assert out["gen_tokens_per_s_source"] == want.source
        assert (out["version"], out["parallel"]) == (version, want.parallel)
        # /server_info where the release has it, else /get_server_info; once, not per scrape
        info_calls = [p for p in server.requests if "server_info" in p]
        new = version not in ("0.4.3", "0.4.6", "0.5.3", "0.5.5")
        assert info_calls == (["/server_info"] if new else ["/server_info", "/get_server_info"])
    finally:
        await monitor.stop()
        server.stop()


@pytest.mark.parametrize("version", ["0.4.6", "0.5.5", "0.5.23"])
async def test_log_mode_over_ssh_sums_the_leaders_of_each_release(
    version: str, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metrics off (404): the numbers come from the server's log, which the agent tails."""
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    port = free_port()
    server = ExpositionServer(version, port, metrics=False).start()
    log = tmp_path / f"sglang-{port}.log"
    shutil.copy(FIXTURES / version / "server.log", log)
    cfg = _config(sshd, tmp_path, f'ports = [{port}]\ndiscover = false\nlog = "{log}"\n')
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()
    try:
        t = monitor.workloads.sglang[port]
        want = CASES[version].log
        await until(lambda: t.running == want.running and t.up is not None, 30, "the log")
        assert t.up and t.metrics_enabled is False
        assert t.queued == want.queued
        assert t.token_usage == pytest.approx(want.token_usage, abs=1e-9)
        assert t.gen_tokens_per_s == pytest.approx(want.gen_tokens_per_s)
        assert t.snapshot_json()["gen_tokens_per_s_source"] == "log"
    finally:
        await monitor.stop()
        server.stop()


async def test_sglang_serve_is_discovered_over_ssh(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `sglang serve` console script (0.5.5+, recommended since 0.5.7): the target's
    /proc shows `python .../bin/sglang serve --model-path M --port N`."""
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    port = free_port()
    script = write_console_script(tmp_path, "0.5.18")
    proc = subprocess.Popen(
        [str(script), "serve", "--model-path", "deepseek-ai/DeepSeek-V3.1", "--port", str(port)],
        start_new_session=True,
    )
    cfg = _config(sshd, tmp_path, "discover = true\n")
    try:
        await until(lambda: _answers(port), 10, "the stand-in sglang serve")
        monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
        monitor.start()
        try:
            trackers = monitor.workloads.sglang
            await until(lambda: port in trackers and trackers[port].info is not None, 30, "found")
            assert trackers[port].up and trackers[port].running == 40
            assert trackers[port].snapshot_json()["parallel"] == "DP 4 (attention), TP 4"
        finally:
            await monitor.stop()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_snapshot_json_knows_every_configured_server_up_or_down(
    sshd: SshServer, tmp_path: Path, client_env: dict[str, str]
) -> None:
    up, down = free_port(), free_port()
    server = ExpositionServer("0.5.9", up).start()
    cfg = _config(sshd, tmp_path, f"ports = [{up}, {down}]\ndiscover = false\n")
    try:
        res = subprocess.run(
            [sys.executable, "-m", "gpumon.tui.cli", "--config", str(cfg), "snapshot", "ct200",
             "--json"],
            env=client_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr
    servers = {s["port"]: s for s in json.loads(res.stdout)["sglang"]}
    assert servers[up]["up"] is True and servers[down]["up"] is False
    assert servers[up]["running"] == 120 and servers[up]["parallel"] == "DP 4 (attention), TP 8"
