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
- each event says its incident's headline and fix as the dashboard groups the host's
  alerts (``alerts.incident``: the OOM line leads the memory drop and the crash);
- ``auto_restart`` alerts are not incidents of their own: they say what gpumon decided
  about the job's crash (a restart in 10 s, or that it gave up). The restart itself is
  said when it ended (``note_restart``: an ``update`` with its outcome, when, the new PID
  and how long it took), never before it ran; the resolve says who fixed it;
- the recording is the flight recording whose window holds the incident's start, if any
  (``note_recordings``), never an older one of the same host.

No I/O, no clock of its own; not thread-safe (the event loop calls it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpumon.backends.alerts.incident import (
    INCIDENT_GAP_S,
    Incident,
    alert_headline,
    command_fix,
    incidents,
)
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import iso_time
from gpumon.backends.notify.event import IncidentEvent, incident_key

__all__ = ["IncidentTracker", "OpenIncident"]

_GAVE_UP = re.compile(r"gives up|gave up")
_ATTEMPT = re.compile(r"automatic restart (\d+)/(\d+) in ([\d.]+) (s|min|h)\b")
_UNIT_S = {"s": 1.0, "min": 60.0, "h": 3600.0}
RECORDINGS_KEPT = 32  # per host: the recorder's own bound (recording.WRITTEN_MAX)
Window = tuple[float, float, str]  # a recording's (start, end, path)


NO_LONGER_WATCHED = "no longer watched (host removed from the config)"


@dataclass(slots=True)
class OpenIncident:
    event: IncidentEvent  # the last event sent (or its state, for a repeat)
    alert_keys: set[str] = field(default_factory=set)
    cleared_at: float | None = None  # when its last alert ended (resolve waits min_open_s)


@dataclass(slots=True)
class _JobNote:
    action: str | None = None
    noted_at: float = 0.0  # when ``action`` was noted (decided, or done)
    action_at: float | None = None  # when it was done (None: not yet, e.g. scheduled)
    pid: int | None = None
    took_s: float | None = None
    restarted_by: str | None = None  # "auto-restart" | "a person's restart"
    restarted_at: float = 0.0

    def about(self, ev: IncidentEvent) -> bool:
        """Whether what gpumon did belongs to ``ev``'s incident (not to one long over)."""
        if self.action is None:
            return False
        return self.noted_at >= ev.opened_at - INCIDENT_GAP_S

    def said(self, ev: IncidentEvent) -> IncidentEvent:
        """``ev`` saying what gpumon did (unchanged when that is not about it)."""
        if not self.about(ev):
            return ev
        return replace(
            ev, action=self.action, action_at=self.action_at, pid=self.pid, took_s=self.took_s
        )


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
        self._recordings: dict[str, list[Window]] = {}  # host -> its recordings' windows
        self._seen_auto: set[tuple[str, str]] = set()

    def note_recordings(self, host: str, windows: Iterable[Window]) -> None:
        """``host``'s flight recordings, written or scheduled: (start, end, path) each."""
        self._recordings[host] = list(windows)[-RECORDINGS_KEPT:]

    def recording(self, host: str, at: float) -> str | None:
        """The newest recording of ``host`` whose window holds the time ``at``."""
        held = [w for w in self._recordings.get(host, ()) if w[0] <= at <= w[1]]
        return held[-1][2] if held else None

    def note_restart(
        self,
        host: str,
        job: str,
        *,
        automatic: bool,
        ok: bool,
        at: float,
        pid: int | None = None,
        took_s: float | None = None,
        why: str | None = None,
    ) -> list[IncidentEvent]:
        """A restart of ``job`` ended at ``at`` (``pid``: the job's new PID, ``took_s``:
        how long the restart took, ``why``: how it failed). The job's open incidents say
        so (and, when they resolve, who fixed it); for an automatic restart, returns their
        ``update`` events: what gpumon did is said when it happened."""
        note = self._jobs.setdefault((host, job), _JobNote())
        if ok:
            note.restarted_by = "auto-restart" if automatic else "a person's restart"
            note.restarted_at = at
        if not automatic:
            return []
        note.action = "auto-restart succeeded" if ok else f"auto-restart failed: {why or '?'}"
        note.noted_at, note.action_at, note.pid, note.took_s = at, at, pid, took_s
        out = []
        for inc in self.open.values():
            if inc.event.host == host and inc.event.job == job:
                inc.event = note.said(inc.event.with_event("update", at))
                out.append(inc.event)
        return out

    def restore(self, events: Iterable[IncidentEvent]) -> None:
        """Incidents still open when gpumon last stopped (from the outbox's store): a
        matching alert continues them; one that does not come back resolves."""
        for ev in events:
            self.open.setdefault(ev.key, OpenIncident(ev, cleared_at=ev.time))

    def observe(
        self,
        host: str,
        alerts: Iterable[Alert],
        now: float,
        found: Sequence[Incident] | None = None,
    ) -> list[IncidentEvent]:
        """The events from ``host``'s active alerts now (see the module docstring).
        ``found``: those alerts as the dashboard's incidents (``active_incidents``: its
        fixes only for jobs the config can restart); None groups them here."""
        out: list[IncidentEvent] = []
        active: dict[str, list[Alert]] = {}
        alerts = list(alerts)
        found = incidents(alerts) if found is None else found
        by_alert = {a.key: i for i in found for a in i.alerts}
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
            note = self._note(host, worst.job)
            headline, fix = _story(by_alert.get(worst.key), worst)
            if inc is None:
                recording = self.recording(host, worst.time)
                ev = IncidentEvent(
                    event="open",
                    key=key,
                    host=host,
                    gpu=worst.gpu,
                    job=worst.job,
                    kind=worst.kind,
                    severity=worst.severity.value,
                    cause=worst.message,
                    action=None,
                    resolved_by=None,
                    opened_at=worst.time,
                    time=now,
                    recording=recording,
                    count=len(group),
                    gpumon_host=self.gpumon_host,
                    attachments=(recording,) if recording else (),
                    headline=headline,
                    fix=fix,
                )
                ev = note.said(ev)
                self.open[key] = OpenIncident(ev, {a.key for a in group})
                out.append(ev)
                continue
            inc.cleared_at = None
            new_keys = {a.key for a in group} - inc.alert_keys
            inc.alert_keys |= new_keys
            count = inc.event.count + len(new_keys)
            old_rank = 2 if inc.event.severity == "critical" else 1
            escalated = worst.severity.rank > old_rank
            recording = inc.event.recording or self.recording(host, inc.event.opened_at)
            latest = replace(
                inc.event,
                count=count,
                recording=recording,
                attachments=_files(inc.event.attachments, recording),
                headline=headline,
                fix=fix,
            )
            acted = note.about(inc.event) and note.action != inc.event.action
            if escalated or acted:
                inc.event = note.said(latest).with_event(
                    "update",
                    now,
                    severity=worst.severity.value if escalated else inc.event.severity,
                    cause=worst.message if escalated else inc.event.cause,
                )
                out.append(inc.event)
            else:  # a repeat: counted, never re-paged (its latest story kept for the resolve)
                inc.event = latest
        for key, inc in list(self.open.items()):
            if inc.event.host != host or key in active:
                continue
            if inc.cleared_at is None:
                inc.cleared_at = now
            out.extend(self._maybe_resolve(key, inc, now))
        return out

    def forget_hosts(self, keep: Iterable[str], now: float) -> list[IncidentEvent]:
        """Resolves for the open incidents of hosts no longer watched (dropped from the
        config by a reload, or restored from an outbox of hosts this watch does not
        have): nothing would ever clear them, and a pager must not stay open forever."""
        kept = set(keep)
        out = []
        for key, inc in list(self.open.items()):
            if inc.event.host not in kept:
                del self.open[key]
                out.append(inc.event.with_event("resolve", now, resolved_by=NO_LONGER_WATCHED))
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
        recording = ev.recording or self.recording(ev.host, ev.opened_at)
        resolved = ev.with_event(
            "resolve",
            now,
            resolved_by=by,
            recording=recording,
            attachments=_files(ev.attachments, recording),
        )
        return [note.said(resolved) if note is not None else resolved]

    def _note(self, host: str, job: str | None) -> _JobNote:
        note = self._jobs.get((host, job)) if job else None
        return note if note is not None else _JobNote()

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
            action = "auto-restart gave up"
        elif m := _ATTEMPT.search(text):
            # Decided, not done: the restart runs after its delay, and note_restart says
            # when it ended and how (this used to say "attempted" before it ran).
            due = alert.time + float(m[3]) * _UNIT_S[m[4]]
            note.action = f"auto-restart {m[1]}/{m[2]} due {iso_time(due)}"
            note.noted_at, note.action_at, note.pid, note.took_s = alert.time, None, None, None
            return
        elif "could not start" in text:
            action = "auto-restart failed: " + text.partition("could not start: ")[2]
        else:  # "auto-restart of drafter failed: ...": note_restart says it, with its time
            return
        note.action, note.noted_at, note.action_at = action, alert.time, alert.time
        note.pid = note.took_s = None


def _story(incident: Incident | None, alert: Alert) -> tuple[str, str | None]:
    """The headline and fix of the incident ``alert`` belongs to, as the dashboard says
    them (an alert of no incident: its own headline, no fix)."""
    if incident is None:
        return alert_headline(alert), None
    fix = command_fix(incident)
    return incident.headline, fix.removeprefix("fix: ") if fix else None


def _files(files: tuple[str, ...], recording: str | None) -> tuple[str, ...]:
    """``files`` with the recording first (once)."""
    if not recording:
        return files
    return (recording, *(f for f in files if f != recording))
