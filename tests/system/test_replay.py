"""A recorded incident replays through the monitor: samples, alerts, pause, step, speed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gpumon.backends.actions import Session
from gpumon.backends.alerts import AlertEngine
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.model import ConnState, GpuSample, HostSample
from gpumon.backends.monitor import ReplaySource, replay_monitor
from gpumon.backends.recording import FlightRecorder, load_recording

pytestmark = pytest.mark.system

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)


def _sample(t: float, used: int) -> HostSample:
    gpu = GpuSample(index=6, uuid="GPU-6", memory_total_mib=97887, memory_used_mib=used)
    return HostSample("ct200", t, None, (gpu,))


def _recording(tmp_path: Path) -> Path:
    """A real recorder writes an incident: GPU 6 fills up and goes critical."""
    now = [1000.0]
    recorder = FlightRecorder("ct200", clock=lambda: now[0], directory=tmp_path)
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: now[0])
    engine.add_listener(recorder.on_alert)
    for i in range(200):
        now[0] = 1000.0 + i
        sample = _sample(now[0], min(80000 + 200 * i, 97200))
        recorder.record(sample)
        engine.on_sample(sample)
        if i == 85:  # the job's log says why: an event alert, not derivable from samples
            engine.on_log_lines("/root/train.log", [OOM_LINE], job="drafter", gpus=(6,))
        path = recorder.flush_due(now[0])
        if path is not None:
            return path
    raise AssertionError("nothing was recorded")


async def test_replay_plays_samples_and_alerts_with_pause_step_and_speed(tmp_path: Path) -> None:
    path = _recording(tmp_path)
    recording = load_recording(path)
    assert len(recording.samples) > 60
    replay = ReplaySource.from_file(path)
    monitor = replay_monitor(replay)
    assert monitor.name == "ct200" and monitor.interval == 1.0
    assert not replay.capabilities.actions and not replay.capabilities.interval
    assert Session().watch(monitor) is None  # no machine: no jobs to act on
    replay.set_paused(True)
    monitor.start()
    await asyncio.sleep(0.05)
    assert monitor.samples == 0  # paused before the first sample
    assert replay.step() and monitor.samples == 1
    assert monitor.latest is not None and monitor.latest.time == recording.samples[0].time
    assert monitor.stale_s() == 0.0  # ages are read on the recording's clock
    for _ in range(10):
        assert replay.faster() >= 1.0
    assert replay.speed == 30.0
    replay.set_paused(False)
    deadline = time.monotonic() + 10
    while not replay.finished:
        assert time.monotonic() < deadline, "replay too slow at 30x"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.05)
    assert monitor.status.state == ConnState.STOPPED
    assert monitor.status.error == "end of recording"
    assert monitor.samples == len(recording.samples)
    assert any(a.severity.value == "critical" for a in monitor.alerts.history())
    replayed = [a for a in monitor.alerts.history() if a.kind == "cuda_oom"]
    assert len(replayed) == 1 and replayed[0].gpu == 6 and replayed[0].job == "drafter"
    (recorded,) = [a for a in recording.alerts if a["kind"] == "cuda_oom"]
    assert replayed[0].time == recorded["epoch"]  # at its recorded moment
    assert not list(tmp_path.glob("**/*.jsonl.gz"))[1:]  # the replay recorded nothing more
    await monitor.stop()
    assert monitor.source.transport is None
    with pytest.raises(LookupError, match="reaches no machine"):
        _ = monitor.transport
