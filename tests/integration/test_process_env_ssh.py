"""The detail view's ``e`` over the real sshd (issue 39): ``read_environment``, the
dashboard's own call, reads a process's ``/proc/PID/environ`` on the watched machine
through the monitor's SSH transport; NCCL_* and CUDA_VISIBLE_DEVICES show, a token's
value and a secret's shape in a URL are redacted. (Inside a container, through ``pct
exec`` and by host PID: tests/integration/test_lxc_ssh.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.bundle import read_environment
from gpumon.backends.bundle.scrub import REDACTED
from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import GpuProcess
from gpumon.backends.monitor import make_monitor

from sshd_server import SshServer
from waiting import until

pytestmark = pytest.mark.integration

SECRETS = ("s3cr3t-nccl-value-123", "hunter2hunter2")


@pytest.fixture
def rank() -> Iterator[int]:
    """A process whose environment an on-call checks on a hung rank."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "2,3",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_AUTH_TOKEN": SECRETS[0],
        "MASTER_ADDR": f"https://ops:{SECRETS[1]}@10.0.0.1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "--rank", "1"],
        stdin=subprocess.PIPE,
        env=env,
    )
    yield proc.pid
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


async def test_e_reads_a_ranks_environment_over_ssh_scrubbed(
    sshd: SshServer, tmp_path: Path, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    config = tmp_path / "gpumon.toml"
    config.write_text(sshd.config_toml("box", interval=0.5))
    monitor = make_monitor(resolve_host(load_config(config), "box"), record=False)
    monitor.start()
    try:
        await until(lambda: monitor.samples >= 1, 30, lambda: f"a sample ({monitor.status})")
        process = GpuProcess(pid=rank, name="python3", memory_mib=None)
        lines = await read_environment(monitor.transport, process, host_access=False)
    finally:
        await monitor.stop()
    assert lines[0] == "CUDA_VISIBLE_DEVICES=2,3", lines
    assert "NCCL_DEBUG=INFO" in lines and f"NCCL_IB_AUTH_TOKEN={REDACTED}" in lines, lines
    assert any(line.startswith("MASTER_ADDR=") for line in lines), lines
    assert not any(secret in line for line in lines for secret in SECRETS), lines
