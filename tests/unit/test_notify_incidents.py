"""Incident semantics: one alert = one incident with a stable key, repeats never re-page,
resolve when the alert clears (not before its minimum open time), restarts say who fixed it."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health, iso_time
from gpumon.backends.notify.event import EVENT_KEYS, incident_key
from gpumon.backends.notify.incidents import IncidentTracker

from alert_facts import held_facts, log_facts, restart_facts


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
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    [ev] = t.observe("ct200", [oom()], 100.0)
    assert ev.event == "open" and ev.key == incident_key("ct200", 6, "drafter", "cuda_oom")
    assert ev.key == "ct200/gpu6/drafter/cuda_oom"
    # The same alert again, and a second OOM line (a new alert, same host/GPU/job/rule).
    assert t.observe("ct200", [oom()], 101.0) == []
    assert t.observe("ct200", [oom(), oom("cuda_oom:log:2", at=102.0)], 102.0) == []
    assert t.open[ev.key].event.count == 2


def test_a_worse_severity_updates_the_incident() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    warn = replace(oom(), kind="memory", key="memory:6", severity=Health.WARNING)
    [opened] = t.observe("ct200", [warn], 100.0)
    [update] = t.observe("ct200", [replace(warn, severity=Health.CRITICAL)], 101.0)
    assert (opened.event, opened.severity) == ("open", "warning")
    assert (update.event, update.severity, update.key) == ("update", "critical", opened.key)


def test_resolve_waits_for_the_minimum_open_time() -> None:
    t = IncidentTracker(min_open_s=30, resolve_after_s=0)
    [opened] = t.observe("ct200", [oom()], 100.0)
    assert t.observe("ct200", [], 110.0) == []  # cleared after 10 s: too soon to resolve
    assert t.due(125.0) == []
    [resolved] = t.due(131.0)
    assert resolved.event == "resolve" and resolved.key == opened.key
    assert resolved.resolved_by == "recovered" and not t.open


def unreachable(at: float) -> Alert:
    """The connection alert of a host whose sshd is down (one key, raised again each
    time: ``AlertEngine.on_unreachable``)."""
    return Alert("host_unreachable", Health.WARNING, "host_unreachable", "box", None, None,
                 "cannot connect to 127.0.0.1 port 2222: connection refused", at, at)  # fmt: skip


def test_a_flapping_host_is_one_incident_that_counts_its_outages() -> None:
    """Issue 34.9: sshd down and up every 20-40 s gave an open and a resolve per outage.
    A host back for less than ``resolve_after_s`` that goes again continues its incident:
    an update that counts the outages (its page stays: no new alert); it resolves once the
    host has been back that long."""
    t = IncidentTracker(min_open_s=30, resolve_after_s=60)
    events = []
    for n in range(6):  # down 20 s, up 30 s, six times
        down = 100.0 + 50 * n
        events += t.observe("box", [unreachable(down)], down)
        events += t.due(down + 10)
        events += t.observe("box", [], down + 20)  # back
        events += t.due(down + 49)
    assert [e.event for e in events] == ["open"] + ["update"] * 5
    assert [e.episodes for e in events] == [1, 2, 3, 4, 5, 6]
    assert {e.key for e in events} == {"box/gpu-/-/host_unreachable"}
    assert {e.page for e in events} == {1} and all(e.previous is None for e in events[1:])
    assert "back 5 times after it ended" in events[-1].details().splitlines()
    back = 100.0 + 50 * 5 + 20  # the last time it came back
    assert t.due(back + 59) == []  # not back long enough yet
    [resolved] = t.due(back + 60)
    assert (resolved.event, resolved.episodes, resolved.resolved_by) == ("resolve", 6, "recovered")
    # Down again after that: a new incident.
    [again] = t.observe("box", [unreachable(back + 100)], back + 100)
    assert (again.event, again.episodes) == ("open", 1)


def test_an_incident_read_back_after_a_restart_is_no_new_episode() -> None:
    first = IncidentTracker(min_open_s=0, resolve_after_s=60)
    [opened] = first.observe("box", [unreachable(100.0)], 100.0)
    later = IncidentTracker(min_open_s=0, resolve_after_s=60)
    later.restore([opened], 150.0)
    assert later.observe("box", [unreachable(100.0)], 160.0) == []  # the same outage
    assert later.observe("box", [], 170.0) == []
    [back] = later.observe("box", [unreachable(180.0)], 180.0)  # a second outage
    assert (back.event, back.episodes) == ("update", 2)
    # One that does not come back resolves once the settle time has passed since it was
    # read back (its host had time to answer), not at the first look.
    gone = IncidentTracker(min_open_s=0, resolve_after_s=60)
    gone.restore([opened], 150.0)
    assert gone.due(151.0) == [] and gone.due(209.0) == []
    [resolved] = gone.due(210.0)
    assert resolved.event == "resolve"


def test_other_hosts_alerts_do_not_resolve_an_incident() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.observe("ct200", [oom()], 100.0)
    assert t.observe("gpu2", [], 101.0) == []
    assert len(t.open) == 1


def test_auto_restart_alerts_say_what_gpumon_did_and_who_fixed_it() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
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
        facts=restart_facts("due", 1, 3, 10.0),
    )
    [ev] = t.observe("ct200", [oom(), auto], 100.0)  # not an incident of its own
    # Decided, not done: the restart is due in 10 s; nothing says it was attempted yet.
    assert ev.action == f"auto-restart 1/3 due {iso_time(110.0)}"
    assert ev.action_at is None and ev.pid is None and "attempted" not in ev.line()
    # It ran and ended: an update says so when it happened, with the new PID and how long.
    [update] = t.note_restart(
        "ct200", "drafter", automatic=True, ok=True, at=120.0, pid=13025, took_s=4.25
    )
    assert (update.event, update.time, update.action) == ("update", 120.0, "auto-restart succeeded")
    assert (update.action_at, update.pid, update.took_s) == (120.0, 13025, 4.25)
    assert f"gpumon: auto-restart succeeded at {iso_time(120.0)}: new PID 13025, took 4.2 s" in (
        update.details().splitlines()
    )
    [resolved] = t.observe("ct200", [auto], 121.0)  # the OOM alert was cleared
    assert resolved.action == "auto-restart succeeded" and resolved.pid == 13025
    assert resolved.resolved_by == "auto-restart"
    gave_up = replace(
        auto,
        key="auto_restart:event:2",
        severity=Health.CRITICAL,
        message="auto-restart: drafter crashed again ...; auto-restart gives up",
        facts=restart_facts("gave_up", attempts=3),
    )
    [again] = t.observe("ct200", [oom("cuda_oom:log:9", at=130.0), gave_up], 130.0)
    assert again.event == "open" and again.action == "auto-restart gave up"
    assert again.action_at == gave_up.time and again.pid is None


def test_a_failed_auto_restart_is_said_when_it_failed_with_why() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.observe("ct200", [oom()], 100.0)
    [update] = t.note_restart(
        "ct200", "drafter", automatic=True, ok=False, at=115.0, took_s=3.0,
        why="verify: drafter exited with code 1 right after starting",
    )  # fmt: skip
    assert update.action == (
        "auto-restart failed: verify: drafter exited with code 1 right after starting"
    )
    assert update.action_at == 115.0 and update.pid is None
    # A person's restart is no action of gpumon's: no update, the resolve names them.
    assert t.note_restart("ct200", "drafter", automatic=False, ok=True, at=130.0) == []


def test_an_old_action_does_not_follow_a_new_incident_of_the_job() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.observe("ct200", [oom()], 100.0)
    t.note_restart("ct200", "drafter", automatic=True, ok=True, at=110.0, pid=7)
    t.observe("ct200", [], 111.0)
    [later] = t.observe("ct200", [oom("cuda_oom:log:5", at=5000.0)], 5000.0)
    assert later.action is None and later.pid is None


RAW_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)
HEADLINE = "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
HELD = "6.0 GiB held by CT 201 jupyter-lab"
HELD_HEADLINE = f"{HEADLINE[:-1]}; {HELD})"  # the demo's: CT 201 held memory on GPU 6


def test_events_say_the_incident_headline_and_its_fix_not_the_raw_line() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    drop = replace(
        oom(), key="oom_death:6:1", kind="oom_death", message="GPU 6 memory fell from 99% to 0%"
    )
    # The memory drop is evidence of the same incident: one event, the OOM's story.
    [ev] = t.observe("ct200", [oom(message=RAW_OOM, facts=log_facts(RAW_OOM)), drop], 100.0)
    assert (ev.kind, ev.headline, ev.fix) == ("cuda_oom", HEADLINE, "gpumon restart ct200 drafter")
    assert ev.count == 2 and ev.summary() == f"[CRITICAL] ct200: {HEADLINE}"
    lines = ev.details().splitlines()
    assert lines[0] == "fix: gpumon restart ct200 drafter"
    assert lines[-2] == "2 alerts in this incident"
    assert lines[-1] == f"alert cuda_oom: {RAW_OOM}"  # the cause's raw line, last
    assert ev.to_json()["headline"] == HEADLINE and ev.to_json()["fix"] == lines[0][5:]


def demo_oom() -> list[tuple[float, list[Alert]]]:
    """The demo's OOM as the watch sees it, round by round: the memory warning and the
    CT 201 holder first, the memory critical and torch's OOM line 2 s later, the memory
    drop a second after, the auto-restart's decision, then nothing (restarted, refilled)."""
    memory = replace(
        oom(), key="memory:6", kind="memory", severity=Health.WARNING, time=96.0, last_seen=96.0,
        message="GPU 6 memory 97.2% used, 2.0 GiB free",
    )  # fmt: skip
    holder = replace(
        memory, key="foreign_process:6", kind="foreign_process",
        message="GPU 6: 6.0 GiB held by CT 201 jupyter-lab", facts=held_facts(6.0),
    )  # fmt: skip
    critical = replace(
        memory, severity=Health.CRITICAL, last_seen=98.0,
        message="GPU 6 memory 98.9% used, 0.4 GiB free",
    )  # fmt: skip
    line = oom(at=98.0, message=RAW_OOM, facts=log_facts(RAW_OOM))
    drop = replace(
        line, key="oom_death:6:1", kind="oom_death", time=99.0, last_seen=99.0,
        message="GPU 6 memory fell from 99% to 0% in 1 s", facts=AlertFacts(names_gpu=True),
    )  # fmt: skip
    auto = Alert(
        "auto_restart:event:1", Health.WARNING, "auto_restart", "ct200", None, "drafter",
        "auto-restart: drafter crashed (CUDA OOM); automatic restart 1/3 in 10 s", 99.0, 99.0,
        facts=restart_facts("due", 1, 3, 10.0),
    )  # fmt: skip
    return [
        (96.0, [memory, holder]),
        (98.0, [critical, holder, line]),
        (99.0, [critical, holder, line, drop, auto]),
        (100.0, [critical, holder, line, drop, auto]),
        (115.0, [auto]),  # the auto_restart alert stays until acknowledged: no incident
    ]


