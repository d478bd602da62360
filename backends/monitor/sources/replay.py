"""``ReplaySource``: a flight recording played into a monitor, as it happened.

    source = ReplaySource.from_file(path)
    monitor = replay_monitor(source)       # monitor.compose: a HostMonitor on its clock
    source.set_paused(True); source.step(); source.faster()

The samples go through the monitor the dashboard watches live, so histories, alerts and
the screen behave as they did during the incident; ages and "full in ~40 s" read as they
did then, because the monitor's clock is the recording's. The recorded log reads go
through it too (the jobs pane, and the log alerts re-derived from the lines). Recorded
alerts are replayed at their recorded time only when nothing replayed derives them again:
not the sample rules' (memory, time-to-full, GPU health, OOM death, stale data), not those
of a log whose lines are in the recording, and each key once. ``next_alert()`` /
``previous_alert()`` jump to the first sample of the recording's next / previous incident
(its alerts grouped as ``alerts.incident`` groups them: by job, else GPU, while less than
``INCIDENT_GAP_S`` apart), where the memory had not dropped yet; ``step_back()`` goes one
sample back. Going back plays the recording again from its start into the cleared
monitor (``seeking`` meanwhile). A replay reaches no machine: no actions, no interval to
change, and nothing is recorded again.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.incident import INCIDENT_GAP_S
from gpumon.backends.alerts.kinds import CONDITION_KINDS, Tag, tagged
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import ConnState, Health
from gpumon.backends.recording.recorder import Recording, load_recording

from .base import REPLAY, Capabilities, Sink, Source

__all__ = ["SPEEDS", "ReplaySource", "incident_starts"]

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
SAMPLE_KINDS = CONDITION_KINDS | tagged(Tag.FROM_SAMPLES)  # what the samples raise again


class ReplaySource(Source):
    """Plays ``recording``'s samples at their recorded pace times ``speed``."""

    def __init__(self, recording: Recording, path: Path | None = None) -> None:
        if not recording.samples:
            raise ValueError(f"{path or 'recording'}: no samples to replay")
        self.recording = recording
        self.path = path
        name = str(recording.header.get("host") or recording.samples[0].host)
        container = _container(recording.header.get("container"))
        self.host = HostConfig(
            name=name,
            kind="local",
            interval=_interval(recording),
            jobs=_jobs(recording.header.get("jobs")),
            container=container,  # whose processes are another container's, as live
        )
        self.position = 0  # index of the next sample to play
        # where n / N jump: the first alert of each incident, derived again or not
        self.alert_times = incident_starts(recording.alerts)
        self.alerts_to_replay = _events(recording, derived=_derived_kinds(container))
        self._events = list(self.alerts_to_replay)
        self._logs = list(recording.logs)
        self._next_log = 0
        self.seeking = False  # playing ahead to a jump's target (the screen stays quiet)
        self._jumped_to: float | None = None
        self.on_rewind: Callable[[], None] | None = None  # clears the monitor played into
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

    def has_next_alert(self) -> bool:
        return self._next_target() is not None

    def has_previous_alert(self) -> bool:
        return self._previous_target() is not None

    def _next_target(self) -> float | None:
        after = self.now + 1e-6 if self.position else self.now - 1e-6  # nothing played yet
        return next((t for t in self.alert_times if t > after), None)

    def _previous_target(self) -> float | None:
        at = self.now if self._jumped_to is None else min(self._jumped_to, self.now)
        return next((t for t in reversed(self.alert_times) if t < at - 1e-6), None)

    def next_alert(self) -> bool:
        """Play on to the sample of the next recorded alert (the recording stays paused
        or playing as it was); False when there is none after the sample on show."""
        target = self._next_target()
        if target is None or self._sink is None:
            return False
        self._seek(target)
        return True

    def previous_alert(self) -> bool:
        """Back to the sample of the previous recorded alert (before the one jumped to
        last, when no sample played since): the monitor is cleared and the recording
        played again from its start up to it; False when there is none."""
        target = self._previous_target()
        if target is None or self._sink is None or self.on_rewind is None:
            return False
        self._rewind()
        self._seek(target)
        return True

    @property
    def can_step_back(self) -> bool:
        return self.position > 1 and self._sink is not None and self.on_rewind is not None

    def step_back(self) -> bool:
        """One sample back (the recording played again from its start into the cleared
        monitor, up to the sample before the one on show); False at the first sample."""
        if not self.can_step_back or self._sink is None:
            return False
        back_to = self.position - 1
        self._rewind()
        self.seeking = True
        try:
            while self.position < back_to:
                self._play_next(self._sink)
        finally:
            self.seeking = False
        self._jumped_to = None
        self._wake.set()
        return True

    def _rewind(self) -> None:
        """Clear the monitor and go back to before the first sample."""
        assert self.on_rewind is not None
        if self.finished and self._sink is not None:  # it plays again after its end
            self._sink.ingest_status(ConnState.CONNECTED, source=self.recording.samples[0].source)
        self.on_rewind()
        self.position, self._next_log = 0, 0
        self._events = list(self.alerts_to_replay)
        self.now = self.recording.samples[0].time

    def _seek(self, target: float) -> None:
        sink = self._sink
        assert sink is not None
        self.seeking = True
        try:
            while not self.finished and (self.position == 0 or self.now < target):
                self._play_next(sink)
        finally:
            self.seeking = False
        self._jumped_to = target  # between two samples: "previous" is before this one
        self._wake.set()  # the player's wait starts again from here

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
        while True:  # at the end it waits too: N or "," may go back and play on from there
            if self.paused or self.finished:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._play_next(sink)
            if self.finished:
                continue
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
        if not self.seeking:
            self._jumped_to = None
        logs = self._logs
        while self._next_log < len(logs) and logs[self._next_log]["time"] <= sample.time:
            entry = logs[self._next_log]
            self._next_log += 1
            self.now = max(self.now, entry["time"])
            sink.ingest_log(entry["tag"], entry["path"], entry["lines"], backlog=entry["backlog"])
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
                facts=AlertFacts.from_json(data.get("facts")),  # none in an older recording
            )
        except (KeyError, ValueError, TypeError):
            pass  # a malformed alert line in the recording is skipped, like the loader does


