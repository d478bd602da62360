"""Which notifier is told what of one incident (``NotifyHub.publish`` into the outbox, no
delivery): a notifier of critical incidents hears the memory warning's escalation to the
OOM as the incident's opening, ``[CRITICAL]``, not as an update of a warning it never
heard; a notifier told of an incident hears its resolve even when the cause's kind left
its filter; one never told hears no resolve; an incident open before the hub started
(restored from the outbox) keeps its updates as updates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox

KEY = "demo/gpu6/drafter/memory"
WARNING = IncidentEvent(
    "open", KEY, "demo", 6, "drafter", "memory", Health.WARNING,
    "GPU 6 memory 96.2 % used", None, None, 1000.0, 1000.0, None,
    headline="drafter: GPU 6 memory 96.2 % used",
)  # fmt: skip
OOM = dataclasses.replace(
    WARNING,
    event="update",
    kind="cuda_oom",
    severity=Health.CRITICAL,
    cause="torch.OutOfMemoryError: CUDA out of memory.",
    time=1020.0,
    count=2,
    headline="drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)",
    previous=("memory", Health.WARNING, 6),
)
RESOLVED = dataclasses.replace(OOM, event="resolve", time=1100.0, resolved_by="recovered")

ALL = NotifierConfig(name="all", kind="webhook", url="http://127.0.0.1:9/all")
PAGER = dataclasses.replace(ALL, name="pager", min_severity=Health.CRITICAL)
MEMORY = dataclasses.replace(ALL, name="memory", kinds=("memory",))
OOMS = dataclasses.replace(ALL, name="ooms", kinds=("cuda_oom",), min_severity=Health.CRITICAL)


def hub(path: Path) -> NotifyHub:
    settings = NotifySettings(notifiers={n.name: n for n in (ALL, PAGER, MEMORY, OOMS)})
    return NotifyHub(settings, Outbox(path / "outbox.sqlite3"), clock=lambda: 1000.0)


def told(h: NotifyHub, name: str) -> list[str]:
    return [row.event.summary() for row in h.outbox.pending(name)]


def test_each_notifier_hears_the_incident_open_once_and_end(tmp_path: Path) -> None:
    h = hub(tmp_path)
    h.publish([WARNING, OOM, RESOLVED])
    oom = "demo: drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
    warned = "demo: drafter: GPU 6 memory 96.2 % used"
    assert told(h, "all") == [
        f"[WARNING] {warned}",
        f"[CRITICAL, updated] {oom}",
        "[RESOLVED] " + oom,
    ]
    assert told(h, "pager") == [f"[CRITICAL] {oom}", f"[RESOLVED] {oom}"]
    assert told(h, "ooms") == [f"[CRITICAL] {oom}", f"[RESOLVED] {oom}"]
    # told of the warning, not of the OOM (its kind left the filter): the end still comes
    assert told(h, "memory") == [f"[WARNING] {warned}", f"[RESOLVED] {oom}"]
    [opened] = [row.event for row in h.outbox.pending("pager")][:1]
    assert opened.event == "open" and opened.previous is None  # no old labels to end there
    h.outbox.close()


def test_a_notifier_never_told_hears_no_resolve(tmp_path: Path) -> None:
    h = hub(tmp_path)
    h.publish([WARNING, dataclasses.replace(WARNING, event="resolve", time=1050.0)])
    assert told(h, "pager") == [] and told(h, "ooms") == []
    assert len(told(h, "all")) == 2 and len(told(h, "memory")) == 2
    h.outbox.close()


def test_an_incident_open_before_the_hub_keeps_its_updates(tmp_path: Path) -> None:
    first = hub(tmp_path)
    first.publish([WARNING])
    first.outbox.close()
    again = hub(tmp_path)  # gpumon restarted: the incident is restored, who heard it is not
    again.publish([OOM])
    assert [row.event.event for row in again.outbox.pending("pager")] == ["update"]
    again.publish([RESOLVED])
    assert [row.event.event for row in again.outbox.pending("pager")] == ["update", "resolve"]
    # The key opens again later: a new incident, opened where it was not heard.
    again.publish([dataclasses.replace(OOM, time=2000.0)])
    assert [row.event.event for row in again.outbox.pending("pager")][-1] == "open"
    again.outbox.close()


def test_an_incident_that_ends_while_the_watch_delivers_opens_anew_after(tmp_path: Path) -> None:
    h = hub(tmp_path)
    h.publish([WARNING, OOM])  # the dashboard delivers: "pager" hears the OOM's opening
    standing_by = True
    h.standby = lambda: standing_by  # a `gpumon watch` starts and delivers
    h.publish([RESOLVED])
    standing_by = False  # the watch is gone; the key opens again: a new incident
    h.publish([dataclasses.replace(WARNING, time=2000.0), dataclasses.replace(OOM, time=2020.0)])
    assert [row.event.event for row in h.outbox.pending("pager")] == ["open", "open"]
    assert [row.event.event for row in h.outbox.pending("all")] == ["open", "update"] * 2
    h.outbox.close()
