"""``job_stalled`` over real SSH (sshd on 127.0.0.1, the real agent, the simulator's
nvidia-smi whose target GPUs 0-4 always hold a process): PyTorch's NCCL watchdog line names
the rank, its GPU and the all-reduce at once; a job whose GPUs are held and whose log goes
silent is stalled after ``stall_after_s`` and resolves by itself when a step comes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import make_monitor

from prometheus import free_port
from sshd_server import SshServer
from waiting import until

pytestmark = pytest.mark.integration

WATCHDOG = (
    "[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=131072000, "
    "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
)


def config(sshd: SshServer, log: Path, stall_after_s: float) -> str:
    return sshd.config_toml("box") + (
        "[hosts.box.jobs.trainer]\n"
        "gpus = [0, 1, 2, 3]\n"
        f'log = "{log}"\n'
        'progress = "kv"\n'
        f"stall_after_s = {stall_after_s}\n"
    )


def steps(log: Path, first: int, n: int, ktok: float = 12.8) -> None:
    with log.open("a") as f:
        for k in range(first, first + n):
            f.write(f"step {k}/5000 | loss 2.3100 | {ktok} Ktok/s\n")


def test_the_nccl_watchdog_line_names_rank_gpu_and_allreduce(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "train.log"
    steps(log, 1, 20)
    with log.open("a") as f:
        f.write(WATCHDOG + "\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(sshd, log, 600))
    out = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "snapshot", "box", "--json", "--config", str(cfg)],
        capture_output=True, text=True, env=client_env, timeout=60,
    )  # fmt: skip
    snap = json.loads(out.stdout)
    stalled = [a for a in snap["alerts"] if a["kind"] == "job_stalled"]
    assert len(stalled) == 1, out.stdout + out.stderr
    alert = stalled[0]
    assert alert["severity"] == "critical" and alert["job"] == "trainer" and alert["gpu"] == 3
    assert alert["message"].startswith(
        "trainer stalled: rank 3 (GPU 3) timed out in ALLREDUCE #8812 after 600 s"
    )


def stalled_count(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpumon_alerts_active"
        for s in family.samples
        if s.labels.get("kind") == "job_stalled" and s.labels.get("host") == "box"
    ]
    return sum(values) if values else None  # one series per severity


def wait_for(what: str, check: object, log: Path, timeout: float = 60) -> float:
    """Seconds until ``check()`` is true (fails after ``timeout``)."""
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - start < timeout, f"timed out: {what}\n{log.read_text()}"
        time.sleep(0.2)
    return time.monotonic() - start


def test_held_gpus_and_a_silent_log_stall_after_stall_after_s_then_resolve(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "train.log"
    log.touch()
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(sshd, log, 6))
    port = free_port()
    err = tmp_path / "watch.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon.tui.cli", "watch", "--config", str(cfg),
         "--metrics-port", str(port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err.open("wb"),
        env=client_env,
    )  # fmt: skip
    try:
        wait_for("the exporter", lambda: stalled_count(port) is not None, err)
        for k in range(1, 9):  # steps every second: not stalled while they come
            steps(log, k, 1)
            silent_from = time.monotonic()  # gpumon reads the line after this
            time.sleep(1.0)
            assert stalled_count(port) == 0, err.read_text()
        wait_for("job_stalled", lambda: stalled_count(port) == 1, err, timeout=60)
        assert time.monotonic() - silent_from >= 6.0  # not before stall_after_s
        steps(log, 9, 1)
        wait_for("resolved by the next step", lambda: stalled_count(port) == 0, err)
        with log.open("a") as f:  # the watchdog's line: a stall at once, not after 6 s
            f.write(WATCHDOG + "\n")
        took = wait_for("job_stalled from the line", lambda: stalled_count(port) == 1, err)
        print(f"NCCL watchdog line -> job_stalled in the exporter: {took:.1f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("ktok", "slow"), [(4.6, True), (20.3, False)])
async def test_a_job_at_4_6_ktok_s_of_20000_expected_is_slow_one_at_20_3_is_not(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ktok: float, slow: bool
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    log = tmp_path / "train.log"
    # A run already going when gpumon comes (its first step in the log's backlog): judged
    # at once. One that began while gpumon watched would have its 3 min of warm-up.
    steps(log, 1, 1, ktok)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        config(sshd, log, 600).replace(
            "stall_after_s = 600\n",
            "stall_after_s = 600\nexpect_tokens_per_s = 20000\nslow_for_s = 15\n",
        )
    )
    monitor = make_monitor(resolve_host(load_config(cfg), "box"))
    monitor.start()

    def slow_alerts() -> list[str]:
        return [a.message for a in monitor.alerts.active() if a.kind == "job_slow"]

    try:
        await until(lambda: monitor.samples >= 1, 30, "first sample")
        for k in range(2, 27):  # 25 s of steps: past slow_for_s with room for the first rate
            steps(log, k, 1, ktok)
            await asyncio.sleep(1.0)
        if slow:
            await until(slow_alerts, 30, "job_slow")
            (message,) = slow_alerts()
            assert message.startswith(
                "trainer at 4.6 Ktok/s, 23 % of its expected 20.0 Ktok/s (ETA "
            ), message
        else:
            assert monitor.workloads.jobs["trainer"].tokens_per_s == 20300.0
            assert slow_alerts() == []
    finally:
        await monitor.stop()
