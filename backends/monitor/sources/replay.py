"""``ReplaySource``: a flight recording played into a monitor, as it happened.

    source = ReplaySource.from_file(path)
    monitor = replay_monitor(source)       # a HostMonitor on the recording's clock
    source.set_paused(True); source.step(); source.faster()

The samples go through the monitor the dashboard watches live, so histories, alerts and
the screen behave as they did during the incident; ages and "full in ~40 s" read as they
did then, because the monitor's clock is the recording's. Event alerts (a CUDA OOM from a
log, an Xid) are not in the samples: they are replayed at their recorded time. A replay
reaches no machine: no actions, no interval to change, and nothing is recorded again.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

from gpumon.backends.alerts.store import CONDITION_KINDS
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import ConnState, Health
from gpumon.backends.recording.recorder import Recording, load_recording

from ..state import HostMonitor
from .base import REPLAY, Capabilities, Sink, Source

__all__ = ["SPEEDS", "ReplaySource", "replay_monitor"]

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class ReplaySource(Source):
    """Plays ``recording``'s samples at their recorded pace times ``speed``."""

    def __init__(self, recording: Recording, path: Path | None = None) -> None:
        if not recording.samples:
            raise ValueError(f"{path or 'recording'}: no samples to replay")
        self.recording = recording
        self.path = path
        name = str(recording.header.get("host") or recording.samples[0].host)
        self.host = HostConfig(name=name, kind="local", interval=_interval(recording))
        self.position = 0  # index of the next sample to play
        self._events = sorted(
            (a for a in recording.alerts if a.get("kind") not in CONDITION_KINDS),
            key=lambda a: float(a.get("epoch") or 0.0),
        )
        self.speed = 1.0
        self.paused = False
        self.now = recording.samples[0].time  # the recording's clock
        self._wake = asyncio.Event()
        self._sink: Sink | None = None

    @classmethod
    def from_file(cls, path: Path) -> ReplaySource:
        return cls(load_recording(path), path)

    @property
    def capabilities(self) -> Capabilities:
        return REPLAY

    @property
    def label(self) -> str:
        return "recording"

    def clock(self) -> float:
        return self.now

    @property
    def finished(self) -> bool:
        return self.position >= len(self.recording.samples)

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._wake.set()

    def bind(self, sink: Sink) -> None:
        """Play into ``sink`` (``run`` does this too; ``step`` may come before it)."""
        self._sink = sink

    def step(self) -> bool:
        """Play the next sample now (while paused); False at the end (or with no sink)."""
        if self.finished or self._sink is None:
            return False
        self._play_next(self._sink)
        return True

    def faster(self) -> float:
        self.speed = next((s for s in SPEEDS if s > self.speed), SPEEDS[-1])
        self._wake.set()
        return self.speed

    def slower(self) -> float:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0])
        self._wake.set()
        return self.speed

    async def run(self, sink: Sink) -> None:
        self.bind(sink)
        sink.ingest_status(ConnState.CONNECTED, source=self.recording.samples[0].source)
        while not self.finished:
            if self.paused:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._play_next(sink)
            if self.finished:
                break
            gap = self.recording.samples[self.position].time - self.now
            self._wake.clear()
            try:
                async with asyncio.timeout(max(gap, 0.0) / self.speed):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _play_next(self, sink: Sink) -> None:
        sample = self.recording.samples[self.position]
        self.position += 1
        self.now = sample.time
        sink.ingest_processes(sample.processes, sample.time)
        sink.ingest_sample(sample)
        while self._events and float(self._events[0].get("epoch") or 0.0) <= sample.time:
            self._replay_alert(sink, self._events.pop(0))
        if self.finished:
            sink.ingest_status(ConnState.STOPPED, error="end of recording")

    def _replay_alert(self, sink: Sink, data: dict[str, Any]) -> None:
        try:
            gpu, job = data.get("gpu"), data.get("job")
            sink.ingest_alert(
                str(data["kind"]),
                Health(data["severity"]),
                str(data.get("message", "")),
                gpu=gpu if isinstance(gpu, int) else None,
                job=job if isinstance(job, str) else None,
                key=f"replay:{data.get('key')}",
                at=float(data.get("epoch") or self.now),
            )
        except (KeyError, ValueError, TypeError):
            pass  # a malformed alert line in the recording is skipped, like the loader does


def replay_monitor(source: ReplaySource) -> HostMonitor:
    """The monitor a replay plays into (not started), on the recording's clock; replaying
    an incident does not record it again."""
    monitor = HostMonitor(source.host, source, clock=source.clock, record=False)
    source.bind(monitor)
    return monitor


def _interval(recording: Recording) -> float:
    times = [s.time for s in recording.samples[:20]]
    gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
    return min(max(gaps[len(gaps) // 2], 0.1), 3600.0) if gaps else 1.0
