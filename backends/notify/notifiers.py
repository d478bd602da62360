"""Each notifier kind: how a group of incident events becomes what its receiver takes.

``render(config, events, now, env)`` returns the HTTP requests for the web kinds
(PagerDuty Events API v2, Alertmanager ``/api/v2/alerts``, ntfy, Slack incoming webhooks,
the generic webhook with an optional HMAC signature); ``command_input`` is the JSON the
``command`` kind gets on stdin; ``terminal_bytes`` the OSC 9 / OSC 777 desktop
notification (wrapped for tmux, with a BEL). Pure functions: delivery is ``deliver``.
Every kind says the event's ``summary()`` (the headline) and ``details()`` (the fix, what
gpumon did, the recording, the raw alert line) in its own form, and the incident page's
link where ``[watch] public_url`` gives one (``IncidentEvent.url``): PagerDuty's
``links``, Alertmanager's ``gpumon_url`` annotation (and ``generatorURL``), ntfy's
``Click`` header, a Slack button, the webhook's ``url``.

The kinds a person reads (all but ``webhook`` and ``command``, which get every event as it
happened) say a message's events of one incident as one (``coalesce``): a memory warning
and the CUDA OOM that followed it within the notifier's settle window are one page with
the OOM's headline. PagerDuty keeps an alert's first title for good (a later ``trigger``
of its ``dedup_key`` only adds a log entry), so an incident's new ``page`` (its cause or
severity changed) resolves the alerts of its earlier pages and triggers a new one under
``page_key``.

A secret named by ``*_env`` is read from ``env`` when the message is rendered; when the
variable is unset the delivery fails (and is retried) with a message that names it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumon.backends.config.notify import NotifierConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import Health, iso_time
from gpumon.backends.notify.event import IncidentEvent, page_key, webhook_body

__all__ = [
    "DeliveryError",
    "HttpRequest",
    "alertmanager_alert",
    "alertmanager_alerts",
    "coalesce",
    "command_input",
    "render",
    "terminal_bytes",
]

SIGNATURE_HEADER = "X-Gpumon-Signature"
AM_ENDS_AFTER_RESENDS = 4  # an active alert's endsAt: this many re-send periods ahead
PAGE_TEXT = "gpumon incident page"


class DeliveryError(GpumonError):
    """A message did not reach its receiver; ``retry_after`` is the receiver's wish (s).
    ``rejected``: the receiver refused this message itself (HTTP 400, 413, 422), so
    sending it again cannot help, unlike a receiver that is down or a key that is wrong."""

    def __init__(
        self, message: str, retry_after: float | None = None, *, rejected: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.rejected = rejected


@dataclass(frozen=True, slots=True)
class HttpRequest:
    url: str
    body: bytes
    headers: Mapping[str, str]


def secret(config: NotifierConfig, name: str, env: Mapping[str, str]) -> str | None:
    """``config.<name>``, or the environment variable ``config.<name>_env`` names."""
    value: str | None = getattr(config, name)
    variable: str | None = getattr(config, f"{name}_env")
    if value is None and variable is not None:
        value = env.get(variable) or None
        if value is None:
            raise DeliveryError(f"${variable} (notify.{config.name}.{name}_env) is not set")
    return value


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _text(events: Sequence[IncidentEvent]) -> tuple[str, str]:
    """(title, body) of a chat message for a group of one host's events."""
    if len(events) == 1:
        ev = events[0]
        return ev.summary(), ev.details()
    hosts = sorted({ev.host for ev in events})
    title = f"{len(events)} alert changes on {', '.join(hosts)}"
    lines = []
    for ev in events:
        lines.append(ev.summary())
        lines.extend(f"  {line}" for line in ev.details().splitlines())
    return title, "\n".join(lines)


def _details(ev: IncidentEvent) -> dict[str, Any]:
    return {
        k: v for k, v in ev.to_json().items() if k not in ("summary", "event") and v is not None
    }


def coalesce(events: Sequence[IncidentEvent]) -> list[IncidentEvent]:
    """A message's events with each incident's run of ``open`` / ``update`` said once,
    where the run began, as its last event says it: ``open`` then ``update`` is that
    update as an ``open`` (the receiver never heard the first); ``update`` then ``update``
    is the last with the first ``previous`` of the run (the labels the receiver knows). A
    resolve ends the run (its key may open again after it: a new incident)."""
    out: list[IncidentEvent] = []
    running: dict[str, int] = {}  # key -> where its run is in ``out``
    for ev in events:
        at = running.pop(ev.key, None)
        if at is not None and ev.event == "update":
            first = out[at]
            before = None if first.event == "open" else first.previous or ev.previous
            out[at] = replace(ev, event=first.event, previous=before)
            running[ev.key] = at
            continue
        if ev.event in ("open", "update"):
            running[ev.key] = len(out)
        out.append(ev)
    return out


