"""Each notifier kind renders the documented request from the same incident event."""

from __future__ import annotations

import json

import pytest

from gpumon.backends.model import iso_time
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.notifiers import (
    DeliveryError,
    alertmanager_alert,
    alertmanager_alerts,
    command_input,
    render,
    terminal_bytes,
)

from notify_events import OOM_OPEN, notifier
from notify_schema import check_ntfy, check_pagerduty, check_signature, check_slack, check_webhook

OPEN = OOM_OPEN
RESTARTED = OPEN.with_event(
    "update", 1014.0, action="auto-restart succeeded", action_at=1014.0, pid=13025, took_s=3.3
)
RESOLVE = RESTARTED.with_event("resolve", 1100.0, resolved_by="auto-restart")


def test_pagerduty_triggers_and_resolves_with_one_dedup_key() -> None:
    c = notifier("pagerduty", routing_key_env="PD_KEY")
    reqs = render(c, [OPEN, RESOLVE], 1100.0, {"PD_KEY": "k123"})
    bodies = [json.loads(r.body) for r in reqs]
    assert [check_pagerduty(b, "k123") for b in bodies] == ["trigger", "resolve"]
    assert bodies[0]["dedup_key"] == bodies[1]["dedup_key"] == OPEN.key
    details = bodies[0]["payload"]["custom_details"]
    assert details["action"] == OPEN.action and details["headline"] == OPEN.headline
    assert details["recording"].endswith("ct200-oom.jsonl.gz")
    assert bodies[0]["payload"]["source"] == "ct200"


def test_a_pagerduty_test_event_resolves_itself() -> None:
    from gpumon.backends.notify.hub import test_event

    reqs = render(notifier("pagerduty", routing_key="k"), [test_event("pd", 1000.0)], 1000.0, {})
    bodies = [json.loads(r.body) for r in reqs]
    assert [check_pagerduty(b, "k") for b in bodies] == ["trigger", "resolve"]
    assert bodies[0]["payload"]["severity"] == "info"


def test_a_secret_from_an_unset_variable_fails_the_delivery_by_name() -> None:
    with pytest.raises(DeliveryError, match=r"\$PD_KEY .* is not set"):
        render(notifier("pagerduty", routing_key_env="PD_KEY"), [OPEN], 1000.0, {})


def test_alertmanager_labels_and_ends_at() -> None:
    alert = alertmanager_alert(OPEN, 1000.0, resend_s=60)
    assert alert["labels"] == {
        "alertname": "gpumon_cuda_oom",
        "host": "ct200",
        "kind": "cuda_oom",
        "severity": "critical",
        "incident": OPEN.key,
        "source": "gpumon",
        "gpu": "6",
        "job": "drafter",
    }
    assert alert["annotations"]["action"] == OPEN.action
    import datetime as dt

    ends = dt.datetime.fromisoformat(alert["endsAt"]).timestamp()
    assert ends == 1000.0 + 4 * 60  # expires by itself unless re-sent
    resolved = alertmanager_alert(RESOLVE, 1100.0, resend_s=60)
    assert dt.datetime.fromisoformat(resolved["endsAt"]).timestamp() == 1100.0
    [req] = render(notifier("alertmanager"), [OPEN, RESOLVE], 1100.0, {})
    assert req.url.endswith("/api/v2/alerts") and len(json.loads(req.body)) == 2


def test_alertmanager_keeps_one_active_alert_when_the_cause_changes() -> None:
    """The memory warning opened the incident; the CUDA OOM updates it: the update ends
    the alert of the old labels (gpumon_memory, warning) in the same request and fires
    the one of the new (gpumon_cuda_oom, critical, the critical route pages); the
    ``incident`` label and the GPU and job stay. An update that changed no label (what
    gpumon did) sends the one alert."""
    import datetime as dt

    update = OPEN.with_event("update", 1010.0, previous=("memory", "warning", 6))
    [req] = render(notifier("alertmanager"), [update], 1010.0, {})
    before, now = json.loads(req.body)
    assert before["labels"] == {
        **now["labels"],
        "alertname": "gpumon_memory",
        "kind": "memory",
        "severity": "warning",
    }
    assert now["labels"]["alertname"] == "gpumon_cuda_oom" and now["labels"]["incident"] == OPEN.key
    assert dt.datetime.fromisoformat(before["endsAt"]).timestamp() == 1010.0
    assert dt.datetime.fromisoformat(now["endsAt"]).timestamp() == 1010.0 + 4 * 60
    assert before["annotations"]["headline"] == now["annotations"]["headline"] == OPEN.headline
    assert alertmanager_alerts(OPEN.with_event("update", 1011.0), 1011.0, 60) == [
        alertmanager_alert(OPEN.with_event("update", 1011.0), 1011.0, 60)
    ]
    assert "previous" not in update.to_json()  # not part of the webhook JSON


