"""``gpumon usage demo --since 1h --by container`` after a 10-minute demo at 10x (issue 39
point 2): the GPU-hours used and held idle per container it prints are the ones this test
computes by itself from the flight recording of the same run (every sample the watch
took, with its processes), by the rules docs/usage.md states:

- a sample counts the seconds since the one before it (none after a gap of more than
  5 sampling intervals, at least 3 s);
- each GPU's seconds go to the processes on it, by the memory each holds (``(nobody)``
  where none does), under each process's container as the process lines write it;
- used: utilisation at or over 5 %; held idle: over 2 GiB used at under 5 %.

The demo's clock is held at 0 until the watch has sampled (its exporter answers), then
runs 60 s at 10x: the drafter's OOM comes 6 s in, and its recording (10 min before to
1 min after) holds every sample of the run when the watch stops at 60 s (the recording is
written at the stop)."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from held_demo import HeldDemo
from prometheus import free_port

pytestmark = pytest.mark.system

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
SPEED = 10.0
DEMO_S = 600.0  # ten minutes of the demo's clock
WATCHED = "200"  # the demo's CT200


def _sampled(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return "gpumon_gpu_memory_used_bytes{" in resp.read().decode()
    except OSError:
        return False


def _wait(proc: subprocess.Popen[bytes], log: Path, condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def _container(process: dict[str, Any]) -> str:
    """Where a process runs, as the dashboard's process lines say it."""
    if process["source"] == "host":
        c = process["container"]
        return "host" if c is None else (f"CT{c}" if c.isdigit() else c)
    if process["source"] == "device-files":
        return "files"
    return "?" if process["pid"] is None else f"CT{WATCHED}"


def _on(process: dict[str, Any], gpu: dict[str, Any]) -> bool:
    if process["gpu_uuid"] is not None:
        return bool(process["gpu_uuid"] == gpu["uuid"])
    return bool(process["gpu_bus_id"] == gpu["bus_id"])


def _expected(recording: Path) -> tuple[dict[str, list[float]], int]:
    """container -> [GPU-hours used, GPU-hours held idle], and the samples read."""
    header: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    with gzip.open(recording, "rt") as f:
        for line in f:
            obj = json.loads(line)
            if obj["type"] == "header":
                header = obj
            elif obj["type"] == "sample":
                samples.append(obj)
    gpu_fields, process_fields = header["gpu_fields"], header["process_fields"]
    samples.sort(key=lambda s: s["time"])
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    gap = max(3.0, 5 * 1.0)  # the demo samples every second
    for before, sample in itertools.pairwise(samples):
        dt = sample["time"] - before["time"]
        if not 0 < dt <= gap:
            continue
        procs = [dict(zip(process_fields, p, strict=True)) for p in sample["processes"]]
        for row in sample["gpus"]:
            gpu = dict(zip(gpu_fields, row, strict=True))
            util, used = gpu["utilization_pct"], gpu["memory_used_mib"]
            busy = util is not None and util >= 5.0
            idle = util is not None and used is not None and used > 2048 and util < 5.0
            on = [p for p in procs if p["source"] != "device-files" and _on(p, gpu)]
            total = sum(p["memory_mib"] or 0 for p in on)
            shares: dict[str, float] = defaultdict(float)
            for p in on:
                share = (p["memory_mib"] or 0) / total if total else 1 / len(on)
                shares[_container(p)] += share
            if not on:
                shares["(nobody)"] = 1.0
            for where, share in shares.items():
                out[where][0] += dt * share / 3600 if busy else 0.0
                out[where][1] += dt * share / 3600 if idle else 0.0
    return dict(out), len(samples)


def test_usage_by_container_matches_the_flight_recording(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[usage]\nprice_per_kwh = 0.15\ncurrency = "EUR"\n')
    held, port = HeldDemo(tmp_path), free_port()
    log = tmp_path / "watch.log"
    demo = ["--demo-speed", str(SPEED), "--demo-time", "0", *held.args]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*GPUMON, "watch", "demo", "--config", str(cfg), "--metrics-port", str(port), *demo],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait(proc, log, lambda: _sampled(port), 90)
        held.release()
        released = time.monotonic()
        # the story's ten minutes of demo time: a duration, not a wait for something
        _wait(proc, log, lambda: time.monotonic() - released >= DEMO_S / SPEED, 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    [recording] = _recordings()
    expected, count = _expected(recording)
    assert count >= 55, f"{count} samples recorded"
    assert set(expected) >= {"CT200", "CT201"}  # the drafter's CT and the jupyter's
    assert expected["CT201"][1] > 0  # the jupyter held GPU 6 idle after the OOM

    cmd = [*GPUMON, "usage", "demo", "--since", "1h", "--by", "container", "--config", str(cfg)]
    answer = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, check=True).stdout)
    got = {row["key"]: [row["used_gpu_hours"], row["idle_gpu_hours"]] for row in answer["rows"]}
    assert set(got) == set(expected)
    for where, (used, idle) in expected.items():
        assert got[where][0] == pytest.approx(used, abs=2e-6), where
        assert got[where][1] == pytest.approx(idle, abs=2e-6), where
    assert answer["currency"] == "EUR"
    assert answer["total"]["cost"] == pytest.approx(answer["total"]["energy_kwh"] * 0.15, abs=1e-5)

    text = subprocess.run(cmd, capture_output=True, check=True, text=True).stdout
    lines = {line.split()[0]: line.split() for line in text.splitlines()[2:] if line.strip()}
    for where, (used, idle) in expected.items():
        shown = lines[where]
        assert shown[1] == _hours(used) and shown[2] == _hours(idle), (where, text)
    assert "held idle most: CT201 / root / jupyter-lab" in text, text


def _hours(hours: float) -> str:
    return "<0.01" if 0 < hours < 0.005 else f"{hours:.2f}"


def _recordings() -> list[Path]:
    folder = Path(os.environ["XDG_STATE_HOME"]) / "gpumon" / "recordings"
    return sorted(folder.glob("demo-*.jsonl.gz"))
