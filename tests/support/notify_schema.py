"""The documented message shapes (docs/on-call.md), checked key by key: what the test
receivers assert every PagerDuty, Slack, ntfy and webhook request against."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from gpumon.backends.notify.event import EVENT_KEYS, SCHEMA

EVENTS = {"open", "update", "resolve", "test"}


def _iso(text: object) -> float:
    assert isinstance(text, str), text
    return dt.datetime.fromisoformat(text).timestamp()


def check_event(ev: Mapping[str, Any]) -> None:
    assert tuple(ev) == EVENT_KEYS, list(ev)
    assert ev["event"] in EVENTS
    assert ev["severity"] in ("warning", "critical")
    assert isinstance(ev["key"], str) and ev["key"].startswith(f"{ev['host']}/")
    assert ev["gpu"] is None or isinstance(ev["gpu"], int)
    assert isinstance(ev["summary"], str) and ev["host"] in ev["summary"]
    assert isinstance(ev["cause"], str) and ev["cause"]
    assert _iso(ev["opened_at"]) <= _iso(ev["time"]) + 1
    assert isinstance(ev["count"], int) and ev["count"] >= 1
    assert (ev["resolved_by"] is not None) == (ev["event"] == "resolve")
    assert ev["url"] is None or str(ev["url"]).startswith(("http://", "https://"))


def check_webhook(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A webhook body; returns its events."""
    assert set(body) == {"schema", "sent_at", "events"}
    assert body["schema"] == SCHEMA
    _iso(body["sent_at"])
    assert body["events"]
    for ev in body["events"]:
        check_event(ev)
    return list(body["events"])


def check_signature(raw: bytes, headers: Mapping[str, str], secret: str) -> None:
    want = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    assert headers.get("X-Gpumon-Signature") == want


def check_pagerduty(body: Mapping[str, Any], routing_key: str) -> str:
    """An Events API v2 event; returns its event_action."""
    assert body["routing_key"] == routing_key
    assert body["event_action"] in ("trigger", "resolve")
    assert isinstance(body["dedup_key"], str) and body["dedup_key"].count("/") == 3
    if body["event_action"] == "trigger":
        p = body["payload"]
        assert {"summary", "source", "severity", "timestamp", "custom_details"} <= set(p)
        assert p["severity"] in ("critical", "error", "warning", "info")
        assert len(p["summary"]) <= 1024
        _iso(p["timestamp"])
        key = p["custom_details"]["key"]  # the incident's; a later page's alert: KEY#N
        assert body["dedup_key"] == key or body["dedup_key"].startswith(f"{key}#")
    else:
        assert set(body) == {"routing_key", "event_action", "dedup_key"}
    return str(body["event_action"])


def check_slack(body: Mapping[str, Any]) -> None:
    assert isinstance(body["text"], str) and body["text"]
    blocks = body["blocks"]
    assert blocks[0]["type"] == "header" and len(blocks) >= 2
    for block in blocks[1:]:
        assert block["type"] == "section" and block["text"]["type"] == "plain_text"


def check_ntfy(headers: Mapping[str, str], body: bytes) -> None:
    assert headers["Title"] and headers["Priority"] in ("1", "2", "3", "4", "5")
    assert "gpumon" in headers["Tags"].split(",")
    assert body.decode()
