"""``gpumon snapshot local`` / ``check local`` on a machine without nvidia-smi (and without
NVML: tests/support/no_nvml) answer as soon as the agent's first try failed, with its
reason, instead of after ``--timeout`` (issue 33.3: they waited their whole 20 s); a
failure that may pass still gets the agent's retries. Run for real: the early agent
(``transport.prestart``) with a PATH that has no nvidia-smi on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"
TIMEOUT_S = 40  # --timeout: what the old code waited out before it answered
MISSING = 'nvidia-smi: "nvidia-smi: No such file or directory" (exit 127). The nvidia-smi command '
MISSING += "is missing, or not on PATH, on the target"
# An nvidia-smi whose first run fails with an exit code alone (nothing says it is final),
# then the stand-in: the agent tries again after its backoff and the snapshot has the GPU.
FAILS_ONCE = """#!/bin/sh
if [ ! -e "{mark}" ]; then
    : > "{mark}"
    exit 1
fi
exec "{python}" "{fake}" "$@"
"""


def _gpumon(
    *args: str, path: Path, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    """gpumon with ``path`` alone on PATH and an empty config; the result and how long it
    took, in seconds."""
    config = tmp_path / "gpumon.toml"
    config.write_text("")
    env = {**os.environ, "PATH": str(path), "GPUMON_CONFIG": str(config)}
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args, "--timeout", str(TIMEOUT_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 3,
    )
    return res, time.monotonic() - started


@pytest.fixture
def empty_bin(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_check_without_nvidia_smi_is_unknown_with_the_reason_at_once(
    empty_bin: Path, tmp_path: Path
) -> None:
    res, took = _gpumon("check", "local", path=empty_bin, tmp_path=tmp_path)
    assert (res.returncode, res.stdout) == (3, f"UNKNOWN local: {MISSING}\n"), res.stderr
    # The answer came from the agent's failure, not from the timeout (a bound, not a speed).
    assert took < TIMEOUT_S / 2, f"{took:.1f} s"


def test_snapshot_without_nvidia_smi_says_why_at_once(empty_bin: Path, tmp_path: Path) -> None:
    res, took = _gpumon("snapshot", "local", "--json", path=empty_bin, tmp_path=tmp_path)
    assert res.returncode == 3, res.stdout + res.stderr
    snap = json.loads(res.stdout)
    assert (snap["error"], snap["gpus"], snap["source"]) == (MISSING, [], "agent/nvidia-smi")
    assert took < TIMEOUT_S / 2, f"{took:.1f} s"


def test_a_failure_that_may_pass_is_tried_again(empty_bin: Path, tmp_path: Path) -> None:
    smi = empty_bin / "nvidia-smi"
    mark = tmp_path / "failed-once"
    smi.write_text(FAILS_ONCE.format(mark=mark, python=sys.executable, fake=FAKE_SMI))
    smi.chmod(0o755)
    res, _ = _gpumon("snapshot", "local", "--json", path=empty_bin, tmp_path=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert mark.exists()  # it did fail first
    snap = json.loads(res.stdout)
    assert len(snap["gpus"]) == 1 and snap["error"] is None, snap
