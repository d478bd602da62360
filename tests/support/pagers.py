"""Receivers as their documentation says they behave, for the tests of what a person sees
when an incident changes: a PagerDuty service (``PagerDutyService``, and
``PagerDutyStandIn``, the same on 127.0.0.1 over HTTP) and Alertmanager's store of alerts
(``AlertmanagerAlerts``).

PagerDuty, Events API v2 (developer.pagerduty.com, "Send an Alert Event", the
``event_action`` values; support.pagerduty.com, "Alerts" and "Event Management"):

- ``trigger``: opens a new alert, or, when an alert with the same ``dedup_key`` is open
  (triggered or acknowledged), adds a trigger log entry to it. The alert's title is the
  ``payload.summary`` of the trigger that opened it: "Alert titles cannot be edited", and
  the incident keeps the title of its first alert;
- ``acknowledge``: while an alert is acknowledged it sends no further notifications, even
  when new triggers arrive for it;
- ``resolve``: the alert is resolved and sends nothing more; a later ``trigger`` with the
  same ``dedup_key`` does not reopen it but opens a new alert;
- an ``acknowledge`` or ``resolve`` for a ``dedup_key`` with no open alert changes
  nothing (the API accepts it: 202).

A notification (the phone ringing) goes out when an alert opens; never for a log entry.

Alertmanager (prometheus/alertmanager v0.25.0, Debian's, the one tests/system runs): an
alert is known by its labels; a newer post of the same labels replaces its annotations
and, for what gpumon posts (a later end, or a resolve), its end (``Alert.Merge``,
types/types.go); a group is notified when an alert of new labels fires in it, when one
resolves (``send_resolved``) or all did, not when only annotations change
(``DedupStage.needsUpdate``, notify/notify.go): those wait for its ``repeat_interval``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from receiver import Received, Receiver


@dataclass
class PagerDutyAlert:
    dedup_key: str
    title: str  # the summary of the trigger that opened it, for good
    severity: str
    status: str = "triggered"  # "acknowledged", "resolved"
    log: list[str] = field(default_factory=list)  # the summaries of later triggers


class PagerDutyService:
    """One service (one routing key) of PagerDuty, as documented (module docstring)."""

    def __init__(self, routing_key: str) -> None:
        self.routing_key = routing_key
        self.alerts: list[PagerDutyAlert] = []  # in the order they opened
        self.notified: list[str] = []  # the title of each notification sent

    def open_alert(self, dedup_key: str) -> PagerDutyAlert | None:
        """The alert of ``dedup_key`` that is not resolved, if any."""
        found = [a for a in self.alerts if a.dedup_key == dedup_key and a.status != "resolved"]
        return found[-1] if found else None

    def apply(self, body: Mapping[str, Any]) -> None:
        """One Events API v2 event."""
        assert body["routing_key"] == self.routing_key
        action, key = body["event_action"], body["dedup_key"]
        alert = self.open_alert(key)
        if action == "trigger":
            summary = body["payload"]["summary"]
            if alert is not None:
                alert.log.append(summary)
                return
            severity = body["payload"]["severity"]
            self.alerts.append(PagerDutyAlert(key, summary, severity))
            self.notified.append(summary)
        elif alert is not None:
            assert action in ("acknowledge", "resolve"), action
            alert.status = "acknowledged" if action == "acknowledge" else "resolved"

    def acknowledge(self, dedup_key: str) -> None:
        """A person acknowledges the alert on their phone."""
        alert = self.open_alert(dedup_key)
        assert alert is not None, dedup_key
        alert.status = "acknowledged"

    def showing(self) -> list[str]:
        """The titles of the alerts not resolved: what the phone's list shows."""
        return [a.title for a in self.alerts if a.status != "resolved"]


class PagerDutyStandIn(Receiver):
    """A test receiver on 127.0.0.1 that applies each PagerDuty request it takes to the
    service of its routing key (``services``), as it arrives."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port)
        self.services: dict[str, PagerDutyService] = {}
        self._applied = threading.Lock()

    def service(self, routing_key: str) -> PagerDutyService:
        with self._applied:
            return self.services.setdefault(routing_key, PagerDutyService(routing_key))

    def on_received(self, received: Received) -> None:
        body = received.json()
        if isinstance(body, dict) and "event_action" in body:
            service = self.service(body["routing_key"])
            with self._applied:
                service.apply(body)


@dataclass
class ManagedAlert:
    labels: dict[str, str]
    annotations: dict[str, str]
    ends_at: float


class AlertmanagerAlerts:
    """What Alertmanager holds and notifies, as documented (module docstring)."""

    def __init__(self) -> None:
        self.alerts: dict[frozenset[tuple[str, str]], ManagedAlert] = {}
        self.notified: list[list[str]] = []  # per notification: the firing summaries

    def post(self, body: bytes, now: float) -> None:
        """One ``POST /api/v2/alerts`` at ``now``; notifies as a group of every alert
        would (``group_wait`` 0, ``send_resolved``) when a label set begins or ends firing."""
        before = {frozenset(a.labels.items()) for a in self.firing(now)}
        for alert in json.loads(body):
            labels = dict(alert["labels"])
            ends = dt.datetime.fromisoformat(alert["endsAt"]).timestamp()
            self.alerts[frozenset(labels.items())] = ManagedAlert(
                labels, dict(alert["annotations"]), ends
            )
        if {frozenset(a.labels.items()) for a in self.firing(now)} != before:
            self.notified.append([a.annotations["summary"] for a in self.firing(now)])

    def firing(self, now: float) -> list[ManagedAlert]:
        return [a for a in self.alerts.values() if a.ends_at > now]
