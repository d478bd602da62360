"""What a notifier is told: an incident event (open, update, resolve, test).

``IncidentEvent.to_json()`` is the documented webhook schema (README, "Webhook JSON"):
a webhook body is ``{"schema": SCHEMA, "sent_at": ISO, "events": [event, ...]}`` where
each event has exactly the keys of ``EVENT_KEYS``. Everything else (PagerDuty's payload,
Alertmanager's labels, the ntfy title) is derived from the same event, so every message
names the host, GPU, job, cause, what gpumon did and the flight recording.
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpumon.backends.model import iso_time

__all__ = ["EVENT_KEYS", "SCHEMA", "IncidentEvent", "incident_key", "webhook_body"]

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
    "cause",
    "action",
    "resolved_by",
    "opened_at",
    "time",
    "recording",
    "bundle",
    "count",
    "gpumon_host",
)


def incident_key(host: str, gpu: int | None, job: str | None, kind: str) -> str:
    """The stable identity of an incident: host + GPU + job + rule. The same failure seen
    again (a second OOM line, a restart of gpumon) has the same key: PagerDuty's
    ``dedup_key``, Alertmanager's label set and the outbox's grouping all rest on it."""
    return f"{host}/gpu{'-' if gpu is None else gpu}/{job or '-'}/{kind}"


@dataclass(frozen=True, slots=True)
class IncidentEvent:
    """One change of one incident. Times are epoch seconds (``to_json`` writes ISO 8601)."""

    event: str  # one of EVENTS
    key: str
    host: str
    gpu: int | None
    job: str | None
    kind: str
    severity: str  # "warning" | "critical"
    cause: str  # the alert's message (one line)
    action: str | None  # what gpumon did: "auto-restart attempted", "... succeeded", ...
    resolved_by: str | None  # resolve only: "auto-restart", "a person's restart", "recovered"
    opened_at: float
    time: float
    recording: str | None  # the flight recording's path, when one was scheduled
    count: int = 1  # alerts folded into this incident so far
    gpumon_host: str = ""
    bundle: str | None = None  # the incident's bundle ([watch] bundle_on_critical)

    def summary(self) -> str:
        """One line for a title or a chat message (at most ~200 characters)."""
        where = self.host + (f" GPU {self.gpu}" if self.gpu is not None else "")
        if self.job:
            where += f" job {self.job}"
        head = {
            "open": f"[{self.severity.upper()}] {self.kind}",
            "update": f"[{self.severity.upper()}] {self.kind} (updated)",
            "resolve": f"[RESOLVED] {self.kind}",
            "test": "[TEST] gpumon notifier test",
        }[self.event]
        text = f"{head} on {where}: {self.cause}"
        return text if len(text) <= 200 else text[:199] + "…"

    def details(self) -> str:
        """The lines under the summary: what gpumon did, who fixed it, the recording."""
        lines = []
        if self.action:
            lines.append(f"gpumon: {self.action}")
        if self.resolved_by:
            lines.append(f"resolved by: {self.resolved_by}")
        if self.recording:
            lines.append(f"flight recording: {self.recording}")
        if self.bundle:
            lines.append(f"bundle: {self.bundle}")
        if self.count > 1:
            lines.append(f"seen {self.count} times")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()
        data["opened_at"] = iso_time(self.opened_at)
        data["time"] = iso_time(self.time)
        return {k: data[k] for k in EVENT_KEYS}

    def with_event(self, event: str, at: float, **changes: Any) -> IncidentEvent:
        return replace(self, event=event, time=at, **changes)


def this_host() -> str:
    return socket.gethostname()


def webhook_body(events: list[dict[str, Any]], sent_at: float) -> dict[str, Any]:
    """The webhook (and ``command`` notifier's stdin) JSON for a group of events."""
    return {"schema": SCHEMA, "sent_at": iso_time(sent_at), "events": events}
