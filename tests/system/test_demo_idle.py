"""The demo's ``idle`` scenario as a user runs it: after the swap the drafter's GPUs hold
their memory at 0-2 % (from scenario time 30 s); by 150 s ``check`` and ``snapshot
--json`` say it as one incident of the drafter, naming the processes that hold them; at
60 s (idle 30 s, under the demo's 60 s window) they do not."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args, "--scenario", "idle"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_says_the_drafters_gpus_are_held_and_idle_by_150_s() -> None:
    out = gpumon("check", "demo", "--demo-time", "150", "--window", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    idle = re.match(
        r"WARNING demo: drafter's GPUs 5-7 idle \([0-2]-[0-2] %\) for (\d+) min while holding "
        r"84-86 GiB each; held by PID 874 train\.drafter in CT200 \(\+2 more\); "
        r"3 GPUs idle \d+ min, [0-9.]+ kWh "  # what the idle time drew so far
        # its fix (issue 36 point 2): no command stops a job, the dashboard's s does
        r"— fix: stop drafter \(frees GPUs 5-7\) \(the dashboard's s\) \(8 GPUs",
        out.stdout,
    )
    # idle from 30 s to the 150 asked, and the time the check took (its samples' clock)
    assert idle and int(idle[1]) >= 2, out.stdout


def test_not_yet_after_30_s_idle() -> None:
    out = gpumon("check", "demo", "--demo-time", "60", "--window", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK demo: 8 GPUs"), out.stdout


def test_snapshot_json_has_the_kind() -> None:
    out = gpumon("snapshot", "demo", "--demo-time", "150", "--json")
    assert out.returncode == 0, out.stderr
    alerts = json.loads(out.stdout)["alerts"]
    assert [(a["kind"], a["severity"], a["job"], a["gpu"]) for a in alerts] == [
        ("gpu_idle_held", "warning", "drafter", 5)
    ]