def test_ntfy_headers_and_token() -> None:
    [req] = render(notifier("ntfy", token="tok"), [OPEN], 1000.0, {})
    check_ntfy(req.headers, req.body)
    assert req.headers["Priority"] == "5" and req.headers["Authorization"] == "Bearer tok"
    assert "gpumon: auto-restart 1/3 due" in req.body.decode()
    [done] = render(notifier("ntfy"), [RESOLVE], 1100.0, {})
    assert done.headers["Priority"] == "3" and "Authorization" not in done.headers
    assert done.headers["Title"] == "[RESOLVED] ct200: " + OPEN.headline


def test_slack_and_a_grouped_message() -> None:
    [req] = render(notifier("slack"), [OPEN, RESOLVE], 1100.0, {})
    body = json.loads(req.body)
    check_slack(body)
    assert body["text"] == "2 alert changes on ct200" and len(body["blocks"]) == 3


def test_webhook_body_and_hmac_signature() -> None:
    [req] = render(notifier("webhook", secret_env="HOOK"), [OPEN], 1000.0, {"HOOK": "s3cret"})
    [ev] = check_webhook(json.loads(req.body))
    assert ev["key"] == OPEN.key and ev["resolved_by"] is None
    check_signature(req.body, req.headers, "s3cret")
    with pytest.raises(AssertionError):
        check_signature(req.body + b" ", req.headers, "s3cret")
    assert check_webhook(json.loads(command_input([OPEN], 1000.0)))[0]["job"] == "drafter"


def test_terminal_notification_escapes_and_tmux_passthrough() -> None:
    hostile = OPEN.with_event("update", 1001.0, cause="evil\x1b]52;c;AAAA\x07;x")
    plain = terminal_bytes([hostile], tmux=False)
    assert plain.startswith(b"\x1b]9;[CRITICAL, updated] ct200: drafter: CUDA OOM on GPU 6")
    assert plain.endswith(b"\a")
    assert b"\x1b]777;notify;" in plain
    # Only the sequences' own ESCs and BELs: the alert's text cannot end one early.
    assert plain.count(b"\x1b") == 2 and plain.count(b"\x07") == 3
    assert b"evil ]52 c AAAA  x" in plain
    wrapped = terminal_bytes([OPEN], tmux=True)
    assert wrapped.startswith(b"\x1bPtmux;\x1b\x1b]9;") and b"\x1b\\" in wrapped


def _said(kind: str, events: list[IncidentEvent]) -> str:
    """Everything a notifier of ``kind`` says about ``events``, as one text."""
    if kind == "command":
        return command_input(events, 1100.0).decode()
    if kind == "terminal":
        return terminal_bytes(events, tmux=False).decode()
    c = notifier(kind, routing_key="k")
    reqs = render(c, events, 1100.0, {})
    return "\n".join(json.dumps(dict(r.headers)) + r.body.decode() for r in reqs)


@pytest.mark.parametrize(
    "kind", ["pagerduty", "alertmanager", "ntfy", "slack", "webhook", "command", "terminal"]
)
def test_every_kind_says_the_headline_the_fix_and_what_gpumon_did(kind: str) -> None:
    """The same story in every kind's own form: the headline (not the raw torch line) as
    the title, the fix, the restart with when it ended, its new PID, how long it took,
    and the recording."""
    text = _said(kind, [RESTARTED])
    assert OPEN.headline in text
    assert "gpumon restart ct200 drafter" in text
    assert f"auto-restart succeeded at {iso_time(1014.0)}" in text or (
        kind in ("pagerduty", "webhook", "command")  # JSON: the fields below
    )
    assert "13025" in text and "3.3" in text
    assert "/state/recordings/ct200-oom.jsonl.gz" in text


def test_alertmanager_annotations_carry_the_story() -> None:
    ann = alertmanager_alert(RESTARTED, 1014.0, resend_s=60)["annotations"]
    assert ann["summary"] == "[CRITICAL, updated] ct200: " + OPEN.headline
    assert ann["description"].splitlines() == [
        "fix: gpumon restart ct200 drafter",
        f"gpumon: auto-restart succeeded at {iso_time(1014.0)}: new PID 13025, took 3.3 s",
        "flight recording: /state/recordings/ct200-oom.jsonl.gz",
        f"alert cuda_oom: {OPEN.cause}",
    ]
    assert (ann["headline"], ann["fix"]) == (OPEN.headline, OPEN.fix)
    assert ann["action"] == ann["description"].splitlines()[1].removeprefix("gpumon: ")
