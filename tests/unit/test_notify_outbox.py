"""The outbox: per-host order, grouping of due rows, failures and retries, and what
survives a restart (the file, the open incidents)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpumon.backends.model import Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.paths import outbox_file


def event(n: int, host: str = "ct200", kind: str = "event") -> IncidentEvent:
    return IncidentEvent(
        event="open",
        key=f"{host}/gpu{n}/-/{kind}",
        host=host,
        gpu=n,
        job=None,
        kind=kind,
        severity=Health.CRITICAL,
        cause=f"alert {n}",
        action=None,
        resolved_by=None,
        opened_at=100.0 + n,
        time=100.0 + n,
        recording=None,
    )


def test_the_outbox_lives_in_the_xdg_state_dir(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), "HOME": "/nonexistent"}
    assert outbox_file(env) == tmp_path / "gpumon" / "outbox.sqlite3"


def test_rows_go_out_oldest_first_and_a_hosts_due_rows_as_one_message(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    for n in range(3):
        box.add("hook", event(n), now=10.0, not_before=10.0)
    box.add("hook", event(9, host="gpu2"), now=10.0, not_before=10.0)
    box.add("other", event(5), now=10.0, not_before=10.0)
    rows, _ = box.due_batch("hook", 10.0)
    assert [r.event.gpu for r in rows] == [0, 1, 2]  # one host's rows, in order
    box.mark_sent("hook", [r.id for r in rows], 11.0)
    rows, _ = box.due_batch("hook", 11.0)
    assert [(r.host, r.event.gpu) for r in rows] == [("gpu2", 9)]
    box.mark_sent("hook", [r.id for r in rows], 12.0)
    assert box.due_batch("hook", 12.0) == ([], None)
    assert [r.event.gpu for r in box.pending()] == [5]  # the other notifier's row waits


def test_a_row_held_for_its_group_window_does_not_block_other_hosts(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    box.add("hook", event(1), now=10.0, not_before=40.0)  # grouped: waits until 40
    box.add("hook", event(2, host="gpu2"), now=11.0, not_before=11.0)
    rows, _ = box.due_batch("hook", 12.0)
    assert [r.host for r in rows] == ["gpu2"]
    box.mark_sent("hook", [r.id for r in rows], 12.0)
    assert box.due_batch("hook", 13.0) == ([], 40.0)  # nothing due; the next row at 40


def test_failures_are_recorded_and_everything_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    box = Outbox(path)
    ids = [box.add("hook", event(n), now=10.0, not_before=10.0) for n in range(2)]
    assert box.mark_failed("hook", ids, "cannot reach it", now=11.0, retry_at=13.0) == 1
    assert box.mark_failed("hook", ids, "still down", now=13.0, retry_at=17.0) == 2
    ev = event(7)
    box.save_incident(ev)
    box.save_incident(replace(event(8), event="resolve"))  # a resolve forgets the incident
    box.close()
    box = Outbox(path)
    assert box.retry_at("hook") == 17.0 and box.failures("hook") == 2
    assert [r.attempts for r in box.pending("hook")] == [2, 2]
    [status] = box.status()
    assert status["pending"] == 2 and status["last_error"] == "still down"
    assert box.open_incidents() == [ev]
    box.mark_sent("hook", ids, 18.0)
    assert box.failures("hook") == 0 and box.retry_at("hook") == 0.0
    assert [r.event.gpu for r in box.sent("hook")] == [1, 0]  # newest first


def test_a_backlog_goes_out_in_messages_of_at_most_batch_max(tmp_path: Path) -> None:
    from gpumon.backends.notify.outbox import BATCH_MAX

    box = Outbox(tmp_path / "o.sqlite3")
    for n in range(BATCH_MAX + 5):
        box.add("hook", event(n), now=10.0, not_before=10.0)
    rows, _ = box.due_batch("hook", 10.0)
    assert len(rows) == BATCH_MAX and rows[0].event.gpu == 0
    box.mark_sent("hook", [r.id for r in rows], 11.0)
    rows, _ = box.due_batch("hook", 11.0)
    assert [r.event.gpu for r in rows] == list(range(BATCH_MAX, BATCH_MAX + 5))


def test_rows_of_the_key_per_alert_scheme_read_back_and_merge_into_one_incident(
    tmp_path: Path,
) -> None:
    """A file written by a gpumon that opened one incident per alert (no ``previous`` in
    its JSON): its open incidents and pending rows read back; the failure's alerts
    continue its best-explained incident (the OOM's) and the others resolve, said merged
    into it."""
    import json
    import sqlite3
    from dataclasses import asdict

    from gpumon.backends.alerts.store import Alert
    from gpumon.backends.config.notify import NotifierConfig
    from gpumon.backends.model import Health
    from gpumon.backends.notify.incidents import IncidentTracker
    from gpumon.backends.notify.notifiers import render

    path = tmp_path / "outbox.sqlite3"
    Outbox(path).close()  # the schema
    kinds = {"memory": 96.0, "cuda_oom": 98.0, "oom_death": 99.0}
    old = [
        replace(event(6, kind=kind), key=f"ct200/gpu6/drafter/{kind}", job="drafter", opened_at=t)
        for kind, t in kinds.items()
    ]
    rows = [{k: v for k, v in asdict(ev).items() if k != "previous"} for ev in old]
    db = sqlite3.connect(path)
    with db:
        for ev, row in zip(old, rows, strict=True):
            db.execute(
                "INSERT INTO incidents (key, event) VALUES (?, ?)", (ev.key, json.dumps(row))
            )
        db.execute(
            "INSERT INTO outbox (notifier, host, created, not_before, event) VALUES (?,?,?,?,?)",
            ("am", "ct200", 99.0, 99.0, json.dumps(rows[1])),
        )
    db.close()
    box = Outbox(path)
    restored = box.open_incidents()
    assert sorted(e.key for e in restored) == sorted(e.key for e in old)
    [pending] = box.pending("am")
    assert pending.event == old[1] and pending.event.previous is None
    [req] = render(NotifierConfig(name="am", kind="alertmanager", url="http://127.0.0.1:9"),
                   [pending.event], 100.0, {})  # fmt: skip
    assert len(json.loads(req.body)) == 1

    t = IncidentTracker(min_open_s=0, resolve_after_s=0)
    t.restore(restored, 199.0)
    alerts = [
        Alert(f"{kind}:6", Health.CRITICAL, kind, "ct200", 6, "drafter", kind, at, at)
        for kind, at in kinds.items()
    ]
    events = t.observe("ct200", alerts, 200.0)
    for ev in events:
        box.save_incident(ev)
    assert sorted((e.event, e.key, e.resolved_by) for e in events) == [
        ("resolve", f"ct200/gpu6/drafter/{kind}", "merged into ct200/gpu6/drafter/cuda_oom")
        for kind in ("memory", "oom_death")
    ]
    [kept] = box.open_incidents()
    assert kept.key == "ct200/gpu6/drafter/cuda_oom"
    update = kept.with_event("update", 201.0, previous=("memory", "warning", 6))
    box.save_incident(update)
    box.close()
    assert Outbox(path).open_incidents() == [update]  # ``previous`` survives a reopen
