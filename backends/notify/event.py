"""What a notifier is told: an incident event (open, update, resolve, test).

``IncidentEvent.to_json()`` is the documented webhook schema (docs/on-call.md, "Webhook JSON"):
a webhook body is ``{"schema": SCHEMA, "sent_at": ISO, "events": [event, ...]}`` where
each event has exactly the keys of ``EVENT_KEYS``. Everything else (PagerDuty's payload,
Alertmanager's labels, the ntfy title) is derived from the same event, so every message
names the host, the incident's headline (the dashboard's line: "drafter: CUDA OOM on GPU 6
(tried 2.00 GiB, 90 MiB free)"), its fix, what gpumon did (when, the new PID, how long it
took), the flight recording, and the raw alert line last: ``summary()`` and ``details()``
are the one text every notifier and ``gpumon watch``'s log line says.
"""

from __future__ import annotations

import socket
import urllib.parse
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpumon.backends.model import Health, iso_time

__all__ = [
    "BUNDLE_PATH",
    "EVENT_KEYS",
    "INCIDENT_PATH",
    "SCHEMA",
    "IncidentEvent",
    "incident_key",
    "incident_link",
    "page_key",
    "webhook_body",
]

SCHEMA = "gpumon.incident.v1"
EVENTS = ("open", "update", "resolve", "test")
EVENT_KEYS = (
    "event",
    "key",
    "host",
    "gpu",
    "job",
    "kind",
    "severity",
    "summary",
    "headline",
    "fix",
    "cause",
    "action",
    "action_at",
    "pid",
    "took_s",
    "resolved_by",
    "opened_at",
    "time",
    "recording",
    "attachments",
    "bundle",
    "count",
    "episodes",
    "gpumon_host",
    "url",
)
# The incident page's paths under ``[watch] public_url`` (``gpumon watch``'s listener).
INCIDENT_PATH = "/incident/"
BUNDLE_PATH = "/bundle/"


def incident_key(host: str, gpu: int | None, job: str | None, kind: str) -> str:
    """An incident's name, ``HOST/gpuN/JOB/KIND``: its host, GPU and job and the kind of
    the alert that opened it, all as they were when it opened, so the name stays while a
    more explanatory cause arrives (the memory warning opens "demo/gpu6/drafter/memory",
    the CUDA OOM 20 s later updates it). PagerDuty's ``dedup_key`` (``page_key``),
    Alertmanager's ``incident`` label and the outbox's open incidents rest on it; an outbox
    from before incidents were grouped holds keys of one alert each, in the same form."""
    return f"{host}/gpu{'-' if gpu is None else gpu}/{job or '-'}/{kind}"


def incident_link(
    public_url: str, key: str, token: str | None = None, path: str = INCIDENT_PATH
) -> str:
    """The incident page of ``key`` under ``public_url`` ("https://gpu.example.org/gpumon/
    incident/demo/gpu6/drafter/memory"), with ``?token=`` when given; ``path``
    ``BUNDLE_PATH``: its bundle's link."""
    link = public_url.rstrip("/") + path + urllib.parse.quote(key, safe="/")
    return link + ("?token=" + urllib.parse.quote(token, safe="") if token else "")


