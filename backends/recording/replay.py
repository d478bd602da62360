"""Replay a flight recording through the same monitor the dashboard watches live.

``ReplayMonitor`` is a HostMonitor whose samples come from a recording instead of a
machine: histories, alerts and the screen behave as they did during the incident. Its
clock is the recording's, so ages and "full in ~40 s" read as they did then. It can be
paused, stepped one sample at a time and sped up.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpumon.backends.alerts.store import CONDITION_KINDS
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import ConnState, Health
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.recording.recorder import Recording, load_recording
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class _NoMachine(Transport):
    """A replay talks to no machine."""

    @property
    def label(self) -> str:
        return "recording"

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        raise TransportError("a replay runs no commands")


class ReplayMonitor(HostMonitor):
    """Plays ``recording``'s samples at their recorded pace times ``speed``."""

    def __init__(self, recording: Recording, path: Path | None = None) -> None:
        if not recording.samples:
            raise ValueError(f"{path or 'recording'}: no samples to replay")
        name = str(recording.header.get("host") or recording.samples[0].host)
        host = HostConfig(name=name, kind="local", interval=_interval(recording))
        self.recording = recording
        self.path = path
        self.position = 0  # index of the next sample to play
        # Event alerts (a CUDA OOM from a log, an Xid) are not in the samples: replay them
        # at their recorded time. Conditions (memory, time to full) re-derive from samples.
        self._events = sorted(
            (a for a in recording.alerts if a.get("kind") not in CONDITION_KINDS),
            key=lambda a: float(a.get("epoch") or 0.0),
        )
        self.speed = 1.0
        self.paused = False
        self._now = recording.samples[0].time
        self._wake = asyncio.Event()
        # Replaying an incident must not record it again.
        super().__init__(
            host, _NoMachine(host), clock=lambda: self._now, reconnect=False, record=False
        )

    @classmethod
    def from_file(cls, path: Path) -> ReplayMonitor:
        return cls(load_recording(path), path)

    @property
    def finished(self) -> bool:
        return self.position >= len(self.recording.samples)

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._wake.set()

    def step(self) -> bool:
        """Play the next sample now (while paused); False at the end."""
        if self.finished:
            return False
        self._play_next()
        return True

    def faster(self) -> float:
        self.speed = next((s for s in SPEEDS if s > self.speed), SPEEDS[-1])
        self._wake.set()
        return self.speed

    def slower(self) -> float:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0])
        self._wake.set()
        return self.speed

    def _play_next(self) -> None:
        sample = self.recording.samples[self.position]
        self.position += 1
        self._now = sample.time
        self.processes = sample.processes
        self.processes_time = sample.time
        self.ingest(sample)
        while self._events and float(self._events[0].get("epoch") or 0.0) <= sample.time:
            self._replay_alert(self._events.pop(0))
        if self.finished:
            self._set_status(ConnState.STOPPED, error="end of recording")

    def _replay_alert(self, data: dict[str, Any]) -> None:
        try:
            severity = Health(data["severity"])
            gpu = data.get("gpu")
            self.alerts.raise_alert(
                str(data["kind"]),
                severity,
                str(data.get("message", "")),
                gpu=gpu if isinstance(gpu, int) else None,
                job=data.get("job") if isinstance(data.get("job"), str) else None,
                key=f"replay:{data.get('key')}",
                at=float(data.get("epoch") or self._now),
            )
        except (KeyError, ValueError, TypeError):
            pass  # a malformed alert line in the recording is skipped, like the loader does
        self._notify()

    async def _run(self) -> None:
        first = self.recording.samples[0]
        self._set_status(ConnState.CONNECTED, source=first.source)
        while not self.finished:
            if self.paused:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._play_next()
            if self.finished:
                break
            gap = self.recording.samples[self.position].time - self._now
            self._wake.clear()
            try:
                async with asyncio.timeout(max(gap, 0.0) / self.speed):
                    await self._wake.wait()
            except TimeoutError:
                pass


def _interval(recording: Recording) -> float:
    times = [s.time for s in recording.samples[:20]]
    gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
    return min(max(gaps[len(gaps) // 2], 0.1), 3600.0) if gaps else 1.0