def _pagerduty(
    config: NotifierConfig, events: Sequence[IncidentEvent], env: Mapping[str, str]
) -> list[HttpRequest]:
    """Events API v2. An alert's title is the summary of the ``trigger`` that opened it;
    later triggers of its ``dedup_key`` only add log entries. So each ``page`` of an
    incident is an alert of its own (``page_key``): the update that begins one resolves
    the alerts of the pages before it and triggers the new one, titled as an opening."""
    key = secret(config, "routing_key", env)
    out = []

    def resolve(dedup_key: str) -> None:
        body = {"routing_key": key, "event_action": "resolve", "dedup_key": dedup_key}
        out.append(_request(config, body, {}))

    for ev in events:
        if ev.event == "resolve":  # every page's alert (a closed one drops the resolve)
            for page in range(1, ev.page + 1):
                resolve(page_key(ev.key, page))
            continue
        if ev.event == "update":  # the earlier pages' alerts end, whichever this one heard
            for page in range(1, ev.page):
                resolve(page_key(ev.key, page))
        begins = ev.event == "update" and ev.previous is not None and ev.page > 1
        title = replace(ev, event="open") if begins else ev
        payload = {
            "summary": title.summary()[:1024],
            "source": ev.host,
            "severity": (Health.INFO if ev.event == "test" else ev.severity).pagerduty,
            "timestamp": iso_time(ev.opened_at),
            "component": f"gpu{ev.gpu}" if ev.gpu is not None else None,
            "group": ev.job,
            "class": ev.kind,
            "custom_details": _details(ev),
        }
        body: dict[str, Any] = {
            "routing_key": key,
            "event_action": "trigger",
            "dedup_key": page_key(ev.key, ev.page),
            "payload": {k: v for k, v in payload.items() if v is not None},
            "client": "gpumon",
        }
        if ev.url:
            body["links"] = [{"href": ev.url, "text": PAGE_TEXT}]
        out.append(_request(config, body, {}))
        if ev.event == "test":  # a test must not leave an incident open on the pager
            resolve(ev.key)
    return out


def alertmanager_alerts(ev: IncidentEvent, now: float, resend_s: float) -> list[dict[str, Any]]:
    """The Alertmanager alerts for ``ev``: its own, after (for an update that changed the
    cause's kind, the severity or the GPU: ``ev.previous``) the alert of the labels before
    it, ended now. Alertmanager knows an alert by its labels and routes on ``alertname``
    and ``severity``: the incident keeps one active alert, under the labels that say it
    now (a memory warning that became a CUDA OOM pages the critical route)."""
    alert = alertmanager_alert(ev, now, resend_s)
    if ev.previous is None:
        return [alert]
    kind, severity, gpu = ev.previous
    before = alertmanager_alert(
        replace(ev, event="resolve", kind=kind, severity=severity, gpu=gpu), now, resend_s
    )
    if before["labels"] == alert["labels"]:
        return [alert]
    return [before, alert]


def alertmanager_alert(ev: IncidentEvent, now: float, resend_s: float) -> dict[str, Any]:
    """One Alertmanager alert for ``ev``: labels identify the incident and what routes it
    (``alertname`` gpumon_KIND of its cause, ``severity``); the cause's words are
    annotations. ``endsAt`` is the resolve time, or a few re-send periods ahead while it
    is open (an alert gpumon stops re-sending then expires by itself)."""
    labels = {
        "alertname": f"gpumon_{ev.kind}",
        "host": ev.host,
        "kind": ev.kind,
        "severity": (Health.INFO if ev.event == "test" else ev.severity).value,
        "incident": ev.key,
        "source": "gpumon",
    }
    if ev.gpu is not None:
        labels["gpu"] = str(ev.gpu)
    if ev.job:
        labels["job"] = ev.job
    # summary / description: the names Alertmanager's templates and Grafana show.
    annotations = {"summary": ev.summary(), "headline": ev.title}
    if details := ev.details():
        annotations["description"] = details
    optional = {
        "fix": ev.fix,
        "cause": ev.cause,
        "action": ev.done(),
        "recording": ev.recording,
        "bundle": ev.bundle,
        "resolved_by": ev.resolved_by,
        "gpumon_url": ev.url,
    }
    annotations.update({k: v for k, v in optional.items() if v})
    ends = now if ev.event == "resolve" else now + AM_ENDS_AFTER_RESENDS * resend_s
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": iso_time(ev.opened_at),
        "endsAt": iso_time(ends),
        "generatorURL": ev.url or f"gpumon://{ev.gpumon_host or 'gpumon'}/{ev.key}",
    }