def test_the_demo_oom_pages_once_then_updates_then_resolves_once() -> None:
    """One failure, one page: the memory warning opens it, torch's OOM line 2 s later is
    an update of the same incident with the OOM's headline and severity (not a second
    page), the memory drop and the holder only count, the restart's decision and its end
    are updates, and it resolves once, when every alert of it ended."""
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    rounds = demo_oom()
    events = []
    for at, alerts in rounds[:4]:
        events += t.observe("ct200", alerts, at)
    events += t.note_restart(
        "ct200", "drafter", automatic=True, ok=True, at=112.0, pid=710, took_s=3.3
    )
    events += t.observe("ct200", rounds[4][1], 115.0)
    assert [e.event for e in events] == ["open", "update", "update", "update", "resolve"]
    assert {e.key for e in events} == {"ct200/gpu6/drafter/memory"}  # named as it opened
    opened, oomed, due, restarted, resolved = events
    assert due.action == f"auto-restart 1/3 due {iso_time(109.0)}" and due.previous is None
    assert (opened.kind, opened.severity) == ("memory", "warning")
    assert opened.headline == f"drafter: GPU 6 memory 97.2% used, 2.0 GiB free ({HELD})"
    assert opened.opened_at == 96.0 and opened.count == 2
    assert (oomed.kind, oomed.severity, oomed.headline) == ("cuda_oom", "critical", HELD_HEADLINE)
    assert oomed.summary() == f"[CRITICAL, updated] ct200: {HELD_HEADLINE}"
    assert oomed.cause == RAW_OOM
    assert oomed.fix == "stop jupyter-lab (the dashboard's K), then gpumon restart ct200 drafter"
    assert oomed.previous == ("memory", "warning", 6)  # Alertmanager ends the old labels
    assert oomed.opened_at == 96.0
    assert (restarted.action, restarted.pid, restarted.headline) == (
        "auto-restart succeeded", 710, HELD_HEADLINE,
    )  # fmt: skip
    assert restarted.previous is None
    assert (resolved.resolved_by, resolved.headline, resolved.kind) == (
        "auto-restart", HELD_HEADLINE, "cuda_oom",
    )  # fmt: skip
    assert resolved.count == 4 and not t.open  # memory, holder, OOM line, drop


