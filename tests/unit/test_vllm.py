"""vLLM's pages and log lines as its releases write them (tests/fixtures/upstream/vllm/,
made from each release's own metric declarations by scripts/capture-upstream), the
tracker's numbers and verdicts, and the agent's discovery of ``vllm serve``."""

from __future__ import annotations

import pytest

from gpumon.backends.parsers.vllm import (
    VllmParseError,
    engine_died,
    parse_vllm_log_line,
    parse_vllm_metrics,
)
from gpumon.backends.remote.agent import is_sglang_server, is_vllm_server, server_port
from gpumon.backends.workloads.vllm import VllmTracker

from upstream_captures import UPSTREAM

RELEASES = ("0.6.6.post1", "0.8.5", "0.11.0", "0.34.0")
# 0.11 and 0.34 make a series per engine: the capture has a data-parallel pair
ENGINES = {"0.6.6.post1": 1, "0.8.5": 1, "0.11.0": 2, "0.34.0": 2}


def page(version: str, name: str = "metrics.prom") -> str:
    return (UPSTREAM / "vllm" / version / name).read_text()


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_page_reads_its_own_names(version: str) -> None:
    s = parse_vllm_metrics(page(version))
    n = ENGINES[version]
    assert s.engines == n
    assert s.model == "Qwen/Qwen3-8B"
    assert (s.running, s.queued) == (24 * n, 3 * n)  # summed over the engines
    # gpu_cache_usage_perc (0.6, 0.8) or kv_cache_usage_perc (0.11+): a mean, never a sum
    assert s.token_usage == pytest.approx(0.62)
    assert s.decode_tokens == 451_000 * n and s.prompt_tokens == 182_000 * n
    assert s.preemptions_total == 7 * n
    assert s.ttft is not None and s.ttft.count == 1000 * n
    # time_per_output_token_seconds before 0.11, inter_token_latency_seconds since
    assert s.itl is not None and s.itl.count == 10_000 * n
    if version == "0.6.6.post1":
        assert s.effective_hit_tokens is None  # V0: a hit-rate gauge only, n/a
    else:
        assert s.effective_hit_tokens == 64_000 * n
        assert s.effective_input_tokens == (160_000 - 64_000) * n
    assert s.spec_accept_length is None and s.spec_accept_rate is None  # no drafter


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_stats_line(version: str) -> None:
    stats = parse_vllm_log_line(page(version, "stats.log"))
    assert stats is not None
    assert (stats.running, stats.waiting) == (24, 3)
    assert stats.gen_tokens_per_s == 1960.0 and stats.prompt_tokens_per_s == 820.0
    assert stats.kv_usage == pytest.approx(0.62)
    assert stats.time == "11-29 14:32:00"
    assert stats.engine == (None if version == "0.6.6.post1" else 0)
    assert stats.preemptions == (2 if version == "0.34.0" else None)


def test_a_page_without_vllm_metrics_or_cut_short_is_an_error() -> None:
    with pytest.raises(VllmParseError, match="no vLLM metrics"):
        parse_vllm_metrics("<html>502</html>\n")
    with pytest.raises(VllmParseError, match="truncated"):
        parse_vllm_metrics(page("0.34.0")[:-5])


def test_spec_decode_counters_give_vllms_acceptance() -> None:
    text = page("0.34.0") + (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0\n'
    )
    s = parse_vllm_metrics(text)
    assert s.spec_accept_length == pytest.approx(2.5)  # 1 + accepted / drafts
    assert s.spec_accept_rate == pytest.approx(0.5)  # accepted / draft tokens


