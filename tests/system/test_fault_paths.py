"""Faults seen end to end through the real agent (run locally) and a stand-in nvidia-smi:
what the monitor, the alerts and ``check`` say when the machine misbehaves."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import CheckCode, Health
from gpumon.backends.monitor import HostMonitor, check_verdict, make_monitor

from waiting import until

pytestmark = pytest.mark.system

FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"


def local_monitor(**changes: object) -> HostMonitor:
    host = dataclasses.replace(
        resolve_host(Config(path=None), "local"),
        nvidia_smi=str(FAKE_SMI),
        python=sys.executable,
        interval=0.3,
        kernel_log=False,
        **changes,  # type: ignore[arg-type]
    )
    return make_monitor(host)


async def test_a_gpu_that_falls_off_the_bus_is_critical_in_alerts_and_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drop = tmp_path / "drop"
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    monkeypatch.setenv("FAKE_SMI_DROP", str(drop))
    monitor = local_monitor()
    monitor.start()
    try:
        await until(lambda: monitor.latest and len(monitor.latest.gpus) == 2, 30, "2 GPUs")
        assert check_verdict(monitor)[0] is CheckCode.OK
        drop.touch()  # GPU 1 is no longer listed
        await until(lambda: monitor.alerts.active(), 15, "the alert")
        (alert,) = monitor.alerts.active()
        assert (alert.kind, alert.gpu, alert.severity) == ("gpu_health", 1, Health.CRITICAL)
        code, line = check_verdict(monitor)
        assert code is CheckCode.CRITICAL
        assert "GPU 1 is no longer reported" in line and "fallen off the bus" in line
        drop.unlink()  # back: the alert ends after clear_samples healthy samples
        await until(lambda: not monitor.alerts.active(), 15, "the alert to end")
    finally:
        await monitor.stop()


@pytest.mark.parametrize("command", ["check", "snapshot"])
def test_check_and_snapshot_on_a_target_without_python_judge_the_fresh_sample(
    command: str, tmp_path: Path
) -> None:
    """No usable Python on the target: gpumon streams nvidia-smi itself. ``check`` was
    always UNKNOWN and ``snapshot`` always stale: the age was taken after the stop, which
    waited for nvidia-smi (it ignores stdin) to exit."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[defaults]\nnvidia_smi = "{FAKE_SMI}"\npython = "/bin/false"\nkernel_log = false\n',
        encoding="utf-8",
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    args = [sys.executable, "-m", "gpumon.tui.cli", "--config", str(config), command, "local"]
    out = subprocess.run(
        [*args, *(["--json"] if command == "snapshot" else [])],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if command == "check":
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.startswith("OK local: 1 GPUs")
    else:
        assert out.returncode == 0, out.stderr
        snap = json.loads(out.stdout)
        assert snap["source"] == "nvidia-smi" and snap["stale_s"] < 3
        assert snap["gpus"][0]["memory_used_mib"] == 1024