def test_a_better_cause_that_ends_first_keeps_the_incident_story() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    rounds = demo_oom()
    for at, alerts in rounds[:3]:
        t.observe("ct200", alerts, at)
    memory_only = [a for a in rounds[2][1] if a.kind == "memory"]
    assert t.observe("ct200", memory_only, 101.0) == []  # no update back to "memory"
    [ev] = t.observe("ct200", [], 102.0)
    assert (ev.event, ev.kind, ev.headline) == ("resolve", "cuda_oom", HELD_HEADLINE)


def test_incidents_of_one_alert_each_from_an_older_outbox_merge_into_one() -> None:
    """An outbox written when each alert was an incident: the OOM's three open rows read
    back; the failure still active continues the OOM's (the best explained), the others
    resolve said merged into it."""
    old = IncidentTracker(min_open_s=0, resolve_after_s=0)
    rows = []
    for alert in demo_oom()[2][1]:
        if alert.kind != "auto_restart":
            key = incident_key("ct200", alert.gpu, alert.job, alert.kind)
            fresh = IncidentTracker(min_open_s=0, resolve_after_s=0)
            [ev] = fresh.observe("ct200", [alert], alert.time)
            rows.append(replace(ev, key=key, kind=alert.kind, opened_at=alert.time))
    old.restore(rows, 199.0)
    assert len(old.open) == 4
    still = [a for a in demo_oom()[3][1] if a.kind != "auto_restart"]
    events = old.observe("ct200", still, 200.0)
    merged = [e for e in events if e.event == "resolve"]
    assert {e.key for e in merged} == {
        "ct200/gpu6/drafter/memory",
        "ct200/gpu6/drafter/foreign_process",
        "ct200/gpu6/drafter/oom_death",
    }
    assert {e.resolved_by for e in merged} == {"merged into ct200/gpu6/drafter/cuda_oom"}
    assert [e.event for e in events] == ["resolve"] * 3  # the OOM's goes on: no re-page
    assert list(old.open) == ["ct200/gpu6/drafter/cuda_oom"]
    [ev] = old.observe("ct200", [], 201.0)
    assert (ev.event, ev.key, ev.headline) == (
        "resolve",
        "ct200/gpu6/drafter/cuda_oom",
        HELD_HEADLINE,
    )


