"""``gpumon restart`` says the cause is still there before its plan (issue 36 point 3), as
the dashboard's dialog does: 10 s after the demo drafter's CUDA OOM, CT 201's jupyter-lab
still holds 6 GiB of GPU 6. Going on takes a confirmation on a terminal ("... anyway?") or
``--yes``; then the wait for free GPUs does not wait for the jupyter, and says so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system

GPUMON = [sys.executable, "-m", "gpumon.tui.cli", "restart", "demo", "drafter"]
DEMO = ["--demo-time", "70"]  # 10 s after the OOM: the jupyter outlives the drafter
CAUSE = "the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB"
WARNING = f"{CAUSE} — stop it first (host PID 3187442; the dashboard's K), or restart anyway"


def test_the_warning_comes_before_the_plan_and_no_terminal_is_no_confirmation() -> None:
    out = subprocess.run(
        [*GPUMON, *DEMO], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 2, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == WARNING
    assert lines[1] == "Restart drafter on demo (simulator)"
    assert "pass --yes" in out.stderr and "[stop]" not in out.stdout


def test_a_terminal_is_asked_to_restart_anyway() -> None:
    main, side = os.openpty()  # a terminal on stdin: gpumon asks there
    try:
        proc = subprocess.Popen(
            [*GPUMON, *DEMO], stdin=side, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        os.write(main, b"n\n")
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        os.close(main)
        os.close(side)
    assert proc.returncode == 2, stderr
    assert stdout.splitlines()[0] == WARNING
    assert stdout.rstrip().endswith("Restart drafter on demo anyway? [y/N]")
    assert "not confirmed; nothing changed" in stderr


def test_yes_restarts_anyway_and_the_wait_says_so() -> None:
    out = subprocess.run(
        [*GPUMON, *DEMO, "--yes"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == WARNING
    [free] = [line for line in out.stdout.splitlines() if line.startswith("[wait_free] GPUs free")]
    assert free.endswith(f"(restarting anyway: {CAUSE})"), free
    assert "OK: drafter restarted" in out.stdout
