"""An incident's timeline for the hand-over: each alert's first, peak and last word and
time, what gpumon did (the audit log's entries and the automatic restarts of its window),
and whether it was acknowledged, as JSON (``timeline_json``) and as text
(``timeline_text``).

``pick_incident`` chooses the incident a bundle is about: the one holding the alert key
asked for, else the newest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from gpumon.backends.alerts.incident import Incident, command_fix, incidents, screen_fixes
from gpumon.backends.alerts.store import Alert
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import iso_time

__all__ = [
    "AUDIT_MARGIN_S",
    "NoIncident",
    "audit_in_window",
    "incident_window",
    "pick_incident",
    "timeline_json",
    "timeline_text",
]

AUDIT_MARGIN_S = 600.0  # the audit log's entries this long before and after the incident


class NoIncident(GpumonError):
    """No incident to bundle (none at all, or none with the key asked for)."""


def pick_incident(alerts: Iterable[Alert], key: str | None = None) -> Incident:
    """The incident holding the alert ``key`` (its alert key, as ``snapshot --json`` and
    the alert history show it), else the newest incident. Raises NoIncident."""
    found = incidents(alerts)
    if key is not None:
        for incident in found:
            if key in incident.keys:
                return incident
        known = ", ".join(k for i in found for k in i.keys) or "none"
        raise NoIncident(f"no incident has the alert {key!r} (alert keys: {known})")
    if not found:
        raise NoIncident("no incident: no alert has been raised")
    return max(found, key=lambda i: i.time)


def incident_window(incident: Incident) -> tuple[float, float]:
    """(first raised, last seen) of the incident's alerts, epoch seconds."""
    return incident.time, incident.last_seen


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def audit_in_window(
    entries: Iterable[dict[str, Any]], incident: Incident, margin: float = AUDIT_MARGIN_S
) -> list[dict[str, Any]]:
    """The audit entries of the incident's host within ``margin`` of its window."""
    start, end = incident_window(incident)
    kept = []
    for entry in entries:
        at = _epoch(entry.get("time"))
        if at is None or entry.get("host") != incident.host:
            continue
        if start - margin <= at <= end + margin:
            kept.append(entry)
    return kept


def _alert_json(alert: Alert, acknowledged_by: str | None) -> dict[str, Any]:
    return {
        "key": alert.key,
        "kind": alert.kind,
        "gpu": alert.gpu,
        "job": alert.job,
        "severity": alert.severity.value,
        "peak_severity": alert.peak.value,
        "first": {"time": iso_time(alert.time), "message": alert.raised_text},
        "peak": {"message": alert.peak_text},
        "last": {"time": iso_time(alert.last_seen), "message": alert.message},
        "active": alert.active,
        "acknowledged": alert.acknowledged,
        "acknowledged_by": acknowledged_by if alert.acknowledged else None,
    }


def timeline_json(
    incident: Incident, audit: Sequence[dict[str, Any]], acknowledged_by: str | None = None
) -> dict[str, Any]:
    """The incident as JSON: headline, fixes, window, alerts (oldest first), and what
    gpumon did (``actions``: the audit entries; automatic restarts are alerts of kind
    ``auto_restart`` among ``alerts``). ``acknowledged_by``: who acknowledged in this
    gpumon (acknowledging is not recorded anywhere else)."""
    start, end = incident_window(incident)
    alerts = sorted(incident.alerts, key=lambda a: a.time)
    return {
        "host": incident.host,
        "headline": incident.headline,
        "severity": incident.severity.value,
        "active": incident.active,
        "job": incident.job,
        "gpu": incident.gpu,
        "cause": incident.cause.key,
        "restarts": [a.message for a in incident.restarts],
        "fix": screen_fixes(incident),
        "fix_command": command_fix(incident),
        "window": [iso_time(start), iso_time(end)],
        "alerts": [_alert_json(a, acknowledged_by) for a in alerts],
        "actions": list(audit),
    }


def timeline_text(data: dict[str, Any]) -> str:
    """``timeline_json``'s object as text, one event a line, oldest first."""
    lines = [  # the cause leads: a restart is said under it, never instead of it
        f"{data['host']}: {data['headline']}",
        *(str(said) for said in data.get("restarts", ())),
        f"severity {data['severity']}, {'active' if data['active'] else 'ended'}; "
        f"from {data['window'][0]} to {data['window'][1]}",
    ]
    if data.get("fix_command"):
        lines.append(str(data["fix_command"]))
    events: list[tuple[str, str]] = []
    for a in data["alerts"]:
        what = f"{a['severity']} {a['kind']}" + (f" GPU {a['gpu']}" if a["gpu"] is not None else "")
        events.append((a["first"]["time"], f"raised  {what}: {a['first']['message']}"))
        if a["peak"]["message"] != a["first"]["message"]:
            events.append(
                (a["first"]["time"], f"  peak ({a['peak_severity']}): {a['peak']['message']}")
            )
        state = "still active" if a["active"] else "ended"
        ack = ""
        if a["acknowledged"]:
            ack = f", acknowledged by {a['acknowledged_by'] or 'someone (not recorded)'}"
        events.append(
            (a["last"]["time"], f"last    {a['kind']} ({state}{ack}): {a['last']['message']}")
        )
    for entry in data["actions"]:
        who = entry.get("user") or "?"
        job = f" {entry['job']}" if entry.get("job") else ""
        detail = f": {entry['detail']}" if entry.get("detail") else ""
        events.append(
            (
                str(entry.get("time", "")),
                f"action  {entry.get('action')}{job} by {who}: {entry.get('outcome')}{detail}",
            )
        )
    events.sort(key=lambda e: e[0])
    lines += ["", *(f"{at}  {text}" for at, text in events)]
    if not data["actions"]:
        lines += ["", "No action of gpumon's audit log in this window."]
    return "\n".join(lines) + "\n"