def test_the_recording_is_the_one_whose_window_holds_the_incident() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.note_recordings("ct200", [(0.0, 160.0, "/rec/old.jsonl.gz")])
    [held] = t.observe("ct200", [oom()], 100.0)
    assert held.recording == "/rec/old.jsonl.gz" and held.attachments == ("/rec/old.jsonl.gz",)
    t.observe("ct200", [], 101.0)
    # An hour later: that recording is not this incident's; a scheduled one is.
    [later] = t.observe("ct200", [oom("cuda_oom:log:2", at=3700.0)], 3700.0)
    assert later.recording is None and later.attachments == ()
    t.note_recordings("ct200", [(0.0, 160.0, "/rec/old.jsonl.gz"), (3100, 3760, "/rec/new")])
    [resolved] = t.observe("ct200", [], 3701.0)
    assert resolved.recording == "/rec/new" and "flight recording: /rec/new" in resolved.details()


def test_a_person_restart_is_named_as_the_fix() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.observe("ct200", [oom()], 100.0)
    t.note_restart("ct200", "drafter", automatic=False, ok=True, at=110.0)
    [resolved] = t.observe("ct200", [], 111.0)
    assert resolved.resolved_by == "a person's restart"


def test_restored_incidents_continue_or_resolve_after_a_restart_of_gpumon() -> None:
    first = IncidentTracker(min_open_s=0, resolve_after_s=0)
    [ev] = first.observe("ct200", [oom()], 100.0)
    other = replace(ev, key="ct200/gpu2/-/xid", gpu=2, kind="xid")
    later = IncidentTracker(min_open_s=0, resolve_after_s=0)
    later.restore([ev, other], 199.0)
    # The OOM alert is still active after the restart: no new page. The Xid is gone: resolved.
    events = later.observe("ct200", [oom(at=100.0)], 200.0)
    assert [(e.event, e.key) for e in events] == [("resolve", other.key)]


