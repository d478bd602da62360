"""The demo's doctor is the same on every machine: it answers for the simulated CT200,
not for the machine gpumon runs on. Here that machine is given an nvcc 13.0 on PATH, a
CUDA_HOME without nvcc and an LD_LIBRARY_PATH, all of which a real probe would report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system


def test_the_demo_doctor_reads_the_simulated_target_not_this_machine(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    nvcc.chmod(0o755)
    home = tmp_path / "cuda-home"  # no bin/nvcc: a real probe calls that a problem
    home.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CUDA_HOME": str(home),
        "LD_LIBRARY_PATH": str(tmp_path),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "TMPDIR": str(tmp_path),
    }
    env.pop("GPUMON_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "doctor", "demo", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    said = {name: (c["status"], c["evidence"]) for name, c in checks.items()}
    assert said["nvcc"] == ("ok", "/usr/local/cuda/bin/nvcc (release 12.8)")
    assert said["libnvrtc"] == ("ok", "ctypes.CDLL('libnvrtc.so.12') loads")
    assert said["CUDA_HOME"][0] == "ok"
    assert said["CUDA_HOME"][1].startswith("unset; /usr/local/cuda has bin/nvcc")
    assert said["disk"] == ("ok", "412.0 GiB free at /")
    assert said["driver userspace"][0] == "ok"
    text = out.stdout
    assert str(bin_dir) not in text and str(home) not in text and "13.0" not in text
