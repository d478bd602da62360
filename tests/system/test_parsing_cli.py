"""nvidia-smi rows with the separator inside a name, end to end: the agent's nvidia-smi loop
(a stand-in nvidia-smi), the monitor and ``snapshot --json`` in a real child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

COMMA_NAME = "NVIDIA RTX PRO 6000, Blackwell, Server Edition"

FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"
SNAPSHOT_JSON = ("snapshot", "local", "--json")


def test_snapshot_json_keeps_a_gpu_whose_name_holds_the_separator(tmp_path: Path) -> None:
    """End to end: the agent's nvidia-smi loop, the monitor, ``snapshot --json``."""
    config = tmp_path / "config.toml"
    config.write_text(
        f'[defaults]\nnvidia_smi = "{FAKE_SMI}"\npython = "{sys.executable}"\nkernel_log = false\n',
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOSTILE_NAME": COMMA_NAME,
        "HOSTILE_PROCESS": "[kworker/0:1]",
    }
    out = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(config), *SNAPSHOT_JSON],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    snapshot = json.loads(out.stdout)
    (gpu,) = snapshot["gpus"]
    assert (gpu["name"], gpu["memory_used_mib"]) == (COMMA_NAME, 1024)
    assert [p["name"] for p in gpu["processes"]] == ["[kworker/0:1]"]
