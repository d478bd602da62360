"""The one severity (``model.Health``) and what each output says for it, in one place:
the words every public output spells (JSON, the exporter's label, the webhook, PagerDuty,
Alertmanager), ``check``'s exit status, ntfy's priority, the dashboard's colour role."""

from __future__ import annotations

import json

from gpumon.backends.model import CheckCode, Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.tui.views.gpu_cells import Role, health_role

OK, INFO, WARNING, CRITICAL = Health.OK, Health.INFO, Health.WARNING, Health.CRITICAL


def test_ordered_by_how_bad_not_as_words() -> None:
    assert sorted([CRITICAL, OK, WARNING, INFO]) == [OK, INFO, WARNING, CRITICAL]
    assert max(WARNING, CRITICAL) is CRITICAL and Health.worst(INFO, WARNING) is WARNING
    assert Health.worst() is OK and WARNING > INFO > OK and not CRITICAL < WARNING
    assert [h.alarming for h in Health] == [False, False, True, True]


def test_every_output_says_it_as_before_and_a_note_as_info() -> None:
    assert [h.value for h in Health] == ["ok", "info", "warning", "critical"]
    assert [h.check_code for h in Health] == [
        CheckCode.OK,
        CheckCode.OK,  # a note never fails the check
        CheckCode.WARNING,
        CheckCode.CRITICAL,
    ]
    assert [int(c) for c in CheckCode] == [0, 1, 2, 3]
    assert [h.pagerduty for h in Health] == ["info", "info", "warning", "critical"]
    assert [h.ntfy for h in Health] == [
        ("3", "white_check_mark"),
        ("3", "information_source"),
        ("4", "warning"),
        ("5", "rotating_light"),
    ]
    assert [health_role(h) for h in Health] == [Role.OK, Role.MUTED, Role.WARNING, Role.CRITICAL]


def test_a_notification_keeps_its_severity_s_word_through_json() -> None:
    """The webhook JSON and the outbox say the word; an event read back is typed again."""
    ev = IncidentEvent(
        "update", "h/gpu6/-/memory", "h", 6, None, "cuda_oom", CRITICAL, "OOM",
        None, None, 1000.0, 1020.0, None, previous=("memory", WARNING, 6),
    )  # fmt: skip
    said = json.loads(json.dumps(ev.to_json()))
    assert said["severity"] == "critical" and type(ev.to_json()["severity"]) is str
    stored = json.loads(json.dumps({**ev.to_json(), "previous": ["memory", "warning", 6]}))
    back = IncidentEvent(
        **{k: stored[k] for k in ("event", "key", "host", "gpu", "job", "kind", "severity")},
        cause="OOM", action=None, resolved_by=None, opened_at=1000.0, time=1020.0,
        recording=None, previous=stored["previous"],
    )  # fmt: skip
    assert back.severity is CRITICAL and back.previous == ("memory", WARNING, 6)
    assert back.summary().startswith("[CRITICAL, updated] h: ")
