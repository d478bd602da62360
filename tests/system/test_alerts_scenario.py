"""The simulator's training-oom scenario end to end: the real job program's whole log and the
simulated nvidia-smi through the real parsers into the alert engine; the trend warns before
the threshold, the OOM is critical, nothing alerts after it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import Alert, AlertEngine, AlertRules
from gpumon.backends.model import Health
from gpumon.backends.sim import ENV_VARS, OOM_AT, OOM_GPU, SimSettings, wall_time, write_job_wrapper

from sim_samples import sim_printers, sim_sample

pytestmark = pytest.mark.system


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _drafter_log(tmp_path: Path) -> list[str]:
    """The simulated job's whole log (started an hour late, it writes it all at once)."""
    exe = write_job_wrapper(tmp_path / "bin", SimSettings(t0=time.time() - 3600.0))
    log = tmp_path / "drafter.log"
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    done = subprocess.run([str(exe), "--log", str(log)], env=env, timeout=60, capture_output=True)
    assert done.returncode == 1, done.stderr
    return log.read_text(encoding="utf-8").splitlines()


def test_training_oom_scenario_end_to_end(tmp_path: Path) -> None:
    lines = _drafter_log(tmp_path)
    crash_at = next(i for i, ln in enumerate(lines) if "CUDA_VISIBLE_DEVICES" in ln)
    progress, crash = lines[:crash_at], lines[crash_at:]
    settings = SimSettings()
    printers = sim_printers(settings)
    clock = Clock()
    engine = AlertEngine("ct200", AlertRules(), clock=clock)
    heard: list[tuple[float, Alert]] = []
    engine.add_listener(lambda a: heard.append((clock.t - settings.t0, a)))
    ttf_at_50 = None
    for t in range(91):
        clock.t = wall_time(settings, t)
        s = sim_sample(printers, settings, t)
        engine.on_sample(s)
        if t == 50:
            ttf_at_50 = engine.time_to_full(OOM_GPU)
        if t < OOM_AT and t < len(progress):
            assert engine.on_log_lines("/root/drafter.log", [progress[t]], job="drafter") == []
        if t == OOM_AT:
            new = engine.on_log_lines("/root/drafter.log", crash, job="drafter", gpus=(5, 6, 7))
            assert [(a.kind, a.severity, a.gpu) for a in new] == [("cuda_oom", Health.CRITICAL, 6)]
            assert "[process GPU 1 = GPU 6 (CUDA_VISIBLE_DEVICES=5,6,7)]" in new[0].message
    before = [(t, a) for t, a in heard if t < OOM_AT]
    assert all(a.gpu == OOM_GPU for _, a in before)  # the steady GPUs never alert
    ttf = next(t for t, a in before if a.kind == "time_to_full")
    warn = next((t, a) for t, a in before if a.kind == "memory")
    assert ttf < warn[0] < OOM_AT and ttf <= 30  # the trend warns well before the threshold
    assert warn[1].severity is Health.WARNING and float(warn[1].message.split()[3][:-1]) >= 95.0
    assert any(a.kind == "memory" and a.severity is Health.CRITICAL for _, a in before)
    assert ttf_at_50 is not None and 3.0 <= ttf_at_50 <= 20.0
    at_oom = {a.kind: a for t, a in heard if t == OOM_AT}
    assert set(at_oom) == {"oom_death", "cuda_oom"}
    assert at_oom["oom_death"].gpu == OOM_GPU and at_oom["oom_death"].severity is Health.CRITICAL
    assert at_oom["cuda_oom"].job == "drafter"
    assert [t for t, _ in heard if t > OOM_AT] == []
    assert {a.kind for a in engine.active()} == {"oom_death", "cuda_oom"}  # memory ones cleared
    assert engine.time_to_full(OOM_GPU) is None and engine.worst() is Health.CRITICAL
