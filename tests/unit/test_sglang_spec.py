"""``spec_accept_low`` and the speculative-decoding numbers (issue 25.5): read from
SGLang's page (``spec_accept_length`` / ``spec_accept_rate``) or its decode lines
(``accept len:`` / ``accept rate:``), shown in ``snapshot --json``, and a warning when the
accept length stays below ``spec_accept_min`` for 60 s while the server decodes. The
simulator's server of GPU 2 in ``hang`` (accept length 1.04) is the real format."""

from __future__ import annotations

from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import SglangConfig
from gpumon.backends.model import Health
from gpumon.backends.parsers.sglang import SglangScrape, parse_sglang_metrics
from gpumon.backends.sim.scenario import SimSettings, wall_time
from gpumon.backends.sim.sglang_model import (
    LOG_INTERVAL_S,
    SPEC_ACCEPT_LENGTH,
    SPEC_INDEX,
    UPTIME_AT_T0,
    log_lines,
    metrics_text,
)
from gpumon.backends.workloads.watch import Workloads

SETTINGS = SimSettings(scenario="hang")
STARTED = -UPTIME_AT_T0
PORT = 30000 + SPEC_INDEX


def _host(minimum: float = 1.5) -> Workloads:
    sglang = SglangConfig(ports=(PORT,), spec_accept_min=minimum)
    return Workloads(HostConfig(name="ct200", kind="ssh", sglang=sglang))


def _run(workloads: Workloads, start: float, end: float) -> list[tuple[float, bool]]:
    """Scrape the drafter server every 2 s of scenario time; (t, warned) each time."""
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[PORT]
    out = []
    t = start
    while t <= end:
        page = metrics_text(SETTINGS, SPEC_INDEX, t, STARTED)
        now = wall_time(SETTINGS, t)
        tracker.observe_http(200, page, now)
        workloads.judge_spec(engine, now)
        out.append((t, any(a.kind == "spec_accept_low" for a in engine.active())))
        t += 2.0
    return out


def test_an_accept_length_of_1_04_shows_and_is_warned_after_60_s() -> None:
    workloads = _host()
    seen = _run(workloads, 10.0, 100.0)
    first = next(t for t, warned in seen if warned)
    assert 70.0 <= first <= 74.0  # low since the second scrape (the first with a rate)
    snap = workloads.sglang[PORT].snapshot_json()
    assert (snap["spec_accept_length"], snap["spec_accept_rate"]) == (1.04, 0.01)


def test_the_warning_says_the_numbers() -> None:
    workloads = _host()
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[PORT]
    for t in range(10, 90, 2):
        now = wall_time(SETTINGS, t)
        tracker.observe_http(200, metrics_text(SETTINGS, SPEC_INDEX, t, STARTED), now)
        workloads.judge_spec(engine, now)
    [alert] = engine.active()
    assert (alert.kind, alert.severity) == ("spec_accept_low", Health.WARNING)
    assert alert.message.startswith(
        f"sglang :{PORT} drafter tokens rejected: accept length 1.04 (accept rate 1%) for "
    )


def test_above_the_minimum_no_drafter_or_idle_is_not_warned() -> None:
    """Each a false positive: fails if the rule fires."""
    assert not any(w for _, w in _run(_host(minimum=1.0), 10.0, 150.0))  # 1.04 >= 1.0
    workloads = _host()
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[PORT]
    for t in range(0, 200, 5):  # no drafter: SGLang exports 0.0
        page = SglangScrape(running=8.0, decode_tokens=1000.0 * t, spec_accept_length=None)
        tracker.observe(page, float(t))
        workloads.judge_spec(engine, float(t))
    for t in range(200, 400, 5):  # idle: the gauge keeps its last batch's 1.04
        page = SglangScrape(running=0.0, decode_tokens=200000.0, spec_accept_length=1.04)
        tracker.observe(page, float(t))
        workloads.judge_spec(engine, float(t))
    assert engine.active() == [] and engine.history() == []


