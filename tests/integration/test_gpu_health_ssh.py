"""GPU health facts over the real sshd, the agent and the simulator's nvidia-smi (issue 27
points 3 and 4): a GPU whose nvidia-smi reports ``pcie.link.width.current`` 4 of
``pcie.link.width.max`` 16 is warned as downtrained, in ``snapshot --json`` and by
``doctor --gpus``, which passes on healthy GPUs and runs ``dcgmi diag -r 1`` (level 1
only) where a ``dcgmi`` is on the target's PATH."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.monitor import demo_settings
from gpumon.backends.sim import write_wrapper

from sshd_server import SshServer

pytestmark = pytest.mark.integration

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]


def gpumon(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUMON, *args], env=env, capture_output=True, text=True, timeout=90)


def config_with(sshd: SshServer, tmp_path: Path, fault: str | None) -> Path:
    """A config whose nvidia-smi is the simulator's with the stand-in state ``fault``."""
    smi_dir = sshd.root / "smi"
    write_wrapper(smi_dir, replace(demo_settings(demo_time=10.0), fault=fault))
    path = tmp_path / "config.toml"
    path.write_text(sshd.config_toml(nvidia_smi=str(smi_dir / "nvidia-smi")))
    return path


def test_a_downtrained_link_is_warned_in_the_snapshot(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = config_with(sshd, tmp_path, "pcie_x4:3")
    res = gpumon(["--config", str(cfg), "snapshot", "ct200", "--json"], client_env)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    facts = snap["gpus"][3]["health_facts"]
    assert (facts["pcie_width"], facts["pcie_width_max"]) == (4, 16)
    assert snap["gpus"][2]["health_facts"]["pcie_width"] == 16
    assert snap["gpus"][3]["health_facts"]["rows_pending"] is False  # "No", not null
    alerts = [a for a in snap["alerts"] if a["kind"] == "gpu_health"]
    assert [(a["gpu"], a["severity"]) for a in alerts] == [(3, "warning")], alerts
    assert alerts[0]["message"].startswith(
        "GPU 3 PCIe link at x4 of x16: downtrained; transfers 4x slower"
    )


def test_doctor_gpus_fails_on_a_downtrained_link_and_a_pending_remap(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = config_with(sshd, tmp_path, "pcie_x4:3,row_pending:5")
    res = gpumon(["--config", str(cfg), "doctor", "ct200", "--gpus", "--json"], client_env)
    assert res.returncode == 1, res.stdout + res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["pcie links"]["status"] == "problem"
    assert "GPU 3 PCIe link at x4 of x16" in checks["pcie links"]["evidence"]
    assert checks["row remapping"]["status"] == "problem"
    assert "reset the GPU at the next chance" in checks["row remapping"]["evidence"]
    assert checks["ecc"]["status"] == "ok"
    assert checks["dcgmi diag"]["status"] == "n/a"  # no dcgmi on the target


def test_doctor_gpus_passes_healthy_gpus_and_runs_dcgmi_level_1(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = config_with(sshd, tmp_path, None)
    called = sshd.root / "dcgmi-args"
    dcgmi = sshd.bin / "dcgmi"  # a stand-in on the target's PATH: records what it was asked
    dcgmi.write_text(
        f'#!/bin/sh\necho "$@" >> {called}\n'
        "echo '| Deployment            | Pass  |'\necho '| Memory                | Pass  |'\n"
    )
    dcgmi.chmod(0o755)
    res = gpumon(["--config", str(cfg), "doctor", "ct200", "--gpus"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.rstrip().endswith("PASS: the GPUs are fit to run jobs")
    assert "8 GPUs listed" in res.stdout
    assert called.read_text().split("\n")[:-1] == ["diag -r 1"]  # level 1, once
    dcgmi.write_text("#!/bin/sh\necho '| Memory                | Fail  |'\nexit 226\n")
    res = gpumon(["--config", str(cfg), "doctor", "ct200", "--gpus"], client_env)
    assert res.returncode == 1, res.stdout
    assert "FAIL: dcgmi diag" in res.stdout