def test_rates_then_wedged_then_idle() -> None:
    first, later = page("0.34.0"), page("0.34.0", "metrics_later.prom")
    v = VllmTracker(8000)
    v.observe_text(first, 1000.0)
    assert v.gen_tokens_per_s is None  # one scrape: no rate, never 0
    v.observe_text(later, 1005.0)
    assert v.gen_tokens_per_s == pytest.approx(2 * 9_800 / 5)
    assert v.prompt_tokens_per_s == pytest.approx(2 * 4_100 / 5)
    assert v.preemptions_per_s == pytest.approx(2 * 2 / 5)
    assert v.cache_hit_rate == pytest.approx(0.4)
    # frozen counters with requests: wedged once hung_after_s passed, not before
    for t in range(1010, 1065, 5):  # the last token came with the scrape at 1005
        v.observe_text(later, float(t))
        assert v.hung(float(t), 60.0) is None
    v.observe_text(later, 1065.0)
    verdict = v.hung(1065.0, 60.0)
    assert verdict is not None
    assert verdict.headline() == "vllm :8000 wedged: 48 running, 6 waiting, no token for 60 s"
    idle = later.replace("vllm:num_requests_running{", "vllm:num_requests_running_x{")
    idle = idle.replace("vllm:num_requests_waiting{", "vllm:num_requests_waiting_x{")
    v.observe_text(idle, 1070.0)
    assert v.hung(1200.0, 60.0) is None  # nothing running or waiting: idle, not wedged


def test_kv_pressure_needs_full_cache_and_preemptions() -> None:
    first, later = page("0.34.0"), page("0.34.0", "metrics_later.prom")
    full = [p.replace("} 0.62", "} 0.97") for p in (first, later)]
    v = VllmTracker(8000)
    v.observe_text(full[0], 1000.0)
    v.observe_text(full[1], 1005.0)
    assert v.kv_pressure(0.9) == (
        "vllm :8000 KV cache 97% full, 0.8 preemptions/s: requests are evicted and recomputed"
    )
    v.observe_text(full[1], 1010.0)  # no preemption since: no pressure
    assert v.kv_pressure(0.9) is None
    calm = VllmTracker(8001)
    calm.observe_text(first, 1000.0)
    calm.observe_text(later, 1005.0)  # preempting at 62 %: not full
    assert calm.kv_pressure(0.9) is None


def test_engine_dead_lines_as_vllm_spells_them() -> None:
    # vllm/v1/engine/core.py (0.8.5, 0.34.0), vllm/v1/engine/exceptions.py,
    # vllm/engine/multiprocessing/__init__.py and async_llm_engine.py (0.6.6.post1)
    for line in (
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.",
        "MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find the "
        "original error",
        "AsyncEngineDeadError: Background loop has errored already.",
    ):
        assert engine_died(line), line
    assert not engine_died(page("0.34.0", "stats.log"))
    v = VllmTracker(8000)
    v.observe_text(page("0.34.0"), 1000.0)
    v.observe_log_line(
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.", 1001.0
    )
    text = v.dead_text()
    assert text is not None and text.startswith("vllm :8000 engine core dead, API server")
    v.mark_down(1002.0, "refused")  # the server is gone too: a stopped server, not this
    assert v.dead_text() is None


def test_the_wedged_log_line_is_not_progress() -> None:
    v = VllmTracker(8000)
    line = (
        "INFO 11-29 14:32:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 24 reqs, Waiting: 3 "
        "reqs, GPU KV cache usage: 62.0%, Prefix cache hit rate: 40.0%"
    )
    assert v.observe_log_line(line, 1000.0)
    assert v.log_progress_at is None
    assert v.observe_log_line(
        line.replace("generation throughput: 0.0", "generation throughput: 9.5"), 1001.0
    )
    assert v.log_progress_at is not None


@pytest.mark.parametrize(
    ("argv", "port"),
    [
        (["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8010"], 8010),
        (["/usr/bin/python3", "/venv/bin/vllm", "serve", "m", "--port=8011"], 8011),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], 8000),
        (["python3", "-m", "vllm", "serve", "m", "--api-key", "sk", "-tp", "2"], 8000),
    ],
)
def test_vllm_servers_are_found_by_their_command_line(argv: list[str], port: int) -> None:
    assert is_vllm_server(argv) and not is_sglang_server(argv)
    assert server_port(argv, "/nonexistent", 8000) == port


def test_engine_core_and_other_vllm_commands_are_not_servers() -> None:
    for argv in (
        ["VLLM::EngineCore"],
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
        ["vllm", "bench", "serve"],  # "serve" after "bench", not after vllm
        ["python", "train.py", "--vllm", "serve"],
    ):
        assert not is_vllm_server(argv), argv
