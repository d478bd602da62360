"""SGLang 0.4.3-0.5.23 as the upstream code writes it: one ``/metrics`` page (and the same
page 5 s later), one log excerpt and the server info per release, each read to the
numbers the server itself means (running, queued, KV usage, generation rate).

The fixtures are in tests/fixtures/sglang/<version>/, each README naming the upstream
files and lines. The same cases run through the real agent over sshd in
tests/integration/test_sglang_versions_ssh.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_releases import CASES, Numbers

from gpumon.backends.config.load import HostConfig
from gpumon.backends.parsers import parse_sglang_metrics
from gpumon.backends.remote.agent import DISCOVERED_TARGET, is_sglang_server
from gpumon.backends.workloads import SglangTracker, sglang_totals
from gpumon.backends.workloads.sglang import parse_server_info
from gpumon.backends.workloads.watch import SERVER_INFO_PATHS, Workloads

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sglang"


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


def test_the_rate_source_is_null_until_there_is_a_rate() -> None:
    tr = SglangTracker(30000)
    tr.observe_text(fixture("0.5.9", "metrics.prom"), 100.0)  # one scrape: no delta yet
    assert tr.snapshot_json()["gen_tokens_per_s"] is None
    assert tr.snapshot_json()["gen_tokens_per_s_source"] is None


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
    # a discovered server is asked for the same server info as a configured one
    assert DISCOVERED_TARGET["info"] == list(SERVER_INFO_PATHS)


def test_snapshot_waits_while_a_configured_server_is_not_known_up_or_down() -> None:
    from gpumon.backends.config.workloads import SglangConfig

    host = HostConfig(name="h", kind="local", sglang=SglangConfig(ports=(30000,)))
    w = Workloads(host)
    assert w.rates_pending()  # never answered: up is null
    w.on_http("sglang:30000", None, "", "ConnectionRefusedError", 1.0)
    assert w.sglang[30000].up is False and not w.rates_pending()
    w.on_http("sglang-info:30000", 200, fixture("0.5.18", "server_info.json"), None, 2.0)
    assert w.sglang[30000].info == parse_server_info(fixture("0.5.18", "server_info.json"))


def test_v0_4_6_dp_page_speaks_for_one_rank_so_the_leaders_log_counts() -> None:
    """0.4.6 gauges are `multiprocess_mode="mostrecent"` without rank labels: with DP
    attention the page holds whichever leader wrote last. The log has every leader."""
    info = json.loads(fixture("0.4.6", "server_info.json"))
    info.update(tp_size=4, dp_size=4, enable_dp_attention=True)
    tr = SglangTracker(30000)
    tr.observe_info(200, json.dumps(info))
    assert tr.observe_text(fixture("0.4.6", "metrics.prom"), 100.0)
    assert tr.running == 20.0  # one rank's page: all there is so far
    for i, line in enumerate(fixture("0.4.6", "server.log").splitlines()):
        assert tr.observe_log_line(line, 100.5 + i * 0.01)
    assert tr.observe_text(fixture("0.4.6", "metrics_later.prom"), 105.0)
    assert (tr.running, tr.queued, tr.gen_tokens_per_s) == (26.0, 3.0, 961.0)
    assert tr.gen_tokens_per_s_source == "log"
    # a server of one DP rank: the page is the whole server and the log is not used
    single = page_tracker("0.4.6")
    single.observe_info(200, fixture("0.4.6", "server_info.json"))
    assert not single.observe_log_line(fixture("0.4.6", "server.log").splitlines()[-1], 106.0)
    assert single.running == 20.0


def test_the_full_v0_5_18_server_info_answer() -> None:
    """tests/fixtures/sglang/server_info.json: a whole v0.5.18 /server_info (479 keys)."""
    info = parse_server_info((FIXTURES / "server_info.json").read_text())
    assert info is not None
    assert (info.version, info.parallel, info.model) == ("0.5.18", "TP 1", "Qwen/Qwen3-8B")
    assert info.max_total_tokens == 344864
    assert parse_server_info("<html>502</html>") is None
    assert parse_server_info("[1, 2]") is None