def _ntfy(
    config: NotifierConfig, events: Sequence[IncidentEvent], env: Mapping[str, str]
) -> list[HttpRequest]:
    title, body = _text(events)
    worst = max(events, key=lambda e: (e.event != "resolve", e.severity.rank))
    if worst.event == "resolve":
        priority, tags = Health.OK.ntfy
    elif worst.event == "test":
        priority, tags = "3", "test_tube"
    else:
        priority, tags = worst.severity.ntfy
    headers = {
        "Title": title.encode("ascii", "replace").decode(),
        "Priority": priority,
        "Tags": f"{tags},gpumon",
        "Content-Type": "text/plain; charset=utf-8",
    }
    token = secret(config, "token", env)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if worst.url:  # the notification opens the page of its most urgent incident
        headers["Click"] = worst.url
    text = body or title
    return [HttpRequest(_url(config, env), text.encode(), headers)]


def _slack(
    config: NotifierConfig, events: Sequence[IncidentEvent], env: Mapping[str, str]
) -> list[HttpRequest]:
    title, _ = _text(events)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}}
    ]
    for ev in events:
        text = ev.summary() + ("\n" + ev.details() if ev.details() else "")
        section: dict[str, Any] = {
            "type": "section",
            "text": {"type": "plain_text", "text": text[:3000]},
        }
        if ev.url:
            section["accessory"] = {
                "type": "button",
                "text": {"type": "plain_text", "text": "Open"},
                "url": ev.url[:3000],
            }
        blocks.append(section)
    return [_request(config, {"text": title, "blocks": blocks[:50]}, env)]


def _webhook(
    config: NotifierConfig,
    events: Sequence[IncidentEvent],
    now: float,
    env: Mapping[str, str],
) -> list[HttpRequest]:
    body = _json(webhook_body([ev.to_json() for ev in events], now))
    headers = {"Content-Type": "application/json"}
    key = secret(config, "secret", env)
    if key:
        mac = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
        headers[SIGNATURE_HEADER] = f"sha256={mac}"
    return [HttpRequest(_url(config, env), body, headers)]


def _url(config: NotifierConfig, env: Mapping[str, str]) -> str:
    url = secret(config, "url", env)
    if url is None:
        raise DeliveryError(f"notify.{config.name} has no url")
    return url


def _request(config: NotifierConfig, body: Any, env: Mapping[str, str]) -> HttpRequest:
    return HttpRequest(_url(config, env), _json(body), {"Content-Type": "application/json"})


def render(
    config: NotifierConfig,
    events: Sequence[IncidentEvent],
    now: float,
    env: Mapping[str, str],
) -> list[HttpRequest]:
    """The HTTP requests that deliver ``events`` (one host's group) for a web kind; but
    for a webhook, each incident's events said once (``coalesce``)."""
    if config.kind == "webhook":
        return _webhook(config, events, now, env)
    events = coalesce(events)
    if config.kind == "pagerduty":
        return _pagerduty(config, events, env)
    if config.kind == "alertmanager":
        alerts = [a for ev in events for a in alertmanager_alerts(ev, now, config.resend_s)]
        url = _url(config, env).rstrip("/") + "/api/v2/alerts"
        return [HttpRequest(url, _json(alerts), {"Content-Type": "application/json"})]
    if config.kind == "ntfy":
        return _ntfy(config, events, env)
    if config.kind == "slack":
        return _slack(config, events, env)
    raise ValueError(f"{config.kind} is not a web notifier")


def command_input(events: Sequence[IncidentEvent], now: float) -> bytes:
    """The ``command`` notifier's stdin: the webhook JSON."""
    return _json(webhook_body([ev.to_json() for ev in events], now)) + b"\n"


def _clean(text: str) -> str:
    """No control characters (an alert's text must not end the escape sequence) and no
    ';' (OSC 777's field separator)."""
    return "".join(ch if ch.isprintable() and ch != ";" else " " for ch in text)[:400]


def terminal_bytes(events: Sequence[IncidentEvent], *, tmux: bool) -> bytes:
    """OSC 9 (iTerm2, Windows Terminal, kitty...) and OSC 777 (rxvt, foot, WezTerm)
    desktop notifications, then BEL for terminals that know neither. Inside tmux each
    sequence is wrapped in tmux's passthrough (needs ``allow-passthrough on``); the BEL
    goes to tmux itself, which marks the window."""
    title, body = _text(coalesce(events))
    title, body = _clean(title), _clean(body.replace("\n", " | "))
    sequences = [f"\x1b]9;{title}\x07", f"\x1b]777;notify;{title};{body}\x07"]
    if tmux:
        sequences = ["\x1bPtmux;" + s.replace("\x1b", "\x1b\x1b") + "\x1b\\" for s in sequences]
    return ("".join(sequences) + "\a").encode()
