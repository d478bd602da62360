"""SGLang /metrics: parsing against the fixtures and hostile text, and the tracker's rates.

Log lines are in test_sglang_log.py, the simulated servers over real HTTP in
test_sglang_sim.py."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.parsers import (
    METRICS_LINE_FILTER,
    SglangParseError,
    filter_metrics_text,
    histogram_quantile,
    parse_sglang_metrics,
)
from gpumon.backends.sim import UPTIME_AT_T0, SimSettings, metrics_text
from gpumon.backends.workloads import SglangTracker, sglang_totals

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sglang"
BUSY = (FIXTURES / "metrics_busy.prom").read_text(encoding="utf-8")
IDLE = (FIXTURES / "metrics_idle.prom").read_text(encoding="utf-8")
SCHED = 'engine_type="unified",model_name="M",moe_ep_rank="0",pp_rank="0"'
SNAPSHOT_KEYS = {
    "port",
    "up",
    "model",
    "version",
    "parallel",
    "gen_tokens_per_s",
    "gen_tokens_per_s_source",
    "running",
    "queued",
    "token_usage",
    "cache_hit_rate",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_verify_calls_total",
    "spec_verify_per_s",
    "retracted_reqs",
    "retracted_requests_total",
    "paused_reqs",
    "aborted_requests_total",
    "retracted_in_log",
    "idle",
}


# ---------------------------------------------------------------------- the fixtures


def test_busy_fixture_parses_to_its_numbers() -> None:
    s = parse_sglang_metrics(BUSY)
    assert s.model == "Qwen/Qwen3-8B"
    assert (s.running, s.queued) == (72.0, 8.0)
    assert s.gen_throughput == 1183.46
    assert s.token_usage == pytest.approx(0.8710013222603693)  # unrounded full_token_usage
    assert (s.used_tokens, s.max_total_tokens) == (300377.0, 344864.0)
    assert s.decode_tokens == 11634512.0
    assert (s.prefill_compute_tokens, s.prefill_cache_tokens) == (26412960.0, 18388225.0)
    assert s.generation_tokens == 1.088362e07 + 736270.0  # summed over is_streaming
    # no drafter: SGLang's 0.0 defaults are "not reported"; KV pressure and aborts read
    assert (s.spec_accept_length, s.spec_accept_rate) == (None, None)
    assert (s.retracted, s.retracted_total, s.paused, s.aborted_total) == (0.0, 6.0, 0.0, 37.0)
    assert s.effective_hit_tokens == 18371602.0 and s.effective_input_tokens == 26398114.0
    assert s.ttft is not None and s.ttft.count == 17913.0 + 1207.0
    assert s.ttft.buckets[0] == (0.1, 868.0 + 53.0) and s.ttft.buckets[-1][0] == math.inf
    assert s.itl is not None and s.itl.count == 1.163454e07 and s.itl.sum == 566602.098


def test_idle_fixture_reads_zero_load_and_keeps_capacity() -> None:
    s = parse_sglang_metrics(IDLE)
    assert (s.running, s.queued, s.gen_throughput, s.token_usage) == (0.0, 0.0, 0.0, 0.0)
    assert s.max_total_tokens == 344864.0
    assert s.decode_tokens == 11689405.0  # counters kept going after the busy scrape
    assert s.generation_tokens == 11669261.0


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    ttft = parse_sglang_metrics(BUSY).ttft
    assert ttft is not None
    # rank 0.5 * 19120 = 9560 lies in (0.6, 0.8]: 9254 below, 11226 at the top
    assert histogram_quantile(0.5, ttft.buckets) == pytest.approx(0.6 + 0.2 * 306 / 1972)
    buckets = ((1.0, 0.0), (2.0, 10.0), (math.inf, 20.0))
    assert histogram_quantile(0.25, buckets) == pytest.approx(1.5)
    assert histogram_quantile(0.99, buckets) == 2.0  # in the +Inf bucket: highest bound
    assert histogram_quantile(0.5, ((1.0, 0.0), (math.inf, 0.0))) is None  # nothing observed
    assert histogram_quantile(0.5, ((1.0, 4.0), (2.0, 8.0))) is None  # no +Inf bucket
    assert histogram_quantile(0.5, ((1.0, 4.0), (math.inf, 4.0))) == pytest.approx(0.5)


def test_underscore_prefix_reads_the_same() -> None:
    assert parse_sglang_metrics(BUSY.replace("sglang:", "sglang_")) == parse_sglang_metrics(BUSY)


def test_other_tp_ranks_are_dropped_and_dp_ranks_summed() -> None:
    text = (
        f'sglang:num_running_reqs{{{SCHED},tp_rank="0",dp_rank="0"}} 10.0\n'
        f'sglang:num_running_reqs{{{SCHED},tp_rank="0",dp_rank="1"}} 5.0\n'
        f'sglang:num_running_reqs{{{SCHED},tp_rank="1",dp_rank="0"}} 10.0\n'
        f'sglang:num_queue_reqs{{{SCHED},tp_rank="0"}} NaN\n'
    )
    s = parse_sglang_metrics(text)
    assert s.running == 15.0
    assert s.queued is None  # NaN is absent, not 0
    assert s.decode_tokens is None and s.ttft is None  # not in the text: None
    assert s.model == "M"


def test_filter_keeps_only_the_wanted_lines_and_parses_the_same() -> None:
    kept = filter_metrics_text(BUSY)
    assert "# HELP" not in kept and "http_requests" not in kept and "queue_time" not in kept
    assert kept.count("\n") == 95  # 27 gauge/counter samples + 68 histogram lines
    assert "cache_hit_rate" not in kept  # the unreliable gauge is not even parsed
    rx = re.compile(METRICS_LINE_FILTER)  # what the agent applies line by line
    by_agent = "".join(ln + "\n" for ln in BUSY.splitlines() if rx.match(ln))
    assert by_agent == kept
    assert parse_sglang_metrics(kept) == parse_sglang_metrics(BUSY)
    light = parse_sglang_metrics(BUSY, latency=False)
    assert light.ttft is None and light.itl is None and light.running == 72.0


# ------------------------------------------------------------------ bad text: clear errors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello world\n", "no SGLang metrics"),
        ("<html><body><h1>502 Bad Gateway</h1></body></html>\n", "no SGLang metrics"),
        ("", "no SGLang metrics"),
        ("\x00\xff\ufffd garbage {{{ \n", "no SGLang metrics"),
        (BUSY[: BUSY.index("sglang:num_queue_reqs{") + 40], "truncated"),
        (f'sglang:num_running_reqs{{{SCHED},tp_rank="0"}} abc\n', "invalid Prometheus text"),
        ("sglang:num_running_reqs{" + SCHED + ',tp_rank="0} 7\n', "invalid Prometheus text"),
        (f"sglang:num_running_reqs{{{SCHED}}} 1.0\n" * 2, "repeated"),
    ],
)
def test_bad_text_is_a_clear_parse_error(text: str, message: str) -> None:
    with pytest.raises(SglangParseError, match=message):
        parse_sglang_metrics(text)


def test_text_cut_at_a_line_boundary_loses_families_without_faking_zeros() -> None:
    cut = BUSY[
        : BUSY.index('sglang:inter_token_latency_seconds_bucket{engine_type="unified",le="0.1"')
    ]
    s = parse_sglang_metrics(cut)
    assert s.itl is None  # no +Inf bucket: incomplete, not a histogram of zeros
    assert s.decode_tokens is None and s.generation_tokens is None  # after the cut
    assert s.running == 72.0 and s.ttft is not None


@settings(max_examples=300)
@given(st.text())
def test_metrics_parser_raises_only_its_own_error_on_any_text(text: str) -> None:
    with contextlib.suppress(SglangParseError):
        parse_sglang_metrics(text)


LINE_PARTS = st.sampled_from(
    [
        "sglang:num_running_reqs",
        "sglang_realtime_tokens_total",
        "sglang:token_usage",
        "{",
        "}",
        'mode="decode"',
        'le="+Inf"',
        "=",
        ",",
        '"',
        " ",
        "1.5",
        "NaN",
        "-3",
        "\n",
        "#",
        "_bucket",
    ]
)


@settings(max_examples=300)
@given(st.lists(LINE_PARTS, max_size=30))
def test_metrics_parser_survives_near_valid_text(parts: list[str]) -> None:
    try:
        s = parse_sglang_metrics("".join(parts) + "\n")
    except SglangParseError:
        return
    assert s.samples > 0


# ---------------------------------------------------------------------------- the tracker


def test_rates_need_two_scrapes_and_come_from_counter_deltas() -> None:
    tr = SglangTracker(30000)
    assert tr.snapshot_json() == dict.fromkeys(SNAPSHOT_KEYS, None) | {"port": 30000}
    tr.observe_text(BUSY, 100.0)
    first = tr.snapshot_json()
    assert first["up"] is True and first["running"] == 72 and first["queued"] == 8
    assert first["gen_tokens_per_s"] is None  # counters present: no rate from one scrape
    assert first["cache_hit_rate"] is None and first["ttft_p50_s"] is None
    tr.observe_text(IDLE, 160.0)
    snap = tr.snapshot_json()
    assert set(snap) == SNAPSHOT_KEYS
    assert snap["gen_tokens_per_s"] == pytest.approx((11689405 - 11634512) / 60, abs=0.1)
    # realtime_tokens_total: 44646 cached of 44646 + 58570 prompt tokens, not the 0.0 gauge
    assert snap["cache_hit_rate"] == pytest.approx(44646 / (44646 + 58570), abs=1e-4)
    assert snap["itl_p50_s"] == pytest.approx(0.04 + 0.02 * 1837.5 / 12880, abs=1e-5)
    assert snap["ttft_p50_s"] is None  # the fixtures' TTFT buckets go down: not a window
    assert (snap["running"], snap["queued"], snap["token_usage"]) == (0, 0, 0.0)


def test_gauge_is_the_fallback_only_without_counters() -> None:
    tr = SglangTracker(30000)
    tr.observe_text(f'sglang:gen_throughput{{{SCHED},tp_rank="0"}} 1183.46\n', 1.0)
    assert tr.gen_tokens_per_s == 1183.46


def test_counter_reset_is_a_restart_not_a_negative_rate() -> None:
    tr = SglangTracker(30000)
    tr.observe_text(IDLE, 0.0)
    tr.observe_text(BUSY, 1.0)  # every counter went down: the server restarted
    assert tr.restarts == 1 and tr.gen_tokens_per_s is None and tr.cache_hit_rate is None
    tr.observe_text(IDLE, 3.0)  # two seconds after the restart: a rate again
    assert tr.gen_tokens_per_s is not None and tr.gen_tokens_per_s > 0


def test_down_keeps_last_values_stale_and_recovery_starts_rates_over() -> None:
    tr = SglangTracker(30001)
    tr.observe_text(BUSY, 0.0)
    tr.observe_text(IDLE, 60.0)
    tr.observe_http(None, "", 61.0, "ConnectionRefusedError: [Errno 111] Connection refused")
    snap = tr.snapshot_json()
    assert snap["up"] is False and tr.stale and "refused" in (tr.error or "")
    assert snap["gen_tokens_per_s"] is not None and snap["model"] == "Qwen/Qwen3-8B"
    tr.observe_http(200, BUSY, 62.0)
    assert tr.up is True and not tr.stale and tr.error is None
    assert tr.gen_tokens_per_s is None  # one scrape since coming back


def test_http_404_means_metrics_off_and_log_lines_take_over() -> None:
    tr = SglangTracker(30003)
    tr.observe_http(404, '{"detail":"Not Found"}', 0.0)
    assert tr.up is True and tr.metrics_enabled is False and "--enable-metrics" in (tr.error or "")
    used = [tr.observe_log_line(ln, 1.0) for ln in (FIXTURES / "server_decode.log").open()]
    assert sum(used) == 25  # the 13 decode and 12 prefill lines of the fixture
    snap = tr.snapshot_json()
    assert (snap["running"], snap["queued"], snap["gen_tokens_per_s"]) == (91, 44, 1139.02)
    assert snap["token_usage"] == 0.93
    assert snap["cache_hit_rate"] is not None and 0.3 < snap["cache_hit_rate"] < 0.7


def test_log_lines_are_ignored_while_metrics_arrive() -> None:
    tr = SglangTracker(30000)
    tr.observe_text(BUSY, 0.0)
    assert not tr.observe_log_line(
        "Decode batch, #running-req: 3, gen throughput (token/s): 1.00", 1.0
    )
    assert tr.running == 72.0


def test_parse_error_keeps_values_and_says_why() -> None:
    tr = SglangTracker(30000)
    tr.observe_text(BUSY, 0.0)
    assert not tr.observe_text(BUSY[:-5], 1.0)
    assert tr.stale and "truncated" in (tr.error or "") and tr.running == 72.0


def test_totals_sum_servers_that_report() -> None:
    a, b, down, never = (SglangTracker(p) for p in (30000, 30001, 30002, 30003))
    for tr in (a, b, down):
        tr.observe_text(BUSY, 0.0)
        tr.observe_text(IDLE, 60.0)
    a.observe_text(BUSY.replace("} 72.0\n", "} 70.0\n"), 61.0)  # counters reset: no rate
    down.mark_down(62.0, "HTTP 503")
    totals = sglang_totals([a, b, down, never])
    assert (totals.servers, totals.up) == (4, 2)
    assert totals.running == 70 and totals.queued == 8
    assert totals.gen_tokens_per_s == pytest.approx((11689405 - 11634512) / 60)  # b only
    assert totals.token_usage == pytest.approx(300377 / (2 * 344864))
    assert sglang_totals([never]).gen_tokens_per_s is None
    assert set(totals.to_json()) >= {"gen_tokens_per_s", "running", "queued", "token_usage"}


def test_no_counter_rate_over_less_than_two_seconds() -> None:
    """A scrape's time is its request's midpoint: over half a second, a quarter second of
    answer delay on a loaded target is a 50 % error, so the first rate waits for a span
    of two seconds (over real SGLang 0.5.18 counters, BUSY then IDLE pages)."""
    tr = SglangTracker(30000)
    tr.observe_text(BUSY, 0.0)
    tr.observe_text(IDLE, 0.5)
    tr.observe_text(IDLE, 1.0)
    assert tr.gen_tokens_per_s is None and tr.gen_tokens_per_s_source is None
    tr.observe_text(IDLE, 2.0)
    assert tr.gen_tokens_per_s is not None and tr.gen_tokens_per_s > 0
    assert tr.gen_tokens_per_s_source == "counter"


def test_the_rate_spans_the_readings_not_the_arrivals() -> None:
    """The agent says when it read each page (``at``: the request's midpoint by the
    target's clock); a page that arrived late (a loaded link or event loop) does not skew
    the rate: 2 s between the readings, 2.5 s between the arrivals (over SGLang 0.5.18
    pages: ``sglang:realtime_tokens_total{mode="decode"}`` as
    ``sglang/srt/observability/metrics_collector.py`` declares it, l.885)."""
    tokens = 11689405 - 11634512  # the two pages' decode token counters
    tr = SglangTracker(30000)
    tr.observe_text(BUSY, 100.0, at=5000.0)
    tr.observe_http(200, IDLE, 102.5, at=5002.0)
    assert tr.gen_tokens_per_s == pytest.approx(tokens / 2.0, abs=0.1)
    arrivals = SglangTracker(30000)  # no reading times (a replay): the arrivals'
    arrivals.observe_text(BUSY, 100.0)
    arrivals.observe_text(IDLE, 102.5)
    assert arrivals.gen_tokens_per_s == pytest.approx(tokens / 2.5, abs=0.1)


def test_a_latency_quantile_is_not_read_from_a_few_requests() -> None:
    # issue 26.8: two snapshots of the demo at the same scenario time said TTFT p95 0.095 s
    # and 1.9 s: a one-second window holds two or three requests, the p95 is whichever
    # bucket they fell in. A thin window answers from every request since the start.
    settings = SimSettings(scenario="sglang")
    p95s = set()
    for gap in (0.5, 1.0, 1.5, 2.0, 3.0):
        tracker = SglangTracker(30000)
        tracker.observe_text(metrics_text(settings, 0, 120.0 - gap, -UPTIME_AT_T0), 100.0 - gap)
        tracker.observe_text(metrics_text(settings, 0, 120.0, -UPTIME_AT_T0), 100.0)
        assert tracker.ttft_p50_s is not None and tracker.ttft_p95_s is not None
        p95s.add(round(tracker.ttft_p95_s, 1))
    assert len(p95s) == 1 and 2.0 < p95s.pop() < 4.0  # the simulator's log-normal p95: 2.6 s