def incident_starts(alerts: list[dict[str, Any]]) -> list[float]:
    """The time of the first alert of each incident among the recorded ``alerts``: those
    of one job (else one GPU, else one key) belong together while each comes at most
    ``INCIDENT_GAP_S`` after the group's last sight, as ``alerts.incident`` groups them.
    The OOM's memory warning, CUDA OOM line and memory drop are one incident: a jump
    lands on its first sample, before the memory dropped."""
    last_seen: dict[tuple[str, object], float] = {}
    starts: set[float] = set()
    for alert in sorted(alerts, key=lambda a: _epoch(a) or 0.0):
        at = _epoch(alert)
        if at is None:
            continue
        job, gpu = alert.get("job"), alert.get("gpu")
        subject: tuple[str, object] = (
            ("job", job) if job else ("gpu", gpu) if gpu is not None else ("key", alert.get("key"))
        )
        seen = last_seen.get(subject)
        if seen is None or at - seen > INCIDENT_GAP_S:
            starts.add(at)
        try:
            until = max(at, float(alert.get("last_seen") or at))
        except (TypeError, ValueError):
            until = at
        last_seen[subject] = max(until, seen or until)
    return sorted(starts)


def _epoch(alert: dict[str, Any]) -> float | None:
    try:
        return float(alert["epoch"])
    except (KeyError, TypeError, ValueError):
        return None


def _derived_kinds(container: int | None) -> frozenset[str]:
    """The kinds the replayed samples raise again by themselves: ``foreign_process`` only
    when the recording names the watched container (an older one does not; its recorded
    alerts are replayed instead, so the evidence of a held GPU is not lost)."""
    return SAMPLE_KINDS if container is not None else SAMPLE_KINDS - {"foreign_process"}


def _container(value: object) -> int | None:
    """The header's "container" (a CT id), None when absent or not an id."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _events(recording: Recording, derived: frozenset[str] = SAMPLE_KINDS) -> list[dict[str, Any]]:
    """The recorded alerts to replay (see the module docstring), oldest first: each key
    once, at its first time, with its last (worst) record's severity and message; none of
    the ``derived`` kinds (the samples raise those again)."""
    logged = {entry["path"] for entry in recording.logs}
    by_key: dict[str, dict[str, Any]] = {}
    for alert in recording.alerts:
        key, kind, at = str(alert.get("key")), alert.get("kind"), _epoch(alert)
        if kind in derived or at is None:
            continue
        if key.startswith("log:") and key[4:].rpartition(":")[0] in logged:
            continue  # its log's lines are replayed: the engine raises it again
        first = by_key.get(key)
        by_key[key] = alert if first is None else {**alert, "epoch": _epoch(first)}
    return sorted(by_key.values(), key=lambda a: float(a["epoch"]))


def _jobs(data: object) -> tuple[JobConfig, ...]:
    """The header's "jobs" as configs (name and GPUs: enough for the jobs pane)."""
    out = []
    for job in data if isinstance(data, list) else ():
        if not isinstance(job, dict) or not isinstance(job.get("name"), str):
            continue
        gpus = job.get("gpus")
        listed = gpus if isinstance(gpus, list) else []
        out.append(JobConfig(name=job["name"], gpus=tuple(g for g in listed if isinstance(g, int))))
    return tuple(out)


def _interval(recording: Recording) -> float:
    times = [s.time for s in recording.samples[:20]]
    gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
    return min(max(gaps[len(gaps) // 2], 0.1), 3600.0) if gaps else 1.0
