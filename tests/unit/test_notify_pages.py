"""Issue 33.6: what each notifier shows when an incident's cause arrives after its first
alert, against each receiver's documented semantics (tests/support/pagers.py).

The demo's OOM: the memory warning opens the incident, torch's OOM line 2 s later is its
cause. PagerDuty keeps an alert's first title ("Alert titles cannot be edited"; a second
``trigger`` of a ``dedup_key`` only adds a log entry), so gpumon used to leave the phone
showing the memory warning. Now a new incident's first message waits the notifier's
settle window (the OOM joins it: one page with the OOM's title), and a cause that comes
later begins a new page: the old alert resolved, a new one (``KEY#2``) with the new title.

Delivery is driven by hand here (the outbox's due batches, ``render``, ``mark_sent``: what
``NotifyHub``'s delivery task does), on a clock the test sets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.notify import SETTLE_S, NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.incidents import IncidentTracker
from gpumon.backends.notify.notifiers import HttpRequest, coalesce, render
from gpumon.backends.notify.outbox import Outbox

from alert_facts import log_facts
from pagers import AlertmanagerAlerts, PagerDutyService

ROUTING_KEY = "R0UT1NGKEY"
KEY = "ct200/gpu6/drafter/memory"
RAW_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)
OOM_TITLE = "[CRITICAL] ct200: drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
MEMORY_TITLE = "[WARNING] ct200: drafter: GPU 6 memory 97.2% used, 2.0 GiB free"


def memory(severity: Health = Health.WARNING, at: float = 96.0) -> Alert:
    text = "GPU 6 memory 97.2% used, 2.0 GiB free"
    return Alert("memory:6", severity, "memory", "ct200", 6, "drafter", text, 96.0, at)


def oom_line() -> Alert:
    return Alert("cuda_oom:log:1", Health.CRITICAL, "cuda_oom", "ct200", 6, "drafter",
                 RAW_OOM, 98.0, 98.0, facts=log_facts(RAW_OOM))  # fmt: skip


MEMORY_ROUND = (96.0, [memory()])
OOM_ROUND = (98.0, [memory(Health.CRITICAL, 98.0), oom_line()])


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pager(**values: object) -> NotifierConfig:
    return NotifierConfig(
        name="pd", kind="pagerduty", url="http://127.0.0.1:9/pd", routing_key=ROUTING_KEY,
        group_s=0, **values,  # type: ignore[arg-type]
    )  # fmt: skip


def hub(tmp_path: Path, clock: Clock, *notifiers: NotifierConfig) -> NotifyHub:
    settings = NotifySettings(
        notifiers={n.name: n for n in notifiers}, min_open_s=0, resolve_after_s=0
    )
    return NotifyHub(settings, Outbox(tmp_path / "outbox.sqlite3"), clock=clock)


def see(h: NotifyHub, clock: Clock, at: float, alerts: list[Alert]) -> list[IncidentEvent]:
    """The monitor reports ``alerts`` active at ``at``: what the hub publishes."""
    clock.t = at
    events = h.tracker.observe("ct200", alerts, at)
    h.publish(events)
    return events


def deliver(h: NotifyHub, name: str, now: float) -> list[list[IncidentEvent]]:
    """Every message of ``name`` due at ``now``; returns their events."""
    out: list[list[IncidentEvent]] = []
    while True:
        rows, _ = h.outbox.due_batch(name, now)
        if not rows:
            return out
        out.append([r.event for r in rows])
        h.outbox.mark_sent(name, [r.id for r in rows], now)


def to_pagerduty(service: PagerDutyService, cfg: NotifierConfig, message: list[IncidentEvent],
                 now: float) -> None:  # fmt: skip
    for req in render(cfg, message, now, {}):
        service.apply(json.loads(req.body))


def test_the_stand_in_follows_pagerdutys_documented_semantics() -> None:
    pd = PagerDutyService(ROUTING_KEY)

    def trigger(key: str, title: str) -> None:
        payload = {"summary": title, "severity": "critical", "source": "h"}
        pd.apply({"routing_key": ROUTING_KEY, "event_action": "trigger", "dedup_key": key,
                  "payload": payload})  # fmt: skip

    def event(action: str, key: str) -> None:
        pd.apply({"routing_key": ROUTING_KEY, "event_action": action, "dedup_key": key})

    trigger("k", "first")
    trigger("k", "second")  # a log entry: the title stays, nobody is notified again
    assert (pd.showing(), pd.alerts[0].log, pd.notified) == (["first"], ["second"], ["first"])
    event("acknowledge", "k")
    trigger("k", "third")  # acknowledged: still a log entry, no notification
    assert pd.notified == ["first"] and pd.alerts[0].status == "acknowledged"
    event("resolve", "k")
    event("resolve", "nothing-open")  # no open alert of that key: nothing changes
    trigger("k", "fourth")  # the key's alert was resolved: a new alert
    assert [a.title for a in pd.alerts] == ["first", "fourth"] and pd.showing() == ["fourth"]
    assert pd.notified == ["first", "fourth"]


def test_the_first_page_waits_for_the_cause_and_carries_its_title(tmp_path: Path) -> None:
    """The done-when of issue 33.6: the OOM 2 s after the memory warning, within the
    pager's settle window: one alert, titled with the OOM, notified once, SETTLE_S after
    the incident opened (and no later)."""
    clock = Clock(96.0)
    cfg = pager()
    assert cfg.settle_window == SETTLE_S
    h = hub(tmp_path, clock, cfg)
    pd = PagerDutyService(ROUTING_KEY)
    see(h, clock, *MEMORY_ROUND)
    assert deliver(h, "pd", 96.0) == []  # settling
    see(h, clock, *OOM_ROUND)
    assert deliver(h, "pd", 96.0 + SETTLE_S - 0.01) == []
    [message] = deliver(h, "pd", 96.0 + SETTLE_S)
    assert [e.event for e in message] == ["open", "update"]  # both kept in the outbox
    to_pagerduty(pd, cfg, message, 96.0 + SETTLE_S)
    assert pd.showing() == [OOM_TITLE] and pd.notified == [OOM_TITLE]
    [alert] = pd.alerts
    assert alert.dedup_key == f"{KEY}#2" and alert.severity == "critical"
    # It ends: every page's key is resolved (the first never opened: PagerDuty drops it).
    [resolved] = see(h, clock, 130.0, [])
    assert (resolved.event, resolved.page) == ("resolve", 2)
    [message] = deliver(h, "pd", 130.0)
    to_pagerduty(pd, cfg, message, 130.0)
    assert pd.showing() == [] and alert.status == "resolved" and len(pd.notified) == 1
    h.outbox.close()


def test_a_cause_after_the_first_page_is_a_new_alert_and_the_old_one_ends(
    tmp_path: Path,
) -> None:
    """Without the settle window (or a cause later than it): the memory warning pages; the
    OOM resolves that alert and triggers a new one with its title, notified even though
    the person had acknowledged the first (a new alert notifies)."""
    clock = Clock(96.0)
    cfg = pager(settle_s=0)
    h = hub(tmp_path, clock, cfg)
    pd = PagerDutyService(ROUTING_KEY)
    see(h, clock, *MEMORY_ROUND)
    [first] = deliver(h, "pd", 96.0)
    to_pagerduty(pd, cfg, first, 96.0)
    assert pd.showing() == [MEMORY_TITLE] and pd.alerts[0].dedup_key == KEY
    pd.acknowledge(KEY)  # on the phone: "I am on it"
    [update] = see(h, clock, *OOM_ROUND)
    assert (update.page, update.previous) == (2, ("memory", "warning", 6))
    [second] = deliver(h, "pd", 98.0)
    to_pagerduty(pd, cfg, second, 98.0)
    assert pd.showing() == [OOM_TITLE] and pd.notified == [MEMORY_TITLE, OOM_TITLE]
    old, new = pd.alerts
    assert (old.dedup_key, old.title, old.status) == (KEY, MEMORY_TITLE, "resolved")
    assert (new.dedup_key, new.status) == (f"{KEY}#2", "triggered")
    # A later event of the same page (gpumon's restart of the job) is a log entry.
    clock.t = 110.0
    h.publish(h.tracker.note_restart("ct200", "drafter", automatic=True, ok=True, at=110.0))
    [third] = deliver(h, "pd", 110.0)
    to_pagerduty(pd, cfg, third, 110.0)
    assert pd.showing() == [OOM_TITLE] and len(pd.notified) == 2
    assert new.log and "auto-restart succeeded" in json.dumps(
        [json.loads(r.body) for r in render(cfg, third, 110.0, {})]
    )
    h.outbox.close()


def test_a_restart_of_gpumon_mid_settle_neither_loses_nor_repeats_the_page(
    tmp_path: Path,
) -> None:
    """The first message waits in the outbox (its not_before): a watch restarted while it
    waits sends it once, at the same time, with the cause that came after the restart."""
    clock = Clock(96.0)
    cfg = pager()
    first = hub(tmp_path, clock, cfg)
    see(first, clock, *MEMORY_ROUND)
    first.outbox.close()  # gpumon stops mid-settle
    clock.t = 97.0
    again = hub(tmp_path, clock, cfg)
    assert again.tracker.open[KEY].event.kind == "memory"  # restored
    [update] = see(again, clock, *OOM_ROUND)
    assert update.event == "update" and update.episodes == 1  # not a new outage
    assert deliver(again, "pd", 100.0) == []
    [message] = deliver(again, "pd", 96.0 + SETTLE_S)
    pd = PagerDutyService(ROUTING_KEY)
    to_pagerduty(pd, cfg, message, 101.0)
    assert pd.notified == [OOM_TITLE] and pd.showing() == [OOM_TITLE]
    assert again.outbox.pending("pd") == [] and deliver(again, "pd", 200.0) == []
    again.outbox.close()


def test_a_critical_only_pager_hears_the_oom_as_its_opening_within_the_window(
    tmp_path: Path,
) -> None:
    """The first event a notifier hears of an incident opens it there (the warning was not
    for it): ``[CRITICAL]``, with the OOM's title, no later than its own settle window."""
    clock = Clock(96.0)
    cfg = pager(min_severity=Health.CRITICAL)
    h = hub(tmp_path, clock, cfg)
    see(h, clock, *MEMORY_ROUND)
    see(h, clock, *OOM_ROUND)
    assert deliver(h, "pd", 98.0 + SETTLE_S - 0.01) == []
    [message] = deliver(h, "pd", 98.0 + SETTLE_S)
    assert [e.event for e in message] == ["open"]
    pd = PagerDutyService(ROUTING_KEY)
    to_pagerduty(pd, cfg, message, 103.0)
    assert pd.showing() == [OOM_TITLE]
    h.outbox.close()