def page_key(key: str, page: int) -> str:
    """The PagerDuty ``dedup_key`` of page ``page`` of incident ``key``: the key itself for
    the first, ``KEY#2``, ``KEY#3`` ... for the pages that a new cause or a worse severity
    began (a PagerDuty alert keeps the title it opened with, so a new headline needs a new
    alert: ``IncidentEvent.page``)."""
    return key if page <= 1 else f"{key}#{page}"


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    """One change of one incident. Times are epoch seconds (``to_json`` writes ISO 8601).

    The fields after ``gpumon_host`` came later: an outbox row from before them reads back
    with their defaults (no headline: the summary says the cause)."""

    event: str  # one of EVENTS
    key: str
    host: str
    gpu: int | None
    job: str | None
    kind: str  # the kind of its cause: the alert that explains it best so far
    severity: Health  # the worst it has been: warning, critical (info: a note's incident)
    cause: str  # the cause alert's message (one line): the raw evidence
    action: str | None  # what gpumon did: "auto-restart 1/3 in 10 s", "... succeeded", ...
    resolved_by: str | None  # resolve only: "auto-restart", "a person's restart", "recovered"
    opened_at: float
    time: float
    recording: str | None  # the flight recording of this incident (its window holds it)
    count: int = 1  # alerts folded into this incident so far
    gpumon_host: str = ""
    headline: str = ""  # the incident's line (``Incident.headline``); "" = say the cause
    fix: str | None = None  # the best fix as a command or advice (``command_fix``)
    action_at: float | None = None  # when gpumon did ``action`` (a restart: when it ended)
    pid: int | None = None  # the job's new PID after gpumon's restart
    took_s: float | None = None  # how long gpumon's restart took
    attachments: tuple[str, ...] = ()  # files gpumon wrote for it (the recording first)
    bundle: str | None = None  # the incident's bundle ([watch] bundle_on_critical)
    # An update that changed the cause's kind, the severity or the GPU: those before it
    # (kind, severity, gpu), so Alertmanager can end the alert of the old labels. Not in
    # the webhook JSON (``EVENT_KEYS``).
    previous: tuple[str, Health, int | None] | None = None
    # What it says at its top changed: 1 when it opened, one more each time its cause or
    # its severity changed (``previous`` set). PagerDuty's alert of this page is
    # ``page_key(key, page)``. Not in the webhook JSON.
    page: int = 1
    # How many times it began: 1, then one more each time an alert of it came back after
    # all of them had ended, before it resolved (a flapping host: its outages).
    episodes: int = 1
    # The incident page (``[watch] public_url``); its token (``[watch] link_token``) is
    # added only as a message is sent, so it stays out of the outbox and the log.
    url: str | None = None

    def __post_init__(self) -> None:
        # read back from JSON (the outbox): lists, and severities as their words
        object.__setattr__(self, "severity", Health(self.severity))
        if not isinstance(self.attachments, tuple):
            object.__setattr__(self, "attachments", tuple(self.attachments))
        if self.previous is not None:
            kind, severity, gpu = self.previous
            object.__setattr__(self, "previous", (kind, Health(severity), gpu))

    @property
    def title(self) -> str:
        """The headline, else (an event from before headlines) the alert's message."""
        return self.headline or self.cause

    def summary(self) -> str:
        """One line for a title or a chat message (at most ~200 characters):
        "[CRITICAL] demo: drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"."""
        tag = {
            "open": f"[{self.severity.upper()}]",
            "update": f"[{self.severity.upper()}, updated]",
            "resolve": "[RESOLVED]",
            "test": "[TEST]",
        }[self.event]
        text = f"{tag} {self.host}: {self.title}"
        return text if len(text) <= 200 else text[:199] + "…"

    def done(self) -> str | None:
        """What gpumon did, when, and how it ended: "auto-restart succeeded at
        2026-12-02T08:41:19+00:00: new PID 13025, took 4.2 s" ("auto-restart failed at T:
        took 4.0 s; verify: drafter exited ..."); None when it did nothing."""
        if not self.action:
            return None
        text, _, why = self.action.partition(": ")  # "auto-restart failed: verify: ..."
        if self.action_at is not None:
            text += f" at {iso_time(self.action_at)}"
        facts = []
        if self.pid is not None:
            facts.append(f"new PID {self.pid}")
        if self.took_s is not None:
            facts.append(f"took {self.took_s:.1f} s")
        return text + (": " + ", ".join(facts) if facts else "") + (f"; {why}" if why else "")

    def details(self) -> str:
        """The lines under the summary: the fix, what gpumon did, who fixed it, the
        recording and other files, how many alerts it holds, then its cause's own line
        (the alert's kind and raw text)."""
        lines = []
        if self.fix and self.event != "resolve":
            lines.append(f"fix: {self.fix}")
        if done := self.done():
            lines.append(f"gpumon: {done}")
        if self.resolved_by:
            lines.append(f"resolved by: {self.resolved_by}")
        if self.recording:
            lines.append(f"flight recording: {self.recording}")
        if self.bundle:
            lines.append(f"bundle: {self.bundle}")
        said = (self.recording, self.bundle)
        lines.extend(f"file: {path}" for path in self.attachments if path not in said)
        if self.count > 1:
            lines.append(f"{self.count} alerts in this incident")
        if self.episodes > 1:
            back = self.episodes - 1
            lines.append(f"back {back} time{'s' if back != 1 else ''} after it ended")
        if self.headline and self.event != "test":
            lines.append(f"alert {self.kind}: {self.cause}")
        return "\n".join(lines)

    def line(self) -> str:
        """The whole event on one line (``gpumon watch``'s log): the summary, then each
        detail after " | "."""
        return " | ".join([self.summary(), *self.details().splitlines()])

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["summary"] = self.summary()
        data["headline"] = self.title
        data["opened_at"] = iso_time(self.opened_at)
        data["time"] = iso_time(self.time)
        data["action_at"] = None if self.action_at is None else iso_time(self.action_at)
        data["took_s"] = None if self.took_s is None else round(self.took_s, 3)
        data["attachments"] = list(self.attachments)
        return {k: data[k] for k in EVENT_KEYS}

    def with_event(self, event: str, at: float, **changes: Any) -> IncidentEvent:
        """This incident's next event (``previous`` only where ``changes`` say it)."""
        changes.setdefault("previous", None)
        return replace(self, event=event, time=at, **changes)


def this_host() -> str:
    return socket.gethostname()


def webhook_body(events: list[dict[str, Any]], sent_at: float) -> dict[str, Any]:
    """The webhook (and ``command`` notifier's stdin) JSON for a group of events."""
    return {"schema": SCHEMA, "sent_at": iso_time(sent_at), "events": events}
