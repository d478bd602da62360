"""SGLang 0.4.3-0.5.23 as the upstream code writes it: one ``/metrics`` page (and the same
page 5 s later), one log excerpt and the server info per release, each read to the
numbers the server itself means (running, queued, KV usage, generation rate).

The fixtures are in tests/fixtures/sglang/<version>/, each README naming the upstream
files and lines. The same cases run through the real agent over sshd in
tests/integration/test_sglang_versions_ssh.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpumon.backends.config.load import HostConfig
from gpumon.backends.parsers import parse_sglang_metrics
from gpumon.backends.remote.agent import is_sglang_server
from gpumon.backends.workloads import SglangTracker, sglang_totals
from gpumon.backends.workloads.sglang import parse_server_info
from gpumon.backends.workloads.watch import Workloads

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sglang"


@dataclass(frozen=True)
class Numbers:
    running: int
    queued: int
    token_usage: float
    gen_tokens_per_s: float


@dataclass(frozen=True)
class Case:
    page: Numbers
    source: str  # where the page's rate comes from
    log: Numbers
    parallel: str


# What each release's server means, worked out from its scenario (fixture READMEs):
CASES = {
    # single GPU; gauges merged by the server (multiprocess "sum"); no realtime counter
    "0.4.3": Case(Numbers(12, 3, 0.2, 456.78), "gauge", Numbers(12, 3, 0.2, 456.78), "TP 1"),
    # TP 2 page (one series); log: DP attention 4, the latest line of each leader summed
    "0.4.6": Case(Numbers(20, 0, 0.3, 812.5), "gauge", Numbers(26, 3, 0.205, 961.0), "TP 2"),
    # DP attention 4: tp_rank 0-3 are the 4 leaders; log: single GPU
    "0.5.3": Case(
        Numbers(40, 6, 0.275, 1300.0),
        "gauge",
        Numbers(40, 6, 0.28, 1300.0),
        "DP 4 (attention), TP 4",
    ),
    # TP 2 with every scheduler exporting: the follower repeats the batch; swa/mamba at 0.0
    # log: DP attention tp 8 dp 4, followers printing too: leaders TP0/2/4/6 summed
    "0.5.5": Case(Numbers(24, 5, 0.48, 1045.6), "gauge", Numbers(120, 7, 0.45, 5970.0), "TP 2"),
    # DP attention tp 8 dp 4: leaders tp_rank 0, 2, 4, 6; decode counters 1500+1400+1750+1350
    "0.5.9": Case(
        Numbers(120, 7, 0.45, 6000.0),
        "counter",
        Numbers(24, 5, 0.48, 1045.6),
        "DP 4 (attention), TP 8",
    ),
    # priority scheduling: the totals under priority=""; log: DP attention 4
    "0.5.10": Case(Numbers(16, 9, 0.35, 640.0), "counter", Numbers(40, 4, 0.4, 2000.0), "TP 1"),
    # DP attention 4 with priority scheduling; log: the same deployment
    "0.5.18": Case(
        Numbers(40, 4, 0.4, 2000.0),
        "counter",
        Numbers(40, 4, 0.4, 2000.0),
        "DP 4 (attention), TP 4",
    ),
    # PP 2 x TP 2, hybrid SWA: one stage's numbers, the SWA pool is the fuller one
    "0.5.23": Case(
        Numbers(18, 3, 0.6321, 720.0), "counter", Numbers(18, 3, 0.63, 720.0), "PP 2, TP 2"
    ),
}


def fixture(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


def page_tracker(version: str) -> SglangTracker:
    """A tracker fed the release's page, then the same page 5 s later."""
    tr = SglangTracker(30000)
    assert tr.observe_text(fixture(version, "metrics.prom"), 100.0)
    assert tr.observe_text(fixture(version, "metrics_later.prom"), 105.0)
    return tr


def log_tracker(version: str) -> SglangTracker:
    tr = SglangTracker(30000)
    lines = fixture(version, "server.log").splitlines()
    for i, line in enumerate(lines):
        tr.observe_log_line(line, 100.0 + i * 0.1)
    return tr


def numbers(tr: SglangTracker) -> Numbers:
    assert tr.running is not None and tr.queued is not None
    assert tr.token_usage is not None and tr.gen_tokens_per_s is not None
    return Numbers(round(tr.running), round(tr.queued), tr.token_usage, tr.gen_tokens_per_s)