def test_what_each_notifier_shows_when_the_cause_comes_after_the_first_message(
    tmp_path: Path,
) -> None:
    """docs/on-call.md, "What an update shows": each kind's last word on the incident is the OOM.
    ntfy and Slack post a new message (ntfy: each publish is a notification; a Slack
    incoming webhook cannot edit one), led by the OOM's headline; Alertmanager ends the
    memory warning's alert and fires the OOM's (new labels: its group notifies); a webhook
    gets both events as they happened."""
    clock = Clock(96.0)
    url = "http://127.0.0.1:9/"
    kinds = [
        NotifierConfig(name="phone", kind="ntfy", url=url, group_s=0, settle_s=0),
        NotifierConfig(name="chat", kind="slack", url=url, group_s=0, settle_s=0),
        NotifierConfig(name="am", kind="alertmanager", url=url),
        NotifierConfig(name="hook", kind="webhook", url=url, group_s=0),
    ]
    h = hub(tmp_path, clock, *kinds)
    sent: dict[str, list[HttpRequest]] = {}
    am = AlertmanagerAlerts()
    for at, alerts in (MEMORY_ROUND, OOM_ROUND):
        see(h, clock, at, alerts)
        for cfg in kinds:
            for message in deliver(h, cfg.name, at):
                for req in render(cfg, message, at, {}):
                    sent.setdefault(cfg.name, []).append(req)
                    if cfg.kind == "alertmanager":
                        am.post(req.body, at)
    oom = OOM_TITLE.replace("[CRITICAL]", "[CRITICAL, updated]")
    assert [r.headers["Title"] for r in sent["phone"]] == [MEMORY_TITLE, oom]
    assert [json.loads(r.body)["text"] for r in sent["chat"]] == [MEMORY_TITLE, oom]
    [firing] = am.firing(98.0)
    assert firing.labels["alertname"] == "gpumon_cuda_oom"
    assert firing.annotations["summary"] == oom and len(am.notified) == 2
    hooked = [e["event"] for r in sent["hook"] for e in json.loads(r.body)["events"]]
    assert hooked == ["open", "update"]
    h.outbox.close()


