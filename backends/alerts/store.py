"""Alert records and their store: identity, history, acknowledgement, listeners.

``AlertStore`` is the bookkeeping half of ``AlertEngine`` (alerts.py), which adds the rules.
Keys are stable identities (``memory:6``, ``log:/path/job.log:1234``, ``xid:0000:ba:00:3``).
Condition kinds (``CONDITION_KINDS``, declared in ``kinds.py``) stay active while their
condition holds; acknowledging one only silences it. Any other alert is an event:
acknowledging it ends it. Two kinds are both: ``sglang_error`` is an event from a log
line (key ``log:PATH:LINE``) and a condition for a server whose ``/metrics`` page cannot
be read (key ``sglang_page:PORT``);
``job_crashed`` is an event from a log line and a condition for a configured job still
down since the failure its log ended in when gpumon came (key ``job_crashed:JOB``,
``is_condition``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumon.backends.alerts.facts import NO_FACTS, AlertFacts
from gpumon.backends.alerts.kinds import CONDITION_KINDS, alert_kind
from gpumon.backends.listeners import Listeners
from gpumon.backends.model import GpuRef, Health, iso_time

log = logging.getLogger(__name__)

PAGE_KEY = "sglang_page:"  # ``sglang_error`` of an unreadable /metrics page: a condition
# ``job_crashed`` of a configured job down since the failure its log ended in when gpumon
# came (the backlog): a condition, while the job stays down
JOB_DOWN_KEY = "job_crashed:"
HISTORY_MAX = 500
NOTES_MAX = 50
SOURCE_LINES_MAX = 12  # lines kept of what raised an alert (a traceback's end, a kernel line)
_UNDECLARED: set[str] = set()  # kinds raised that ``kinds.py`` does not declare, said once


def is_condition(alert: Alert) -> bool:
    """Whether ``alert`` lasts while its condition holds (acknowledging only silences
    it): a condition kind, a server's unreadable page (``PAGE_KEY``) or a job down since
    its log's last failure (``JOB_DOWN_KEY``)."""
    return alert.kind in CONDITION_KINDS or alert.key.startswith((PAGE_KEY, JOB_DOWN_KEY))


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert. ``key`` is its stable identity; ``time`` when first raised (epoch s).

    ``message`` is what is true now (a condition's latest value); ``first_message`` what was
    true when it was raised and ``peak_message`` at its worst (``peak_severity``, and within
    it the highest ``peak_score`` its rule gave): the history shows those, not the values
    an alert had while it cleared. Empty strings mean "the same as ``message``".

    ``facts`` are what it says, typed (``facts.py``), as its rule set them with its latest
    ``message``: every other output renders from them; none reads the message back."""

    key: str
    severity: Health  # WARNING or CRITICAL
    kind: str  # one of KINDS (``kinds.py``)
    host: str
    gpu: int | None
    job: str | None
    message: str  # one line
    time: float
    last_seen: float
    active: bool = True
    acknowledged: bool = False
    first_message: str = ""
    peak_message: str = ""
    peak_severity: Health | None = None
    peak_score: float = 0.0
    peak_time: float | None = None  # when it reached its peak (None: when it was raised)
    facts: AlertFacts = NO_FACTS

    @property
    def raised_text(self) -> str:
        """The message as it was when the alert was raised."""
        return self.first_message or self.message

    @property
    def peak_text(self) -> str:
        """The message at the alert's worst."""
        return self.peak_message or self.message

    @property
    def peak_at(self) -> float:
        """When the alert was at its worst (``peak_text``)."""
        return self.time if self.peak_time is None else self.peak_time

    @property
    def peak(self) -> Health:
        """The worst severity it reached (a condition steps down before it ends)."""
        return self.peak_severity or self.severity

    def to_json(self) -> dict[str, Any]:
        """``severity kind host gpu job message time`` and ``first_message``,
        ``peak_message``, ``peak_severity``, ``facts`` (the known ones); time is local ISO
        8601 with offset."""
        stamp = iso_time(self.time)
        return {
            "severity": self.severity.value,
            "kind": self.kind,
            "host": self.host,
            "gpu": self.gpu,
            "job": self.job,
            "message": self.message,
            "time": stamp,
            "first_message": self.raised_text,
            "peak_message": self.peak_text,
            "peak_severity": self.peak.value,
            "facts": self.facts.to_json(),
        }


Listener = Callable[[Alert], None]


class AlertStore:
    """Active alerts, a bounded history, notes and listeners of one host."""

    def __init__(self, host: str, clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.clock = clock
        self._active: dict[str, Alert] = {}
        self._history: OrderedDict[str, Alert] = OrderedDict()
        self._listeners: Listeners[[Alert]] = Listeners("alert listener")
        self._repeat: dict[tuple[Any, ...], str] = {}  # coalescing identity -> its alert key
        self._notes: list[tuple[float, str]] = []
        self._jobs_by_gpu: dict[int, str] = {}
        self._serial = 0
        self._sources: dict[str, tuple[str, ...]] = {}  # alert key -> the lines that raised it

    def active(self) -> list[Alert]:
        """Active alerts, worst first, then newest first."""
        return sorted(self._active.values(), key=lambda a: (-a.severity.rank, -a.time))

    def history(self) -> list[Alert]:
        """The last HISTORY_MAX alerts (active or not), newest first, in their current state."""
        return list(reversed(self._history.values()))

    def source_lines(self, key: str) -> tuple[str, ...]:
        """The log or kernel lines that raised the alert ``key`` (a CUDA OOM's traceback
        ending in its key line, an Xid's kernel line), as they came; () when none were
        kept (a condition from samples, an alert gone from the history)."""
        return self._sources.get(key, ())

    def worst(self) -> Health:
        """Worst severity among active alerts (acknowledged ones included)."""
        return Health.worst(*(a.severity for a in self._active.values()))

    def notes(self) -> list[tuple[float, str]]:
        """Info-level notes (time, text), oldest first; each text once."""
        return list(self._notes)

    def add_listener(self, listener: Listener) -> None:
        """``listener(alert)`` runs once per new alert and once per escalation (a broken
        listener is logged; it never stops alerting)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    # --- user actions -------------------------------------------------------------------
    def acknowledge(self, key: str) -> bool:
        """Event alerts end; condition alerts are marked acknowledged. False if nothing to do."""
        alert = self._active.get(key)
        if alert is None or alert.acknowledged:
            return False
        if is_condition(alert):
            self._store(replace(alert, acknowledged=True))
        else:
            self._store(replace(alert, acknowledged=True, active=False))
        return True

    def acknowledge_all(self) -> int:
        return sum(self.acknowledge(key) for key in list(self._active))

    def clear(self, key_prefix: str) -> int:
        """End every active alert whose key starts with ``key_prefix``; returns how many.

        For a job restart: ``clear(log_key_prefix(path))`` and ``clear(f"oom_death:{gpu}:")``.
        A condition alert that still holds is raised again by the next sample.
        """
        keys = [k for k in self._active if k.startswith(key_prefix)]
        for key in keys:
            self._end(key)
        return len(keys)

    def note(self, text: str) -> bool:
        """Record an info-level note once (e.g. "kernel log not readable here"); True if new."""
        text = " ".join(text.split())
        if not text or any(t == text for _, t in self._notes):
            return False
        self._notes = [*self._notes[-(NOTES_MAX - 1) :], (self.clock(), text)]
        log.info("%s: %s", self.host, text)
        return True

    def raise_alert(
        self,
        kind: str,
        severity: Health,
        message: str,
        *,
        gpu: int | None = None,
        job: str | None = None,
        key: str | None = None,
        at: float | None = None,
        facts: AlertFacts = NO_FACTS,
        active: bool = True,
    ) -> Alert | None:
        """An event alert from outside the engine's own rules (an automatic restart, an
        alert replayed from a recording). It stays active until acknowledged or cleared and
        reaches the listeners; None when ``key`` is already active (nothing new).
        ``active=False``: a record of what happened (a job's restart), ended at once."""
        if key is not None and key in self._active:
            return None
        now = self.clock() if at is None else at
        self._serial += 1
        alert = self._new(
            key or f"{kind}:event:{self._serial}",
            kind,
            severity,
            gpu,
            job,
            message,
            now,
            active=active,
            facts=facts,
        )
        self._announce([alert])
        return alert

    # --- bookkeeping ------------------------------------------------------------------
    def _event(
        self,
        identity: tuple[Any, ...],
        kind: str,
        severity: Health,
        gpu: int | None,
        text: str,
        now: float,
        past: bool,
        facts: AlertFacts = NO_FACTS,
    ) -> Alert | None:
        if self._coalesce(identity, severity, text, now, past, facts):
            return None
        self._serial += 1
        key = f"{kind}:{identity[1]}:{self._serial}"
        alert = self._new(key, kind, severity, gpu, None, text, now, active=not past, facts=facts)
        self._repeat[identity] = key
        return alert

    def _coalesce(
        self,
        identity: tuple[Any, ...],
        severity: Health,
        text: str,
        now: float,
        past: bool,
        facts: AlertFacts = NO_FACTS,
    ) -> bool:
        """Fold a repeat into the alert ``identity`` already has; False when it needs a new one.

        A repeat folds into an active alert that is at least as severe (which ends otherwise),
        or, for backlog events, into a past alert of the same read (same clock time).
        """
        known = self._repeat.get(identity)
        old = self._history.get(known) if known is not None else None
        if old is None or not (old.active or (past and old.time == now)):
            return False
        if severity.rank > old.severity.rank:
            self._end(old.key)
            return False
        facts = self._with_ref(facts, old.gpu)
        self._store(replace(old, message=text, last_seen=now, facts=facts))
        return True

    def _condition(
        self,
        key: str,
        kind: str,
        severity: Health,
        gpu: int | None,
        text: str,
        now: float,
        out: list[Alert],
        score: float = 0.0,
        job: str | None = None,
        facts: AlertFacts = NO_FACTS,
    ) -> None:
        """Raise, update or escalate the condition ``key``. ``score``: how bad this value
        is within its severity (higher is worse: the fill fraction, minus the seconds to
        full); the peak is the highest (severity, score) seen. ``facts``: what ``text``
        says, typed."""
        old = self._active.get(key)
        if old is None:
            new = self._new(key, kind, severity, gpu, job, text, now, facts=facts)
            new = replace(new, peak_score=score)
            self._store(new)
            out.append(new)
            return
        peak = (severity.rank, score) > (old.peak.rank, old.peak_score)
        changes: dict[str, Any] = {
            "severity": severity,
            "message": text,
            "last_seen": now,
            "facts": self._with_ref(facts, gpu),
        }
        # what became known since it was raised: a server's verdict can come before the
        # first process list says its GPU (a loaded machine), and its incident, the strip
        # and the pages group and name it by the GPU and the job from then on
        if gpu is not None and gpu != old.gpu:
            changes["gpu"] = gpu
        if job is None and old.job is None and gpu is not None:
            job = self._job_for(gpu)
        if job is not None and job != old.job:
            changes["job"] = job
        if peak:
            changes.update(
                peak_message=text, peak_severity=severity, peak_score=score, peak_time=now
            )
        if severity.rank > old.severity.rank:
            new = replace(old, acknowledged=False, **changes)
            self._store(new)
            out.append(new)
        else:
            self._store(replace(old, **changes))

    def _new(
        self,
        key: str,
        kind: str,
        severity: Health,
        gpu: int | None,
        job: str | None,
        text: str,
        now: float,
        active: bool = True,
        *,
        facts: AlertFacts = NO_FACTS,
    ) -> Alert:
        if alert_kind(kind) is None and kind not in _UNDECLARED:
            _UNDECLARED.add(kind)  # a recording of another version; in gpumon's own code a bug
            log.warning("alert kind %r is not declared in alerts/kinds.py", kind)
        if job is None and gpu is not None:
            job = self._job_for(gpu)
        alert = Alert(
            key,
            severity,
            kind,
            self.host,
            gpu,
            job,
            text,
            now,
            now,
            active,
            first_message=text,
            peak_message=text,
            peak_severity=severity,
            peak_time=now,
            facts=self._with_ref(facts, gpu),
        )
        self._history.pop(key, None)
        self._store(alert)
        return alert

    def _with_ref(self, facts: AlertFacts, gpu: int | None) -> AlertFacts:
        """``facts`` with the GPU ``gpu`` by every name (``gpu_ref``), where its rule gave
        none."""
        if facts.gpu is not None or gpu is None:
            return facts
        return replace(facts, gpu=self.gpu_ref(gpu))

    def gpu_ref(self, index: int) -> GpuRef:
        """GPU ``index`` by every name this store knows (only its index: the engine
        knows the sample's GPUs)."""
        return GpuRef(index)

    def _job_for(self, gpu: int) -> str | None:
        """The job an alert on ``gpu`` belongs to: the one whose log named the GPU."""
        return self._jobs_by_gpu.get(gpu)

    def _keep_source(self, key: str, lines: Sequence[str]) -> None:
        """Keep the last ``SOURCE_LINES_MAX`` of ``lines`` as what raised ``key``."""
        kept = tuple(line.rstrip("\r\n") for line in lines[-SOURCE_LINES_MAX:])
        if kept and key in self._history:
            self._sources[key] = kept

    def _store(self, alert: Alert) -> None:
        if alert.active:
            self._active[alert.key] = alert
        else:
            self._active.pop(alert.key, None)
        self._history[alert.key] = alert
        if len(self._history) > HISTORY_MAX:  # the oldest ended alert goes, else the oldest
            oldest = next((k for k in self._history if k not in self._active), None)
            key = oldest if oldest is not None else next(iter(self._history))
            del self._history[key]
            self._active.pop(key, None)  # HISTORY_MAX alerts still active: the oldest ends
            self._sources.pop(key, None)
        if len(self._repeat) > 2 * HISTORY_MAX:  # identities of alerts gone from the history
            self._repeat = {i: k for i, k in self._repeat.items() if k in self._history}

    def _end(self, key: str) -> None:
        alert = self._active.get(key)
        if alert is not None:
            self._store(replace(alert, active=False))

    def _announce(self, alerts: list[Alert]) -> list[Alert]:
        for alert in alerts:
            self._listeners.emit(alert)
        return alerts