@pytest.mark.parametrize("version", CASES)
def test_metrics_page_of_each_release_reads_as_the_server_means(version: str) -> None:
    tr = page_tracker(version)
    got, want = numbers(tr), CASES[version].page
    assert (got.running, got.queued) == (want.running, want.queued)
    assert got.token_usage == pytest.approx(want.token_usage, abs=1e-9)
    assert got.gen_tokens_per_s == pytest.approx(want.gen_tokens_per_s, rel=1e-9)
    assert tr.gen_tokens_per_s_source == CASES[version].source
    assert tr.snapshot_json()["gen_tokens_per_s_source"] == CASES[version].source


@pytest.mark.parametrize("version", CASES)
def test_log_excerpt_of_each_release_reads_as_the_server_means(version: str) -> None:
    tr = log_tracker(version)
    got, want = numbers(tr), CASES[version].log
    assert (got.running, got.queued) == (want.running, want.queued)
    assert got.token_usage == pytest.approx(want.token_usage, abs=1e-9)
    assert got.gen_tokens_per_s == pytest.approx(want.gen_tokens_per_s, rel=1e-9)
    assert tr.snapshot_json()["gen_tokens_per_s_source"] == "log"


@pytest.mark.parametrize("version", CASES)
def test_server_info_of_each_release_names_model_version_and_parallelism(version: str) -> None:
    tr = SglangTracker(30000)
    tr.observe_info(200, fixture(version, "server_info.json"))
    out = tr.snapshot_json()
    assert out["version"] == version
    assert out["parallel"] == CASES[version].parallel
    assert out["model"] == parse_sglang_metrics(fixture(version, "metrics.prom")).model


# ------------------------------------------------------------------ the cases one by one
def test_v0_5_9_dp_attention_leaders_are_summed_not_rank_zero_alone() -> None:
    scrape = parse_sglang_metrics(fixture("0.5.9", "metrics.prom"))
    assert scrape.ranks == 4
    assert scrape.max_total_tokens == 4 * 300000  # the KV capacity of all four DP ranks
    assert scrape.used_tokens == 150000 + 120000 + 180000 + 90000


def test_v0_5_5_tp_followers_exporting_are_not_counted_twice() -> None:
    text = fixture("0.5.5", "metrics.prom")
    assert 'tp_rank="1"' in text  # --enable-metrics-for-all-schedulers
    scrape = parse_sglang_metrics(text)
    assert (scrape.running, scrape.queued, scrape.ranks) == (24.0, 5.0, 1)


def test_v0_5_10_priority_breakdowns_are_not_added_to_the_total() -> None:
    text = fixture("0.5.10", "metrics.prom")
    assert 'priority="1"' in text
    scrape = parse_sglang_metrics(text)
    assert (scrape.running, scrape.queued) == (16.0, 9.0)
    # the tokenizer's counters are per request priority, a partition: summed
    assert scrape.generation_tokens == 1.8e6 + 0.6e6
    assert scrape.cached_tokens == 2.2e6 + 0.8e6


def test_v0_5_23_pipeline_stages_are_one_server_not_two() -> None:
    scrape = parse_sglang_metrics(fixture("0.5.23", "metrics.prom"))
    assert scrape.running == 18.0 and scrape.decode_tokens == 5e6  # pp_rank 0 only
    assert scrape.max_total_tokens == 400000


def test_v0_5_5_non_hybrid_usage_is_token_usage_not_the_zero_hybrid_gauges() -> None:
    text = fixture("0.5.5", "metrics.prom")
    assert "sglang:swa_token_usage" in text and "sglang:mamba_usage" in text
    assert "full_token_usage" not in text
    assert parse_sglang_metrics(text).token_usage == 0.48


def test_v0_5_23_hybrid_swa_usage_is_the_fuller_pool() -> None:
    scrape = parse_sglang_metrics(fixture("0.5.23", "metrics.prom"))
    assert scrape.token_usage == 0.6321  # full_token_usage is 0.41


def test_two_ranks_at_60_and_62_percent_are_61_not_122() -> None:
    labels = 'engine_type="unified",model_name="M",pp_rank="0"'
    text = "".join(
        f'sglang:token_usage{{{labels},dp_rank="{k}",tp_rank="{k}"}} {u}\n'
        f'sglang:max_total_num_tokens{{{labels},dp_rank="{k}",tp_rank="{k}"}} 100000.0\n'
        for k, u in ((0, 0.6), (1, 0.62))
    )
    assert parse_sglang_metrics(text).token_usage == pytest.approx(0.61)


