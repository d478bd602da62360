"""SGLang's own metrics collector classes, rendered by prometheus_client as the server does
(tests/fixtures/upstream/sglang-<version>/, made by ``scripts/capture-upstream sglang``),
read by ``parse_sglang_metrics``. ``scenario.json`` holds what each scheduler rank and the
tokenizer were given; the parse must give the server's numbers: each DP group once (its
leader), the first pipeline stage only, the priority totals only, every request once."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from gpumon.backends.parsers import parse_sglang_metrics

from upstream_captures import UPSTREAM

PAGES = sorted(
    (p.parent.name, p.name.removesuffix(".prom.gz")) for p in UPSTREAM.glob("sglang-*/*.prom.gz")
)


def page(version: str, name: str) -> tuple[str, dict[str, Any], list[list[Any]]]:
    """The page's text, its scenario and the requests the tokenizer finished."""
    text = gzip.decompress((UPSTREAM / version / f"{name}.prom.gz").read_bytes()).decode()
    facts = json.loads((UPSTREAM / version / "scenario.json").read_text())
    return text, facts["scenarios"][name], facts["requests"]


def leaders(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The ranks whose numbers are the server's: of those that log, on the first stage,
    per DP group the lowest tp_rank."""
    logging = [r for r in scenario["ranks"] if r["logs"]]
    first = min(r["pp"] for r in logging)
    best: dict[Any, dict[str, Any]] = {}
    for r in logging:
        if r["pp"] == first and (r["dp"] not in best or r["tp"] < best[r["dp"]]["tp"]):
            best[r["dp"]] = r
    return list(best.values())


def test_the_four_releases_are_captured() -> None:
    versions = {v for v, _ in PAGES}
    assert versions == {"sglang-0.4.6", "sglang-0.5.5", "sglang-0.5.9", "sglang-0.5.23"}
    assert ("sglang-0.5.23", "pp2") in PAGES and ("sglang-0.5.5", "dp_attention") in PAGES


@pytest.mark.parametrize(("version", "name"), [p for p in PAGES if p[0] != "sglang-0.4.6"])
def test_a_ranked_page_reads_as_the_server_means(version: str, name: str) -> None:
    text, scenario, requests = page(version, name)
    scrape = parse_sglang_metrics(text)
    lead = leaders(scenario)
    assert scrape.ranked and scrape.ranks == len(lead)
    assert scrape.running == sum(r["running"] for r in lead)
    assert scrape.queued == sum(r["queued"] for r in lead)
    capacity = sum(r["max_total_num_tokens"] for r in lead)
    usage = sum(r["token_usage"] * r["max_total_num_tokens"] for r in lead) / capacity
    assert scrape.token_usage == pytest.approx(usage)
    assert scrape.used_tokens == sum(r["num_used_tokens"] for r in lead)
    if "sglang:max_total_num_tokens{" in text:
        assert scrape.max_total_tokens == capacity
    else:
        assert scrape.max_total_tokens is None  # not a family before 0.5.6: absent, not 0
    if "sglang:realtime_tokens_total{" in text:
        assert scrape.decode_tokens == sum(r["decode_tokens"] for r in lead)
        assert scrape.prefill_cache_tokens == sum(r["prefill_cache_tokens"] for r in lead)
    else:
        assert scrape.decode_tokens is None
    assert scrape.generation_tokens == sum(q[1] for q in requests)
    assert scrape.prompt_tokens == sum(q[0] for q in requests)
    assert scrape.cached_tokens == sum(q[2] for q in requests)
    assert scrape.ttft is not None and scrape.ttft.count == len(requests)
    assert scrape.itl is not None and scrape.itl.count == sum(q[5][1] for q in requests)
    assert scrape.itl.sum == pytest.approx(sum(q[5][0] for q in requests))


def test_dp_attention_series_carry_the_dp_rank_sglang_gives_them() -> None:
    """0.5.23 chose its own labels (publish + init_new): DP k's ranks are tp_rank 2k, 2k+1."""
    text, _, _ = page("sglang-0.5.23", "dp_attention")
    assert 'dp_rank="1"' in text and 'tp_rank="2"' in text
    running = [ln for ln in text.splitlines() if ln.startswith("sglang:num_running_reqs{")]
    assert any('dp_rank="1"' in ln and 'tp_rank="3"' in ln for ln in running)  # a follower


def test_priority_breakdowns_beside_the_totals_are_not_added() -> None:
    text, scenario, _ = page("sglang-0.5.23", "dp_attention")
    assert 'priority="10"' in text  # the per-priority series are there ...
    scrape = parse_sglang_metrics(text)
    assert scrape.running == sum(r["running"] for r in leaders(scenario))  # ... and not summed


def test_version_0_4_shows_the_last_dp_group_that_logged() -> None:
    """0.4.6's scheduler labels are model_name and engine_type only, its gauges
    "mostrecent": with DP attention the page holds one series, the value of whichever DP
    group wrote last, not their sum. The parse says so (one unranked series)."""
    text, scenario, _ = page("sglang-0.4.6", "dp_attention")
    assert 'engine_type="unified"' in text and "tp_rank" not in text
    scrape = parse_sglang_metrics(text)
    last = [r for r in scenario["ranks"] if r["logs"]][-1]
    assert not scrape.ranked and scrape.ranks == 1
    assert (scrape.running, scrape.queued) == (last["running"], last["queued"])


@pytest.mark.parametrize(("version", "name"), PAGES)
def test_gpumons_line_filter_keeps_every_sample_the_parse_reads(version: str, name: str) -> None:
    """The agent filters the page on the target (METRICS_LINE_FILTER); the filtered page
    must parse to the same numbers as the whole one."""
    from gpumon.backends.parsers.sglang import filter_metrics_text

    text, _, _ = page(version, name)
    assert parse_sglang_metrics(filter_metrics_text(text)) == parse_sglang_metrics(text)
