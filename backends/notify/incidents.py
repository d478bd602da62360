"""Incidents from alerts, one per failure as the dashboard groups them: open once, update
when it escalates, finds a better cause or gpumon acts, resolve when its alerts ended.

``IncidentTracker.observe(host, alerts, now)`` takes a host's active alerts (the monitor
calls it after every change) and returns the incident events to deliver:

- one incident per failure, as the dashboard groups alerts (``alerts.incident``: those
  of one job, else of one GPU, within ``INCIDENT_GAP_S``; alerts of neither: those of one
  kind). Its key is named when it opens (``event.incident_key``: host, GPU, job and the
  kind of the alert that opened it) and stays: the memory warning opens
  "demo/gpu6/drafter/memory", and torch's OOM line 2 s later is an ``update`` of it;
- an ``update`` when its severity rises, when a cause that explains it better arrives
  (``cause_rank``: the new headline, fix and kind; ``previous`` says the kind and
  severity before, for Alertmanager), or when gpumon acts. Another alert of it (the
  memory drop, a second OOM line) only counts; nothing is ever paged twice for one open
  incident, and a better cause that ends first leaves its story (no update back to
  "memory");
- an incident resolves once none of its alerts has been active for ``resolve_after_s``
  (the OOM's end once the job runs again and its GPU refilled, or a restart cleared it;
  a host back that long), not before it has been open ``min_open_s``, nor while a
  restart of its job is running (the resolve says how that ended). An alert of it that
  comes back sooner continues it: an ``update`` that counts its ``episodes`` (a host whose
  sshd flaps is one incident, paged once, with its outages counted; the alert rules'
  hysteresis damps the samples, this damps the incidents);
- an update that changes what the incident says at its top (its cause, its severity)
  begins a new ``page``: PagerDuty keeps an alert's first title, so that page is a new
  alert there (``notifiers``);
- incidents read back from an outbox written when each alert was an incident of its own
  (``restore``) continue as the one the failure's alerts match (the best explained: the
  OOM's, not the memory warning's); the others of the same job (else GPU) resolve,
  ``resolved_by`` "merged into KEY";
- each event says the incident's headline and fix as the dashboard does
  (``Incident.headline``, ``command_fix``), and the cause's raw line;
- ``auto_restart`` alerts are not incidents of their own: they say what gpumon decided
  about the job's crash (a restart in 10 s, or that it gave up: the alert's facts,
  ``Restart``, never its words). The restart itself is
  said when it ended (``note_restart``: an ``update`` with its outcome, when, the new PID
  and how long it took), never before it ran; the resolve says who fixed it;
- the recording is the flight recording whose window holds the incident's start, if any
  (``note_recordings``), never an older one of the same host.

No I/O, no clock of its own; not thread-safe (the event loop calls it). Its callers give
two times: ``now`` (the wall clock) dates the events; ``tick`` (the hub's monotonic clock;
None: ``now``) times the waits, how long an incident has been open (``min_open_s``) and
how long its alerts have been over (``resolve_after_s``), so a wall-clock step during
one neither resolves an incident early nor holds its resolve back by the step's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpumon.backends.alerts.facts import Restart
from gpumon.backends.alerts.incident import (
    INCIDENT_GAP_S,
    Incident,
    alert_headline,
    command_fix,
    incidents,
)
from gpumon.backends.alerts.kinds import Tag, cause_rank, tagged
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health, iso_time
from gpumon.backends.notify.event import IncidentEvent, incident_key

__all__ = ["IncidentTracker", "OpenIncident"]

RECORDINGS_KEPT = 32  # per host: the recorder's own bound (recording.WRITTEN_MAX)
Window = tuple[float, float, str]  # a recording's (start, end, path)


NO_LONGER_WATCHED = "no longer watched (host removed from the config)"


@dataclass(slots=True)
class OpenIncident:
    event: IncidentEvent  # the last event sent (or its state, for a repeat)
    alert_keys: set[str] = field(default_factory=set)
    # On the ``tick`` clock: when it opened (its first alert's age then counted back),
    # and when its last alert ended (resolve waits for it).
    opened_tick: float = 0.0
    cleared_at: float | None = None
    # Read back from the outbox and not seen since: its alerts coming back after a restart
    # of gpumon continue it as they were, not as a new episode.
    restored: bool = False


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
        resolve_after_s: float = INCIDENT_GAP_S,
    ) -> None:
        self.min_open_s = min_open_s
        self.resolve_after_s = resolve_after_s
        # (host, job) -> whether a restart of it is running: its incidents resolve once
        # it ended, so the resolve can say whether the restart worked and who ran it.
        self.restarting = restarting
        self.gpumon_host = gpumon_host
        self.open: dict[str, OpenIncident] = {}
        self._jobs: dict[tuple[str, str], _JobNote] = {}
        self._recordings: dict[str, list[Window]] = {}  # host -> its recordings' windows
        self._seen_auto: set[tuple[str, Restart | None]] = set()

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

    def note_bundle(self, key: str, path: str | None) -> None:
        """The bundle written for the open incident ``key``: its later events name it."""
        inc = self.open.get(key)
        if inc is not None and path:
            files = inc.event.attachments
            files = files if path in files else (*files, path)
            inc.event = replace(inc.event, bundle=path, attachments=files)

    def restore(
        self, events: Iterable[IncidentEvent], now: float, tick: float | None = None
    ) -> None:
        """Incidents still open when gpumon last stopped (from the outbox's store), read
        back at ``now``: a matching alert continues them; one that does not come back
        within ``resolve_after_s`` (from now, whatever the wall clock says) resolves."""
        t = now if tick is None else tick
        for ev in events:
            opened = _opened_tick(ev.opened_at, now, t)
            inc = OpenIncident(ev, opened_tick=opened, cleared_at=t, restored=True)
            self.open.setdefault(ev.key, inc)

    def observe(
        self,
        host: str,
        alerts: Iterable[Alert],
        now: float,
        found: Sequence[Incident] | None = None,
        *,
        tick: float | None = None,
    ) -> list[IncidentEvent]:
        """The events from ``host``'s active alerts now (see the module docstring).
        ``found``: those alerts as the dashboard's incidents (``active_incidents``: its
        fixes only for jobs the config can restart); None groups them here."""
        t = now if tick is None else tick
        out: list[IncidentEvent] = []
        alerts = list(alerts)
        found = incidents(alerts) if found is None else found
        for alert in alerts:  # first: what gpumon did, so the crash's event can say it
            if alert.kind == "auto_restart":
                self._auto_restart(host, alert)
        seen: set[str] = set()  # the open incidents that go on
        for subj, group in _by_subject(found).items():
            key = self._match(host, subj, group, seen)
            out.extend(self._merged(host, subj, key, now))
            ev, key = self._fold(host, key, group, now, t)
            seen.add(key)
            if ev is not None:
                out.append(ev)
        for key, inc in list(self.open.items()):
            if inc.event.host != host or key in seen:
                continue
            if inc.cleared_at is None:
                inc.cleared_at = t
            out.extend(self._maybe_resolve(key, inc, now, t))
        return out

    def _match(self, host: str, subj: _Subject, group: list[_Found], seen: set[str]) -> str | None:
        """The open incident ``group`` continues: one that holds any of its alerts, else
        the one of its subject (an alert that flapped back, or one restored from the
        outbox: of several, the best explained, then the oldest); None: a new one."""
        keys = {a.key for f in group for a in f.members}
        mine = [
            (k, inc)
            for k, inc in self.open.items()
            if inc.event.host == host and k not in seen and _event_subject(inc.event) == subj
        ]
        held = [k for k, inc in mine if inc.alert_keys & keys]
        if held:
            return held[0]
        if not mine:
            return None
        return min(mine, key=lambda m: (cause_rank(m[1].event.kind), m[1].event.opened_at))[0]

    def _merged(
        self, host: str, subj: _Subject, key: str | None, now: float
    ) -> list[IncidentEvent]:
        """Resolves for the other open incidents of ``subj`` than ``key``: an outbox
        written when each alert was an incident of its own holds several for one failure;
        they go on as ``key``."""
        if key is None:
            return []
        out = []
        for k, inc in list(self.open.items()):
            if k != key and inc.event.host == host and _event_subject(inc.event) == subj:
                del self.open[k]
                out.append(inc.event.with_event("resolve", now, resolved_by=f"merged into {key}"))
        return out

    def _fold(
        self, host: str, key: str | None, group: list[_Found], now: float, tick: float
    ) -> tuple[IncidentEvent | None, str]:
        """``group`` (the dashboard's incidents of one subject now) into the open incident
        ``key`` (None: a new one). Returns the event to send, if any, and the key."""
        lead = group[0]  # the most urgent (``found`` comes by urgency)
        members = [a for f in group for a in f.members]
        severity = Health.worst(*(a.severity for a in members))
        story = lead.story
        note = self._note(host, lead.incident.job)
        inc = self.open.get(key) if key is not None else None
        if key is None or inc is None:
            first = min(members, key=lambda a: a.time)
            key = incident_key(host, lead.incident.gpu, lead.incident.job, first.kind)
            while key in self.open:  # another subject's incident has this name: never reuse
                key += "+"
            opened_at = first.time
            recording = self.recording(host, opened_at)
            ev = IncidentEvent(
                event="open",
                key=key,
                host=host,
                gpu=story.gpu,
                job=lead.incident.job,
                kind=story.kind,
                severity=severity,
                cause=story.cause,
                action=None,
                resolved_by=None,
                opened_at=opened_at,
                time=now,
                recording=recording,
                count=len(members),
                gpumon_host=self.gpumon_host,
                attachments=(recording,) if recording else (),
                headline=story.headline,
                fix=story.fix,
            )
            ev = note.said(ev)
            opened = _opened_tick(opened_at, now, tick)
            self.open[key] = OpenIncident(ev, {a.key for a in members}, opened)
            return ev, key
        back = inc.cleared_at is not None and not inc.restored  # ended, and came back
        inc.cleared_at, inc.restored = None, False
        new_keys = {a.key for a in members} - inc.alert_keys
        inc.alert_keys |= new_keys
        old = inc.event
        recording = old.recording or self.recording(host, old.opened_at)
        latest = replace(
            old,
            count=old.count + len(new_keys),
            episodes=old.episodes + back,
            recording=recording,
            attachments=_files(old.attachments, recording),
        )
        rank, old_rank = cause_rank(story.kind), cause_rank(old.kind)
        caused = rank < old_rank  # a cause that explains it better: a new headline
        if caused:
            latest = replace(latest, kind=story.kind, gpu=story.gpu)
        if rank <= old_rank:  # the cause's latest words (a new peak), kept for the resolve
            latest = replace(latest, cause=story.cause, headline=story.headline, fix=story.fix)
        # else: a better cause ended first; its story stays (the incident was a CUDA OOM)
        escalated = severity.rank > old.severity.rank
        acted = note.about(old) and note.action != old.action
        if not (escalated or caused or acted or back):  # a repeat: counted, never re-paged
            inc.event = latest
            return None, key
        retold = caused or escalated  # its top line changed: a new page
        inc.event = note.said(latest).with_event(
            "update",
            now,
            severity=severity if escalated else old.severity,
            previous=(old.kind, old.severity, old.gpu) if retold else None,
            page=old.page + retold,
        )
        return inc.event, key

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

    def due(self, now: float, tick: float | None = None) -> list[IncidentEvent]:
        """Resolves that were waiting (for the minimum open time, for their alerts to stay
        over ``resolve_after_s``, for a restart) and are due now."""
        t = now if tick is None else tick
        out: list[IncidentEvent] = []
        for key, inc in list(self.open.items()):
            if inc.cleared_at is not None:
                out.extend(self._maybe_resolve(key, inc, now, t))
        return out

    def _maybe_resolve(
        self, key: str, inc: OpenIncident, now: float, tick: float
    ) -> list[IncidentEvent]:
        if tick - inc.opened_tick < self.min_open_s:
            return []
        if inc.cleared_at is not None and tick - inc.cleared_at < self.resolve_after_s:
            return []  # not over long enough: an alert of it may come back (a flap)
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
        restart = alert.facts.restart
        if not alert.job or (alert.key, restart) in self._seen_auto:
            return
        if len(self._seen_auto) > 1000:
            self._seen_auto.clear()
        self._seen_auto.add((alert.key, restart))
        note = self._jobs.setdefault((host, alert.job), _JobNote())
        if restart is None:  # one of a recording from before facts: what it decided is unknown
            return
        if restart.step == "gave_up":
            action = "auto-restart gave up"
        elif restart.step == "due":
            # Decided, not done: the restart runs after its delay, and note_restart says
            # when it ended and how (this used to say "attempted" before it ran).
            due = alert.time + (restart.delay_s or 0.0)
            note.action = f"auto-restart {restart.attempt}/{restart.attempts} due {iso_time(due)}"
            note.noted_at, note.action_at, note.pid, note.took_s = alert.time, None, None, None
            return
        elif restart.step == "not_started":
            action = f"auto-restart failed: {restart.why or ''}"
        else:  # the restart ran and failed: note_restart says it, with its time
            return
        note.action, note.noted_at, note.action_at = action, alert.time, alert.time
        note.pid = note.took_s = None


_Subject = tuple[str, object]  # ("job", name) | ("gpu", index) | ("kind", kind)


@dataclass(frozen=True, slots=True)
class _Story:
    """What an incident's events say of its cause."""

    kind: str
    gpu: int | None
    cause: str  # the cause alert's raw line
    headline: str
    fix: str | None


@dataclass(frozen=True, slots=True)
class _Found:
    """One of the dashboard's incidents, as notify sees it: its alerts but the
    ``auto_restart`` ones (those say what gpumon did, not what broke), and its story."""

    incident: Incident
    members: tuple[Alert, ...]
    story: _Story


_ACTIONS = tagged(Tag.ACTION)  # what gpumon did: said as the action of the crash's incident


def _by_subject(found: Iterable[Incident]) -> dict[_Subject, list[_Found]]:
    """The dashboard's incidents by what they are about, the most urgent of each first;
    an incident of ``auto_restart`` alerts only is none."""
    out: dict[_Subject, list[_Found]] = {}
    for incident in found:
        members = tuple(a for a in incident.alerts if a.kind not in _ACTIONS)
        if not members:
            continue
        first = min(members, key=lambda a: a.time)
        subj = _subject(first.job, first.gpu, first.kind)
        out.setdefault(subj, []).append(_Found(incident, members, _story(incident, members)))
    return out


def _subject(job: str | None, gpu: int | None, kind: str) -> _Subject:
    """What an incident is about, as ``alerts.incident`` groups: its job, else its GPU.
    An alert of neither stands alone on the dashboard; here those of one kind are one
    incident (two container OOM kills in a minute page once)."""
    if job:
        return ("job", job)
    if gpu is not None:
        return ("gpu", gpu)
    return ("kind", kind)


def _event_subject(ev: IncidentEvent) -> _Subject:
    """The subject of an open incident (also of one read back from an outbox written
    when each alert was an incident: its job, else its GPU, else its kind)."""
    return _subject(ev.job, ev.gpu, ev.kind)


def _story(incident: Incident, members: Sequence[Alert]) -> _Story:
    """The cause, headline and fix of ``incident`` as the dashboard says them; when its
    cause is an ``auto_restart`` alert (the only kind notify leaves out), those of its
    best other alert."""
    cause = incident.cause
    if cause in members:
        fix = command_fix(incident)
        headline = incident.headline
        said = fix.removeprefix("fix: ") if fix else None
    else:
        cause = min(members, key=lambda a: (cause_rank(a.kind), -a.severity.rank, a.time))
        headline, said = alert_headline(cause, incident.job), None
    return _Story(cause.kind, incident.gpu, cause.message, headline, said)


def _opened_tick(opened_at: float, now: float, tick: float) -> float:
    """When an incident dated ``opened_at`` (its first alert, by the wall clock) opened,
    on the ``tick`` clock: as long before ``tick`` as it was before ``now``, never after
    (a date ahead of the wall clock, stepped back since, is taken as now)."""
    return tick - max(now - opened_at, 0.0)


def _files(files: tuple[str, ...], recording: str | None) -> tuple[str, ...]:
    """``files`` with the recording first (once)."""
    if not recording:
        return files
    return (recording, *(f for f in files if f != recording))