def test_the_log_gives_the_numbers_and_how_long_they_were_low() -> None:
    """Metrics off: ``accept len:`` / ``accept rate:`` of the decode lines; a log read
    from its tail says the accept length was low for its last minutes."""
    workloads = _host()
    tracker = workloads.sglang[PORT]
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker.observe_http(404, "", wall_time(SETTINGS, 148.0))
    due = int((150.0 - STARTED) // LOG_INTERVAL_S)
    now = wall_time(SETTINGS, 150.0)
    for epoch in range(due - 40, due + 1):
        for line in log_lines(SETTINGS, SPEC_INDEX, epoch, STARTED):
            tracker.observe_log_line(line, now)
    assert (tracker.spec_accept_length, tracker.spec_accept_rate) == (1.04, 0.01)
    workloads.judge_spec(engine, now)
    assert [a.kind for a in engine.active()] == ["spec_accept_low"]


def test_retract_lines_are_counted_in_both_wordings() -> None:
    tracker = _host().sglang[PORT]
    lines = [
        "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.1474 -> 0.1845",
        "[2026-08-25 14:22:03] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 14592, #new_token_ratio: 0.0980 -> 0.5342",
        "[2026-08-25 14:22:04] Decode batch, #running-req: 3, #retracted_reqs: 9",  # not one
    ]
    for line in lines:
        tracker.observe_log_line(line, 1.0)
    assert tracker.snapshot_json()["retracted_in_log"] == 4


def test_a_drafter_whose_every_draft_is_rejected_reads_rate_0_not_no_drafter() -> None:
    """From SGLang 0.5.11 spec_accept_rate is accepted drafts / proposed drafts: 0.0 with
    an accept length of 1.0 (the bonus token only) is a drafter rejecting everything;
    both at 0.0 is a server without one (docs/formats.md 6.13)."""
    page = metrics_text(SETTINGS, SPEC_INDEX, 50.0, STARTED)
    rejected = page.replace("} 1.04\n", "} 1.0\n").replace("} 0.01\n", "} 0.0\n")
    assert rejected != page
    scrape = parse_sglang_metrics(rejected)
    assert (scrape.spec_accept_length, scrape.spec_accept_rate) == (1.0, 0.0)
    plain = parse_sglang_metrics(metrics_text(SETTINGS, 0, 50.0, STARTED))
    assert (plain.spec_accept_length, plain.spec_accept_rate) == (None, None)


def test_verify_steps_are_counted_and_their_rate_follows_the_decode_rate() -> None:
    """``spec_verify_calls_total`` (0.5.13+): the count as the page says it and its rate,
    which for a drafter accepting 1.04 tokens a step is the decode rate / 1.04."""
    workloads = _host()
    tracker = workloads.sglang[PORT]
    tracker.observe_http(200, metrics_text(SETTINGS, SPEC_INDEX, 10.0, STARTED), 1000.0)
    first = tracker.snapshot_json()
    assert first["spec_verify_calls_total"] is not None and first["spec_verify_per_s"] is None
    _run(workloads, 12.0, 40.0)
    snap = tracker.snapshot_json()
    page = parse_sglang_metrics(metrics_text(SETTINGS, SPEC_INDEX, 40.0, STARTED))
    assert snap["spec_verify_calls_total"] == round(page.spec_verify_calls or -1)
    assert snap["spec_verify_per_s"] is not None and snap["gen_tokens_per_s"] is not None
    assert abs(snap["spec_verify_per_s"] * SPEC_ACCEPT_LENGTH / snap["gen_tokens_per_s"] - 1) < 0.02
    plain = Workloads(HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=(30000,))))
    for t in (10.0, 12.0, 14.0):
        plain.sglang[30000].observe_http(
            200, metrics_text(SETTINGS, 0, t, STARTED), wall_time(SETTINGS, t)
        )
    assert plain.sglang[30000].snapshot_json()["spec_verify_per_s"] is None