def test_a_persons_kinds_say_a_settled_message_once_as_the_cause(tmp_path: Path) -> None:
    """With their settle window (the default), ntfy and Slack get one message for the
    memory warning and the OOM: titled as the OOM's opening, no "2 alert changes"."""
    clock = Clock(96.0)
    url = "http://127.0.0.1:9/"
    phone = NotifierConfig(name="phone", kind="ntfy", url=url, group_s=0)
    chat = NotifierConfig(name="chat", kind="slack", url=url, group_s=0)
    h = hub(tmp_path, clock, phone, chat)
    see(h, clock, *MEMORY_ROUND)
    see(h, clock, *OOM_ROUND)
    for cfg in (phone, chat):
        [message] = deliver(h, cfg.name, 96.0 + SETTLE_S)
        [req] = render(cfg, message, 101.0, {})
        title = req.headers.get("Title") or json.loads(req.body)["text"]
        assert title == OOM_TITLE, cfg.kind
    h.outbox.close()


def test_a_resolve_in_the_same_message_ends_the_run() -> None:
    """An incident that opens, resolves and opens again within one message is two
    incidents there: the second opening is not folded into the first."""
    [opened] = IncidentTracker(min_open_s=0, resolve_after_s=0).observe("ct200", [memory()], 96.0)
    resolved = dataclasses.replace(opened, event="resolve", resolved_by="recovered")
    again = dataclasses.replace(opened, time=120.0)
    assert [e.event for e in coalesce([opened, resolved, again])] == ["open", "resolve", "open"]
