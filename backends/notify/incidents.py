"""Incidents from alerts: open once, update on escalation, resolve when the alert clears.

``IncidentTracker.observe(host, alerts, now)`` takes a host's active alerts (the monitor
calls it after every change) and returns the incident events to deliver:

- one incident per stable key (``event.incident_key``: host + GPU + job + rule). A repeat
  (a second OOM line, a new alert of the same key) only counts; a worse severity is an
  ``update``; nothing is ever paged twice for one open incident;
- an incident resolves when no active alert has its key any more (the OOM alert ends
  once the job runs again and its GPU refilled, or a restart cleared it), but not before it
  has been open ``min_open_s`` (an alert that flaps back within that time continues the
  same incident: the alert rules' hysteresis damps the samples, this damps the incidents),
  nor while a restart of its job is running (the resolve says how that ended);
- ``auto_restart`` alerts are not incidents of their own: they say what gpumon did about
  the job's crash (attempted / gave up), and a finished automatic restart
  (``note_restart``) says it succeeded and who fixed it.

No I/O, no clock of its own; not thread-safe (the event loop calls it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from gpumon.backends.alerts.store import Alert
from gpumon.backends.notify.event import IncidentEvent, incident_key

__all__ = ["IncidentTracker", "OpenIncident"]

_GAVE_UP = re.compile(r"gives up|gave up")
_ATTEMPT = re.compile(r"automatic restart (\d+)/(\d+)")


@dataclass(slots=True)
class OpenIncident:
    event: IncidentEvent  # the last event sent (or its state, for a repeat)
    alert_keys: set[str] = field(default_factory=set)
    cleared_at: float | None = None  # when its last alert ended (resolve waits min_open_s)


@dataclass(slots=True)
class _JobNote:
    action: str | None = None
    restarted_by: str | None = None  # "auto-restart" | "a person's restart"
    restarted_at: float = 0.0


class IncidentTracker:
    """Open incidents of every host, from their active alerts."""

    def __init__(
        self,
        min_open_s: float = 30.0,
        gpumon_host: str = "",
        restarting: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.min_open_s = min_open_s
        # (host, job) -> whether a restart of it is running: its incidents resolve once
        # it ended, so the resolve can say whether the restart worked and who ran it.
        self.restarting = restarting
        self.gpumon_host = gpumon_host
        self.open: dict[str, OpenIncident] = {}
        self._jobs: dict[tuple[str, str], _JobNote] = {}
        self._recordings: dict[str, str] = {}  # host -> latest recording path
        self._seen_auto: set[tuple[str, str]] = set()

    def note_recording(self, host: str, path: str | None) -> None:
        if path:
            self._recordings[host] = path

    def note_restart(self, host: str, job: str, *, automatic: bool, ok: bool, at: float) -> None:
        """A restart of ``job`` finished: the job's open incidents say so (and, when they
        resolve, who fixed it)."""
        note = self._jobs.setdefault((host, job), _JobNote())
        if ok:
            note.restarted_by = "auto-restart" if automatic else "a person's restart"
            note.restarted_at = at
        if automatic:
            note.action = "auto-restart succeeded" if ok else "auto-restart failed"
        for inc in self.open.values():
            if inc.event.host == host and inc.event.job == job:
                inc.event = replace(inc.event, action=note.action or inc.event.action)

    def restore(self, events: Iterable[IncidentEvent]) -> None:
        """Incidents still open when gpumon last stopped (from the outbox's store): a
        matching alert continues them; one that does not come back resolves."""
        for ev in events:
            self.open.setdefault(ev.key, OpenIncident(ev, cleared_at=ev.time))

    def observe(self, host: str, alerts: Iterable[Alert], now: float) -> list[IncidentEvent]:
        """The events from ``host``'s active alerts now (see the module docstring)."""
        out: list[IncidentEvent] = []
        active: dict[str, list[Alert]] = {}
        alerts = list(alerts)
        for alert in alerts:  # first: what gpumon did, so the crash's event can say it
            if alert.kind == "auto_restart":
                self._auto_restart(host, alert)
        for alert in alerts:
            if alert.kind == "auto_restart":
                continue
            key = incident_key(host, alert.gpu, alert.job, alert.kind)
            active.setdefault(key, []).append(alert)
        for key, group in active.items():
            worst = max(group, key=lambda a: (a.severity.rank, a.time))
            inc = self.open.get(key)
            action = self._action(host, worst.job)
            if inc is None:
                ev = IncidentEvent(
                    event="open",
                    key=key,
                    host=host,
                    gpu=worst.gpu,
                    job=worst.job,
                    kind=worst.kind,
                    severity=worst.severity.value,
                    cause=worst.message,
                    action=action,
                    resolved_by=None,
                    opened_at=worst.time,
                    time=now,
                    recording=self._recordings.get(host),
                    count=len(group),
                    gpumon_host=self.gpumon_host,
                )
                self.open[key] = OpenIncident(ev, {a.key for a in group})
                out.append(ev)
                continue
            inc.cleared_at = None
            new_keys = {a.key for a in group} - inc.alert_keys
            inc.alert_keys |= new_keys
            count = inc.event.count + len(new_keys)
            old_rank = 2 if inc.event.severity == "critical" else 1
            escalated = worst.severity.rank > old_rank
            if escalated or (action is not None and action != inc.event.action):
                inc.event = inc.event.with_event(
                    "update",
                    now,
                    severity=worst.severity.value if escalated else inc.event.severity,
                    cause=worst.message if escalated else inc.event.cause,
                    action=action or inc.event.action,
                    count=count,
                    recording=self._recordings.get(host) or inc.event.recording,
                )
                out.append(inc.event)
            else:  # a repeat: counted, never re-paged
                inc.event = replace(inc.event, count=count)
        for key, inc in list(self.open.items()):
            if inc.event.host != host or key in active:
                continue
            if inc.cleared_at is None:
                inc.cleared_at = now
            out.extend(self._maybe_resolve(key, inc, now))
        return out

    def due(self, now: float) -> list[IncidentEvent]:
        """Resolves that were waiting for their minimum open time and are due now."""
        out: list[IncidentEvent] = []
        for key, inc in list(self.open.items()):
            if inc.cleared_at is not None:
                out.extend(self._maybe_resolve(key, inc, now))
        return out

    def _maybe_resolve(self, key: str, inc: OpenIncident, now: float) -> list[IncidentEvent]:
        if now - inc.event.opened_at < self.min_open_s:
            return []
        job = inc.event.job
        if job and self.restarting is not None and self.restarting(inc.event.host, job):
            return []
        del self.open[key]
        ev = inc.event
        note = self._jobs.get((ev.host, ev.job or ""))
        by = "recovered"
        if note is not None and note.restarted_by and note.restarted_at >= ev.opened_at:
            by = note.restarted_by
        return [
            ev.with_event(
                "resolve",
                now,
                resolved_by=by,
                action=(note.action if note else None) or ev.action,
                recording=self._recordings.get(ev.host) or ev.recording,
            )
        ]

    def _action(self, host: str, job: str | None) -> str | None:
        note = self._jobs.get((host, job)) if job else None
        return note.action if note else None

    def _auto_restart(self, host: str, alert: Alert) -> None:
        # These alerts stay active until acknowledged: each one is read once.
        if not alert.job or (alert.key, alert.message) in self._seen_auto:
            return
        if len(self._seen_auto) > 1000:
            self._seen_auto.clear()
        self._seen_auto.add((alert.key, alert.message))
        note = self._jobs.setdefault((host, alert.job), _JobNote())
        text = alert.message
        if _GAVE_UP.search(text):
            note.action = "auto-restart gave up"
        elif m := _ATTEMPT.search(text):
            note.action = f"auto-restart attempted ({m[1]}/{m[2]})"
        elif "could not start" in text or "failed" in text:
            note.action = "auto-restart failed"
