"""vLLM's Prometheus ``/metrics`` text -> one frozen ``VllmScrape`` per fetch, and its
logs' lines: the periodic stats line, the engine core's death, the KV-blocks start-up
error.

A ``VllmScrape`` is an ``SglangScrape`` with vLLM's extras, so the serving-engine tracker
(``workloads/sglang.py``) turns its counters into rates, its histograms into quantiles and
its silence into a hang verdict as it does SGLang's. Which vLLM family fills which field
(docs/formats.md 6.14, read in vLLM 0.6.6.post1 ``vllm/engine/metrics.py``, 0.8.5, 0.11.0
and 0.34.0 ``vllm/v1/metrics/loggers.py``, 0.34.0 ``vllm/v1/spec_decode/metrics.py``):

- ``num_requests_running`` / ``num_requests_waiting``: running, queued.
- ``kv_cache_usage_perc`` (0.9.2+; a 0..1 share despite its name), else
  ``gpu_cache_usage_perc`` (V0, V1 up to 0.11 where hidden metrics are shown): token usage.
- ``generation_tokens_total``: bumped every engine step by the tokens it made (not when a
  request finishes): the decode counter, the generation rate and the hang's progress.
  ``prompt_tokens_total``: the prefill counter (progress too).
- ``prefix_cache_hits_total`` / ``prefix_cache_queries_total`` (0.10+; before,
  ``gpu_prefix_cache_*``, V1 0.8): hit and looked-up tokens: the hit rate. V0 has only
  ``gpu_prefix_cache_hit_rate``, a gauge of the whole run: not used (n/a).
- ``num_preemptions_total``: requests preempted (KV cache full): a rate.
- ``request_success_total{finished_reason}``: finished requests by reason (``stop``,
  ``length``, ``abort``, V1 ``error``).
- ``spec_decode_num_accepted_tokens_total`` / ``spec_decode_num_draft_tokens_total`` /
  ``spec_decode_num_drafts_total`` (V1): acceptance rate and mean acceptance length
  (1 + accepted / drafts, vLLM's own formula); V0's ``spec_decode_draft_acceptance_rate``
  gauge: the rate only.
- ``time_to_first_token_seconds``; ``inter_token_latency_seconds`` (0.11+), else
  ``time_per_output_token_seconds`` (its name before).

V1 pages of a data-parallel deployment carry one series per ``engine`` label: counters and
request gauges are summed over the engines, the KV usage is their mean (each engine has an
equal pool). ``NaN`` reads as absent; a family the page does not carry is None, never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.parsers.sglang import Histogram, SglangParseError, SglangScrape
from gpumon.backends.parsers.vllm_filter import VLLM_METRICS_LINE_FILTER

__all__ = [
    "VLLM_METRICS_LINE_FILTER",
    "VllmLogStats",
    "VllmScrape",
    "engine_died",
    "parse_vllm_log_line",
    "parse_vllm_metrics",
]

_FILTER = lazy_pattern(VLLM_METRICS_LINE_FILTER)


class VllmParseError(SglangParseError):
    """The text is not a (complete) vLLM metrics page."""


@dataclass(frozen=True, slots=True)
class VllmScrape(SglangScrape):
    """One ``/metrics`` fetch of a vLLM server (module docstring); the SGLang fields it
    shares mean the same, the rest are vLLM's own. ``engines``: the ``engine`` labels."""

    preemptions_total: float | None = None
    finished: tuple[tuple[str, float], ...] = ()  # (finished_reason, requests so far)
    spec_accepted: float | None = None
    spec_draft_tokens: float | None = None
    spec_drafts: float | None = None
    engines: int = 0

    def counters(self) -> tuple[float | None, ...]:
        return (self.decode_tokens, self.prompt_tokens)


def parse_vllm_metrics(text: str, latency: bool = True) -> VllmScrape:
    """Parse one vLLM ``/metrics`` page; ``latency=False`` skips the histograms. Raises
    ``VllmParseError`` for a cut page, text prometheus_client rejects, or a page with
    none of vLLM's metrics; never anything else."""
    if text and not text.endswith("\n"):
        raise VllmParseError("metrics text is truncated (it does not end in a newline)")
    wanted = "".join(
        line + "\n"
        for line in text.splitlines()
        if _FILTER.match(line) and (latency or "_seconds_" not in line)
    )
    try:
        return _build(wanted)
    except VllmParseError:
        raise
    except Exception as e:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on bad text
        raise VllmParseError(f"invalid Prometheus text: {str(e)[:160]}") from None