def test_host_usage_falls_back_to_the_servers_gauges_without_capacity() -> None:
    """Before 0.5.7 there is no max_total_num_tokens: the host's KV usage is the mean of
    the servers' own usage (0.5.5: 0.48, 0.5.3: 0.275), not n/a."""
    servers = [page_tracker("0.5.5"), page_tracker("0.5.3")]
    assert all(s.max_total_tokens is None for s in servers)
    totals = sglang_totals(servers)
    assert totals.token_usage == pytest.approx((0.48 + 0.275) / 2)
    assert totals.running == 24 + 40


def test_host_usage_is_weighted_by_each_servers_capacity() -> None:
    big, small = page_tracker("0.5.9"), page_tracker("0.5.10")  # 1.2M and 200k slots
    totals = sglang_totals([big, small])
    assert totals.token_usage == pytest.approx((0.45 * 1.2e6 + 0.35 * 2e5) / 1.4e6)


def test_server_info_capacity_stands_in_for_the_missing_gauge() -> None:
    tr = page_tracker("0.5.3")
    tr.observe_info(200, fixture("0.5.3", "server_info.json"))
    assert tr.capacity() == 4 * 120000  # DP rank 0's pool, four DP ranks


def test_v0_5_5_rate_is_the_gauge_not_finished_requests() -> None:
    """generation_tokens_total grew by 3100 in those 5 s (620 tok/s, only requests that
    finished): the server's gauge says 1045.6."""
    tr = page_tracker("0.5.5")
    assert tr.gen_tokens_per_s == 1045.6 and tr.gen_tokens_per_s_source == "gauge"


def test_v0_4_3_itl_under_its_old_name_gives_quantiles_and_no_hit_rate() -> None:
    tr = page_tracker("0.4.3")
    assert tr.itl_p50_s is not None and tr.ttft_p50_s is not None
    assert tr.cache_hit_rate is None  # 0.4.3 has no cached_tokens_total: unknown, not 0


def test_log_leader_lines_are_summed_and_a_silent_rank_ages_out() -> None:
    tr = SglangTracker(30000)
    line = (
        "[2026-03-20 10:00:0{k} DP{k} TP{k}] Decode batch, #running-req: {r}, #token: 1, "
        "token usage: 0.50, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0"
    )
    tr.observe_log_line(line.format(k=0, r=5), 100.0)
    tr.observe_log_line(line.format(k=1, r=7), 101.0)
    tr.observe_log_line(line.format(k=1, r=8), 102.0)  # DP1's newer line replaces its older
    assert (tr.running, tr.gen_tokens_per_s) == (13.0, 200.0)
    tr.observe_log_line(line.format(k=1, r=8), 300.0)  # DP0 silent for 200 s: gone
    assert (tr.running, tr.gen_tokens_per_s) == (8.0, 100.0)


def test_sglang_serve_and_launch_server_are_discovered() -> None:
    assert is_sglang_server(["python3", "-m", "sglang.launch_server", "--port", "30001"])
    assert is_sglang_server(["/venv/bin/sglang", "serve", "--model-path", "Qwen/Qwen3-8B"])
    assert is_sglang_server(["/venv/bin/python3", "/venv/bin/sglang", "serve", "--port=30002"])
    assert is_sglang_server(["python", "-m", "sglang.cli.main", "serve"])
    assert not is_sglang_server(["/venv/bin/sglang", "generate", "--model-path", "M"])
    assert not is_sglang_server(["grep", "sglang", "serve"])
    assert not is_sglang_server(["sglang::scheduler_TP0"])


def test_snapshot_waits_while_a_configured_server_is_not_known_up_or_down() -> None:
    from gpumon.backends.config.workloads import SglangConfig

    host = HostConfig(name="h", kind="local", sglang=SglangConfig(ports=(30000,)))
    w = Workloads(host)
    assert w.rates_pending()  # never answered: up is null
    w.on_http("sglang:30000", None, "", "ConnectionRefusedError", 1.0)
    assert w.sglang[30000].up is False and not w.rates_pending()
    w.on_http("sglang-info:30000", 200, fixture("0.5.18", "server_info.json"), None, 2.0)
    assert w.sglang[30000].info == parse_server_info(fixture("0.5.18", "server_info.json"))
