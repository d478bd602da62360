"""Each notifier kind renders the documented request from the same incident event."""

from __future__ import annotations

import json

import pytest

from gpumon.backends.config.notify import NotifierConfig
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.notifiers import (
    DeliveryError,
    alertmanager_alert,
    command_input,
    render,
    terminal_bytes,
)

from notify_schema import check_ntfy, check_pagerduty, check_signature, check_slack, check_webhook

OPEN = IncidentEvent(
    event="open",
    key="ct200/gpu6/drafter/cuda_oom",
    host="ct200",
    gpu=6,
    job="drafter",
    kind="cuda_oom",
    severity="critical",
    cause="CUDA out of memory on GPU 6",
    action="auto-restart attempted (1/3)",
    resolved_by=None,
    opened_at=1000.0,
    time=1000.0,
    recording="/state/recordings/ct200-oom.jsonl.gz",
)
RESOLVE = OPEN.with_event("resolve", 1100.0, resolved_by="auto-restart")


def cfg(kind: str, **values: object) -> NotifierConfig:
    return NotifierConfig(name="n", kind=kind, url="http://127.0.0.1:9/x", **values)  # type: ignore[arg-type]


def test_pagerduty_triggers_and_resolves_with_one_dedup_key() -> None:
    c = cfg("pagerduty", routing_key_env="PD_KEY")
    reqs = render(c, [OPEN, RESOLVE], 1100.0, {"PD_KEY": "k123"})
    bodies = [json.loads(r.body) for r in reqs]
    assert [check_pagerduty(b, "k123") for b in bodies] == ["trigger", "resolve"]
    assert bodies[0]["dedup_key"] == bodies[1]["dedup_key"] == OPEN.key
    details = bodies[0]["payload"]["custom_details"]
    assert details["action"] == "auto-restart attempted (1/3)"
    assert details["recording"].endswith("ct200-oom.jsonl.gz")
    assert bodies[0]["payload"]["source"] == "ct200"


def test_a_pagerduty_test_event_resolves_itself() -> None:
    from gpumon.backends.notify.hub import test_event

    reqs = render(cfg("pagerduty", routing_key="k"), [test_event("pd", 1000.0)], 1000.0, {})
    bodies = [json.loads(r.body) for r in reqs]
    assert [check_pagerduty(b, "k") for b in bodies] == ["trigger", "resolve"]
    assert bodies[0]["payload"]["severity"] == "info"


def test_a_secret_from_an_unset_variable_fails_the_delivery_by_name() -> None:
    with pytest.raises(DeliveryError, match=r"\$PD_KEY .* is not set"):
        render(cfg("pagerduty", routing_key_env="PD_KEY"), [OPEN], 1000.0, {})


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
    assert alert["annotations"]["action"] == "auto-restart attempted (1/3)"
    import datetime as dt

    ends = dt.datetime.fromisoformat(alert["endsAt"]).timestamp()
    assert ends == 1000.0 + 4 * 60  # expires by itself unless re-sent
    resolved = alertmanager_alert(RESOLVE, 1100.0, resend_s=60)
    assert dt.datetime.fromisoformat(resolved["endsAt"]).timestamp() == 1100.0
    [req] = render(cfg("alertmanager"), [OPEN, RESOLVE], 1100.0, {})
    assert req.url.endswith("/api/v2/alerts") and len(json.loads(req.body)) == 2


def test_ntfy_headers_and_token() -> None:
    [req] = render(cfg("ntfy", token="tok"), [OPEN], 1000.0, {})
    check_ntfy(req.headers, req.body)
    assert req.headers["Priority"] == "5" and req.headers["Authorization"] == "Bearer tok"
    assert "auto-restart attempted" in req.body.decode()
    [done] = render(cfg("ntfy"), [RESOLVE], 1100.0, {})
    assert done.headers["Priority"] == "3" and "Authorization" not in done.headers
    assert done.headers["Title"].startswith("[RESOLVED] cuda_oom on ct200 GPU 6")


def test_slack_and_a_grouped_message() -> None:
    [req] = render(cfg("slack"), [OPEN, RESOLVE], 1100.0, {})
    body = json.loads(req.body)
    check_slack(body)
    assert body["text"] == "2 alert changes on ct200" and len(body["blocks"]) == 3


def test_webhook_body_and_hmac_signature() -> None:
    [req] = render(cfg("webhook", secret_env="HOOK"), [OPEN], 1000.0, {"HOOK": "s3cret"})
    [ev] = check_webhook(json.loads(req.body))
    assert ev["key"] == OPEN.key and ev["resolved_by"] is None
    check_signature(req.body, req.headers, "s3cret")
    with pytest.raises(AssertionError):
        check_signature(req.body + b" ", req.headers, "s3cret")
    assert check_webhook(json.loads(command_input([OPEN], 1000.0)))[0]["job"] == "drafter"


def test_terminal_notification_escapes_and_tmux_passthrough() -> None:
    hostile = OPEN.with_event("update", 1001.0, cause="evil\x1b]52;c;AAAA\x07;x")
    plain = terminal_bytes([hostile], tmux=False)
    assert plain.startswith(b"\x1b]9;[CRITICAL] cuda_oom (updated) on ct200") and plain.endswith(
        b"\a"
    )
    assert b"\x1b]777;notify;" in plain
    # Only the sequences' own ESCs and BELs: the alert's text cannot end one early.
    assert plain.count(b"\x1b") == 2 and plain.count(b"\x07") == 3
    assert b"evil ]52 c AAAA  x" in plain
    wrapped = terminal_bytes([OPEN], tmux=True)
    assert wrapped.startswith(b"\x1bPtmux;\x1b\x1b]9;") and b"\x1b\\" in wrapped