def test_event_json_has_exactly_the_documented_keys() -> None:
    [ev] = IncidentTracker().observe("ct200", [oom()], 100.0)
    data = ev.to_json()
    assert tuple(data) == EVENT_KEYS
    assert data["summary"] == f"[CRITICAL] ct200: {ev.headline}"
    assert ev.headline.startswith("drafter: CUDA OOM on GPU 6")
    assert dt.datetime.fromisoformat(data["opened_at"]).timestamp() == 100.0
    assert data["gpu"] == 6 and data["job"] == "drafter" and data["count"] == 1


def test_an_incident_waits_for_a_running_restart_to_say_how_it_ended() -> None:
    busy = {("ct200", "drafter")}
    t = IncidentTracker(
        min_open_s=0, resolve_after_s=0, restarting=lambda host, job: (host, job) in busy
    )
    t.observe("ct200", [oom()], 100.0)
    assert t.observe("ct200", [], 105.0) == []  # the GPU refilled while the restart verifies
    busy.clear()
    t.note_restart("ct200", "drafter", automatic=True, ok=True, at=108.0)
    [resolved] = t.due(108.5)
    assert (resolved.resolved_by, resolved.action) == ("auto-restart", "auto-restart succeeded")


def test_incidents_of_hosts_no_longer_watched_resolve_at_once() -> None:
    """A reload that drops a host (or a restarted watch without it) must not leave its
    pages open forever: nothing would ever clear them."""
    from gpumon.backends.notify.incidents import NO_LONGER_WATCHED

    # not the minimum open time, nor the settle time: the host is gone
    t = IncidentTracker(min_open_s=600, resolve_after_s=600)
    [kept] = t.observe("ct200", [oom()], 100.0)
    [gone] = t.observe("ct201", [oom(host="ct201")], 100.0)
    [ev] = t.forget_hosts(["ct200"], 101.0)
    assert (ev.event, ev.key, ev.resolved_by) == ("resolve", gone.key, NO_LONGER_WATCHED)
    assert set(t.open) == {kept.key} and t.forget_hosts(["ct200"], 102.0) == []


def test_a_bundle_noted_for_an_incident_is_named_by_its_later_events() -> None:
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    rounds = demo_oom()
    t.observe("ct200", rounds[0][1], 96.0)
    [oomed] = t.observe("ct200", rounds[1][1], 98.0)
    t.note_bundle(oomed.key, "/b/ct200-cuda_oom.tar.gz")
    [resolved] = t.observe("ct200", [], 130.0)
    assert resolved.bundle == "/b/ct200-cuda_oom.tar.gz"
    assert resolved.attachments == ("/b/ct200-cuda_oom.tar.gz",)


def test_other_jobs_gpus_and_kinds_are_incidents_of_their_own() -> None:
    """The dashboard's subjects: another job, a GPU's alerts of no job, and (alerts of
    neither) each kind; two alerts of one such kind page once."""
    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    xid = Alert("xid:2:1", Health.CRITICAL, "xid", "ct200", 2, None, "Xid 79 on GPU 2", 100, 100)
    ecc = replace(xid, key="gpu_health:2", kind="gpu_health", message="GPU 2 ECC errors")
    kill = Alert("host_oom_kill:1", Health.CRITICAL, "host_oom_kill", "ct200", None, None,
                 "oom-kill: python", 100, 100)  # fmt: skip
    again = replace(kill, key="host_oom_kill:2", time=101.0, last_seen=101.0)
    lost = replace(kill, key="host_unreachable", kind="host_unreachable", message="down")
    alerts = [oom(), oom("cuda_oom:log:7", job="target"), xid, ecc, kill, again, lost]
    events = t.observe("ct200", alerts, 102.0)
    assert sorted((e.key, e.count) for e in events) == [
        ("ct200/gpu-/-/host_oom_kill", 2),
        ("ct200/gpu-/-/host_unreachable", 1),
        ("ct200/gpu2/-/xid", 2),
        ("ct200/gpu6/drafter/cuda_oom", 1),
        ("ct200/gpu6/target/cuda_oom", 1),
    ]
    assert all(e.event == "open" for e in events)