def _build(text: str) -> VllmScrape:
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    per_engine: dict[str, dict[str, float]] = {}
    finished: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    model: str | None = None
    engines: set[str] = set()
    seen = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if not name.startswith(("vllm:", "vllm_")) or not math.isfinite(value):
                continue
            name = name[5:]
            seen += 1
            model = model or labels.get("model_name") or None
            engine = labels.get("engine", "")
            engines.add(engine)
            if name.endswith("_bucket"):
                le = labels.get("le")
                if le is not None:
                    per = buckets.setdefault(name[: -len("_bucket")], {})
                    per[float(le)] = per.get(float(le), 0.0) + value
                continue
            if name == "request_success_total":
                reason = labels.get("finished_reason", "?")
                finished[reason] = finished.get(reason, 0.0) + value
            sums[name] = sums.get(name, 0.0) + value
            per_engine.setdefault(name, {})[engine] = value
    if not seen:
        raise VllmParseError("no vLLM metrics in the text (expected vllm:num_requests_running)")

    def mean(name: str) -> float | None:
        values = per_engine.get(name)
        return sum(values.values()) / len(values) if values else None

    def histogram(*names: str) -> Histogram | None:
        for name in names:
            per = buckets.get(name)
            if per and math.inf in per:
                count = sums.get(name + "_count", per[math.inf])
                return Histogram(tuple(sorted(per.items())), count, sums.get(name + "_sum"))
        return None

    hits = sums.get("prefix_cache_hits_total", sums.get("gpu_prefix_cache_hits_total"))
    queries = sums.get("prefix_cache_queries_total", sums.get("gpu_prefix_cache_queries_total"))
    accepted = sums.get("spec_decode_num_accepted_tokens_total")
    drafted = sums.get("spec_decode_num_draft_tokens_total")
    drafts = sums.get("spec_decode_num_drafts_total")
    usage = mean("kv_cache_usage_perc")
    return VllmScrape(
        model=model,
        running=sums.get("num_requests_running"),
        queued=sums.get("num_requests_waiting"),
        token_usage=usage if usage is not None else mean("gpu_cache_usage_perc"),
        decode_tokens=sums.get("generation_tokens_total"),
        prompt_tokens=sums.get("prompt_tokens_total"),
        effective_hit_tokens=hits,
        effective_input_tokens=None if hits is None or queries is None else queries - hits,
        ttft=histogram("time_to_first_token_seconds"),
        itl=histogram("inter_token_latency_seconds", "time_per_output_token_seconds"),
        spec_accept_length=(1.0 + accepted / drafts if accepted is not None and drafts else None),
        spec_accept_rate=(
            accepted / drafted
            if accepted is not None and drafted
            else mean("spec_decode_draft_acceptance_rate")
        ),
        samples=seen,
        ranks=len(engines),
        ranked=True,
        preemptions_total=sums.get("num_preemptions_total"),
        finished=tuple(sorted(finished.items())),
        spec_accepted=accepted,
        spec_draft_tokens=drafted,
        spec_drafts=drafts,
        engines=len(engines - {""}) or 1,
    )


# ---------------------------------------------------------------------------- logs
# vLLM's log prefix: ``INFO 11-29 14:32:00 [loggers.py:123] `` (0.8+), ``INFO 11-29
# 14:32:00 metrics.py:467] `` (0.6); a process prefix ``(APIServer pid=7)`` may lead.
_STAMP = lazy_pattern(r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)")
_STATS = lazy_pattern(
    r"(?:Engine (?P<engine>\d+): )?Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
    r"(?:Swapped: \d+ reqs, Pending: (?P<pending>\d+) reqs|Waiting: (?P<waiting>\d+) reqs)"
    r"(?:.*?Preemptions: (?P<preempt>\d+))?"
    r".*?KV cache usage: (?P<kv>[\d.]+)%"
)
# The engine core died (docs/formats.md 6.15): V1's ``EngineCore encountered a fatal
# error.`` (vllm/v1/engine/core.py, logger.exception) and ``EngineDeadError`` (its
# message: ``EngineCore encountered an issue. See stack trace (above) for the root
# cause.``); V0's ``MQEngineDeadError`` / ``Engine loop is not running`` (the
# multiprocessing front end) and ``AsyncEngineDeadError`` / ``Background loop has
# errored already`` (vllm/engine/async_llm_engine.py).
_DEAD = lazy_pattern(
    r"EngineCore encountered a fatal error|EngineDeadError|EngineCore encountered an issue"
    r"|Engine loop is not running|Background loop has errored already"
)


@dataclass(frozen=True, slots=True)
class VllmLogStats:
    """The logging stat logger's periodic line (printed every 10 s while the engine is
    not idle): throughputs, requests and KV usage as the engine saw them."""

    time: str | None  # ``11-29 14:32:00``: vLLM's stamp has no year
    engine: int | None
    prompt_tokens_per_s: float
    gen_tokens_per_s: float
    running: int
    waiting: int
    kv_usage: float  # 0..1
    preemptions: int | None


def parse_vllm_log_line(line: str) -> VllmLogStats | None:
    """The periodic stats line of vLLM 0.6 (V0) to 0.34 (V1), or None."""
    m = _STATS.search(line)
    if m is None:
        return None
    stamp = _STAMP.search(line[: m.start()])
    waiting = m["waiting"] if m["waiting"] is not None else m["pending"]
    return VllmLogStats(
        time=stamp[1] if stamp else None,
        engine=int(m["engine"]) if m["engine"] is not None else None,
        prompt_tokens_per_s=float(m["prompt"]),
        gen_tokens_per_s=float(m["gen"]),
        running=int(m["running"]),
        waiting=int(waiting or 0),
        kv_usage=float(m["kv"]) / 100.0,
        preemptions=int(m["preempt"]) if m["preempt"] is not None else None,
    )


def engine_died(line: str) -> bool:
    """Whether ``line`` says the engine core died (``_DEAD``)."""
    return _DEAD.search(line) is not None
