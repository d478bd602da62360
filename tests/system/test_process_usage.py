"""Each process's SM and memory-bandwidth % (issue 39 point 1), through the real agent:
``gpumon snapshot local --json`` on the 8 GPUs of the NVML stand-in
(tests/support/fake_nvml, whose ``nvmlDeviceGetProcessUtilization`` is nvidia-ml-py
13.615.71's binding: c_nvmlProcessUtilizationSample_t, NVML_ERROR_NOT_FOUND for no
sample), and the details ``/proc`` gives of the driver's PIDs outside a container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nvml_stand_in import FAKE_NVML, load_fake_nvml

pytestmark = pytest.mark.system


@pytest.fixture
def workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Two real processes (``python3 -c ... --rank N``) that the stand-in lists on every
    GPU, an empty config and the stand-in on the agent's path."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()", "--rank", str(rank)],
            stdin=subprocess.PIPE,
        )
        for rank in (0, 1)
    ]
    config = tmp_path / "gpumon.toml"
    config.write_text("")
    monkeypatch.setenv("GPUMON_CONFIG", str(config))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML.parent))
    monkeypatch.setenv("FAKE_NVML_GPUS", "8")
    monkeypatch.setenv("FAKE_NVML_PROCESS_PID", ",".join(str(p.pid) for p in procs))
    yield [p.pid for p in procs]
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=10)


def _snapshot(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``gpumon snapshot local --json`` in a fresh interpreter: it runs the agent's round
    in its own process (``monitor.oneshot``), which must find the stand-in on its path
    as a gpumon started with this environment does."""
    argv = [sys.executable, "-m", "gpumon.tui.cli", "snapshot", "local", "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    got: dict[str, Any] = json.loads(res.stdout)
    return got


def test_snapshot_json_gives_each_process_the_stand_ins_sm_and_bandwidth(
    workers: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in = load_fake_nvml("fake_pynvml_usage")
    snap = _snapshot(capsys)
    assert snap["source"] == "agent/nvml" and len(snap["gpus"]) == 8, snap
    for gpu in snap["gpus"]:
        got = {p["pid"]: (p["sm_pct"], p["mem_bw_pct"]) for p in gpu["processes"]}
        want = {pid: stand_in.process_usage(gpu["index"], n) for n, pid in enumerate(workers)}
        assert got == want, gpu["index"]


def test_the_driver_pids_get_their_user_command_and_memory_from_proc(
    workers: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside a container the driver's PIDs are this machine's: the detail showed
    ``USER ? CPU - RSS -`` for them, as only the driver's row was sent."""
    snap = _snapshot(capsys)
    procs = snap["gpus"][0]["processes"]
    assert [p["pid"] for p in procs] == workers
    for rank, p in enumerate(procs):
        assert p["command"].endswith(f"--rank {rank}"), p
        assert p["user"] and p["user"] != "?", p
        assert p["rss_mib"] is not None and p["rss_mib"] > 0, p
        assert p["ppid"] == os.getpid(), p


def test_a_driver_that_samples_no_process_says_n_a(
    workers: list[int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_PROCESS_UTIL", "unsupported")
    snap = _snapshot(capsys)
    procs = [p for g in snap["gpus"] for p in g["processes"]]
    assert procs and all(p["sm_pct"] is None and p["mem_bw_pct"] is None for p in procs)


def test_the_demo_reads_each_process_share_from_its_nvidia_smi_pmon() -> None:
    """The demo's agent has no NVML: ``nvidia-smi pmon -c 1 -s u`` (the simulator prints
    590.48's table), joined by the host PID. Frozen at 40 s: each job's process has its
    GPU's utilisation; the jupyter beside the drafter on GPU 6 has no sample, 0 %."""
    argv = ["snapshot", "demo", "--demo-time", "40", "--demo-frozen", "--json"]
    res = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["source"] == "agent/nvidia-smi"
    for gpu in snap["gpus"]:
        ours = [p for p in gpu["processes"] if p["container"] == "200"]
        assert [p["sm_pct"] for p in ours] == [gpu["utilization_pct"]], gpu
        others = [p for p in gpu["processes"] if p["container"] != "200"]
        assert [(p["sm_pct"], p["mem_bw_pct"]) for p in others] == [(0, 0)] * len(others)
    assert any(p["container"] == "201" for p in snap["gpus"][6]["processes"])
