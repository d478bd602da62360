"""The record keeps its story (issue 36 point 9): after a restart, the incident's headline
stays its cause, the CUDA OOM, though the restart ended its alert and CT 201's jupyter,
still on GPU 6, is the only alert left active; the restart is said in its detail and its
bundle's incident.txt, and ``r`` is no longer offered (done); what the job does after the
restart is a new incident."""

from __future__ import annotations

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.facts import AlertFacts, Held, Holder
from gpumon.backends.alerts.incident import Fix, incidents
from gpumon.backends.bundle.timeline import timeline_json, timeline_text
from gpumon.backends.model import Health
from gpumon.backends.sim.job import oom_message
from gpumon.tui.views.alert_detail import DetailView, detail_plain, detail_rows

T0 = 1_800_000_000.0
HELD = "GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)
RESTARTED = "restarted by root at 05:40:13 (new PID 2433201)"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def restarted_engine() -> tuple[AlertEngine, Clock]:
    """The drafter's OOM on GPU 6 beside CT 201's jupyter, then its restart as the session's
    ``JobWatch`` records it: the log's alerts cleared, the record raised ended."""
    clock = Clock()
    engine = AlertEngine("demo", AlertRules(), clock=clock)
    engine.on_log_lines("/root/drafter.log", ["step 1"], job="drafter", gpus=(5, 6, 7))
    jupyter = Held(6144.0, Holder("201", 3187442, "jupyter-lab"))
    engine.raise_alert(
        "foreign_process",
        Health.WARNING,
        HELD,
        gpu=6,
        key="foreign_process:6",
        facts=AlertFacts(held=jupyter, names_gpu=True),
    )
    clock.t += 28
    log = ["CUDA_VISIBLE_DEVICES=5,6,7", "Traceback (most recent call last):", oom_message()]
    engine.on_log_lines("/root/drafter.log", log)
    clock.t += 60
    engine.clear("log:/root/drafter.log")
    engine.raise_alert(
        "job_restarted", Health.INFO, RESTARTED, job="drafter", at=clock.t, active=False
    )
    return engine, clock


def test_after_a_restart_the_headline_is_still_the_oom_and_the_restart_its_detail() -> None:
    engine, clock = restarted_engine()
    assert [a.kind for a in engine.active()] == ["foreign_process"]
    (incident,) = incidents(engine.history())
    assert incident.cause.kind == "cuda_oom" and incident.headline == HEADLINE
    assert incident.severity is Health.WARNING and incident.active  # the jupyter is still there
    assert [a.message for a in incident.restarts] == [RESTARTED]
    # restarted: stopping the holder is still offered, the restart no longer is
    assert incident.fixes == (Fix("K", "stop jupyter-lab"),)
    text = detail_plain(detail_rows(DetailView(incident, clock.t)))
    lines = text.splitlines()
    assert lines[0].strip() == HEADLINE and lines[2].strip() == RESTARTED
    assert text.count(RESTARTED) == 1  # said under the headline, not again as evidence


def test_the_bundles_incident_txt_leads_with_the_cause() -> None:
    engine, _ = restarted_engine()
    (incident,) = incidents(engine.history())
    text = timeline_text(timeline_json(incident, []))
    first, second = text.splitlines()[:2]
    assert first == f"demo: {HEADLINE}"
    assert second == RESTARTED


def test_what_the_job_does_after_its_restart_is_a_new_incident() -> None:
    engine, clock = restarted_engine()
    clock.t += 30
    engine.on_job_condition(
        "job_stalled", "drafter", Health.CRITICAL, "drafter stalled: no step for 3 min", clock.t
    )
    found = incidents(engine.history())
    assert [i.cause.kind for i in found] == ["job_stalled", "cuda_oom"]
    assert found[0].restarts == () and found[1].headline == HEADLINE
    # a restart with no incident before it opens no story of its own for later alerts
    lone = AlertEngine("demo", AlertRules(), clock=clock)
    lone.raise_alert("job_restarted", Health.INFO, RESTARTED, job="drafter", active=False)
    clock.t += 5
    lone.raise_alert("cuda_oom", Health.CRITICAL, oom_message(), gpu=6, job="drafter")
    assert [i.cause.kind for i in incidents(lone.history())] == ["cuda_oom", "job_restarted"]
