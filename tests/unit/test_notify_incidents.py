"""Incident semantics: one alert = one incident with a stable key, repeats never re-page,
resolve when the alert clears (not before its minimum open time), restarts say who fixed it."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.notify.event import EVENT_KEYS, incident_key
from gpumon.backends.notify.incidents import IncidentTracker


def oom(key: str = "cuda_oom:log:1", at: float = 100.0, **changes: object) -> Alert:
    alert = Alert(
        key=key,
        severity=Health.CRITICAL,
        kind="cuda_oom",
        host="ct200",
        gpu=6,
        job="drafter",
        message="CUDA out of memory on GPU 6",
        time=at,
        last_seen=at,
    )
    return replace(alert, **changes)  # type: ignore[arg-type]


def test_an_alert_opens_one_incident_and_its_repeats_never_page_again() -> None:
    t = IncidentTracker(min_open_s=0)
    [ev] = t.observe("ct200", [oom()], 100.0)
    assert ev.event == "open" and ev.key == incident_key("ct200", 6, "drafter", "cuda_oom")
    assert ev.key == "ct200/gpu6/drafter/cuda_oom"
    # The same alert again, and a second OOM line (a new alert, same host/GPU/job/rule).
    assert t.observe("ct200", [oom()], 101.0) == []
    assert t.observe("ct200", [oom(), oom("cuda_oom:log:2", at=102.0)], 102.0) == []
    assert t.open[ev.key].event.count == 2


def test_a_worse_severity_updates_the_incident() -> None:
    t = IncidentTracker(min_open_s=0)
    warn = replace(oom(), kind="memory", key="memory:6", severity=Health.WARNING)
    [opened] = t.observe("ct200", [warn], 100.0)
    [update] = t.observe("ct200", [replace(warn, severity=Health.CRITICAL)], 101.0)
    assert (opened.event, opened.severity) == ("open", "warning")
    assert (update.event, update.severity, update.key) == ("update", "critical", opened.key)


def test_resolve_waits_for_the_minimum_open_time_and_a_flap_continues_the_incident() -> None:
    t = IncidentTracker(min_open_s=30)
    [opened] = t.observe("ct200", [oom()], 100.0)
    assert t.observe("ct200", [], 110.0) == []  # cleared after 10 s: too soon to resolve
    assert t.observe("ct200", [oom()], 115.0) == []  # back again: the same incident, no page
    assert t.observe("ct200", [], 120.0) == []
    assert t.due(125.0) == []
    [resolved] = t.due(131.0)
    assert resolved.event == "resolve" and resolved.key == opened.key
    assert resolved.resolved_by == "recovered" and not t.open


def test_other_hosts_alerts_do_not_resolve_an_incident() -> None:
    t = IncidentTracker(min_open_s=0)
    t.observe("ct200", [oom()], 100.0)
    assert t.observe("gpu2", [], 101.0) == []
    assert len(t.open) == 1


def test_auto_restart_alerts_say_what_gpumon_did_and_who_fixed_it() -> None:
    t = IncidentTracker(min_open_s=0)
    auto = Alert(
        "auto_restart:event:1",
        Health.WARNING,
        "auto_restart",
        "ct200",
        None,
        "drafter",
        "auto-restart: drafter crashed (CUDA OOM); automatic restart 1/3 in 10 s",
        100.0,
        100.0,
    )
    [ev] = t.observe("ct200", [oom(), auto], 100.0)  # not an incident of its own
    assert ev.action == "auto-restart attempted (1/3)"
    t.note_restart("ct200", "drafter", automatic=True, ok=True, at=120.0)
    [resolved] = t.observe("ct200", [auto], 121.0)  # the OOM alert was cleared
    assert resolved.action == "auto-restart succeeded"
    assert resolved.resolved_by == "auto-restart"
    gave_up = replace(
        auto,
        key="auto_restart:event:2",
        severity=Health.CRITICAL,
        message="auto-restart: drafter crashed again ...; auto-restart gives up",
    )
    [again] = t.observe("ct200", [oom("cuda_oom:log:9", at=130.0), gave_up], 130.0)
    assert again.event == "open" and again.action == "auto-restart gave up"


def test_a_person_restart_is_named_as_the_fix() -> None:
    t = IncidentTracker(min_open_s=0)
    t.observe("ct200", [oom()], 100.0)
    t.note_restart("ct200", "drafter", automatic=False, ok=True, at=110.0)
    [resolved] = t.observe("ct200", [], 111.0)
    assert resolved.resolved_by == "a person's restart"


def test_restored_incidents_continue_or_resolve_after_a_restart_of_gpumon() -> None:
    first = IncidentTracker(min_open_s=0)
    [ev] = first.observe("ct200", [oom()], 100.0)
    other = replace(ev, key="ct200/gpu2/-/xid", gpu=2, kind="xid")
    later = IncidentTracker(min_open_s=0)
    later.restore([ev, other])
    # The OOM alert is still active after the restart: no new page. The Xid is gone: resolved.
    events = later.observe("ct200", [oom(at=100.0)], 200.0)
    assert [(e.event, e.key) for e in events] == [("resolve", other.key)]


def test_event_json_has_exactly_the_documented_keys() -> None:
    [ev] = IncidentTracker().observe("ct200", [oom()], 100.0)
    data = ev.to_json()
    assert tuple(data) == EVENT_KEYS
    assert data["summary"].startswith("[CRITICAL] cuda_oom on ct200 GPU 6 job drafter")
    assert dt.datetime.fromisoformat(data["opened_at"]).timestamp() == 100.0
    assert data["gpu"] == 6 and data["job"] == "drafter" and data["count"] == 1


def test_an_incident_waits_for_a_running_restart_to_say_how_it_ended() -> None:
    busy = {("ct200", "drafter")}
    t = IncidentTracker(min_open_s=0, restarting=lambda host, job: (host, job) in busy)
    t.observe("ct200", [oom()], 100.0)
    assert t.observe("ct200", [], 105.0) == []  # the GPU refilled while the restart verifies
    busy.clear()
    t.note_restart("ct200", "drafter", automatic=True, ok=True, at=108.0)
    [resolved] = t.due(108.5)
    assert (resolved.resolved_by, resolved.action) == ("auto-restart", "auto-restart succeeded")
