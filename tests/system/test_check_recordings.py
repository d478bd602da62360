"""``gpumon check`` writes one flight recording per incident, not one per run (issue 36
point 9): a Nagios check every minute on a host whose GPU stays critical would write one
a minute. Each run here is a new demo whose GPU 6 is at 98.8 % (critical) from its first
sample; 20 runs leave one recording. A run that finds the incident over (the demo before
its ramp) ends it: the next critical run records the new incident."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

RUNS = 20
CHECK = [sys.executable, "-m", "gpumon.tui.cli", "check", "demo", "--window", "0"]


def check(demo_time: float) -> int:
    out = subprocess.run(
        [*CHECK, "--demo-time", str(demo_time)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode in (0, 2), out.stdout + out.stderr
    return out.returncode


def recordings() -> list[Path]:
    folder = Path(os.environ["XDG_STATE_HOME"]) / "gpumon" / "recordings"
    return sorted(folder.glob("*.jsonl.gz")) if folder.is_dir() else []


def test_many_checks_of_one_incident_leave_one_recording() -> None:
    for _ in range(RUNS):
        assert check(58.0) == 2  # CRITICAL: GPU 6's memory, then its OOM
    assert len(recordings()) == 1, [p.name for p in recordings()]
    assert check(5.0) == 0  # the incident is over
    assert len(recordings()) == 1
    assert check(58.0) == 2  # a new incident: a new recording
    assert len(recordings()) == 2, [p.name for p in recordings()]
