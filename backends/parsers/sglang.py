"""SGLang's Prometheus ``/metrics`` text -> one frozen ``SglangScrape`` per fetch.

The text is parsed with ``prometheus_client.parser``; before that, the lines of the
metric families gpumon uses are picked out (``METRICS_LINE_FILTER``), because the parser
costs ~25 us per sample and a busy server prints ~500 samples. The agent can apply the
same filter on the target to cut bandwidth.

Both name prefixes are accepted: ``sglang:`` (SGLang's own page) and ``sglang_``
(Prometheus 3 underscore escaping, the router's ``/engine_metrics``). ``NaN`` and infinite
values read as absent. A family the text does not carry is ``None``, never 0. Log lines
(metrics off) are in ``sglang_log``.

Which series count (docs/formats.md 6.2, checked against SGLang 0.4.3-0.5.23):

- Scheduler series carry ``tp_rank`` (since 0.5.x). 0.4.x pages have one series per
  gauge, ``mostrecent`` over the schedulers: with DP attention it is the last DP group
  that logged, not their sum (the 0.4.6 capture in tests/fixtures/upstream shows it), and
  nothing in the page can say more. Each stats-logging rank (``attn_tp_rank == 0``) counts once:
  per ``dp_rank`` the lowest ``tp_rank`` is the leader (DP attention: DP k has the global
  ``tp_rank``; ``--enable-metrics-for-all-schedulers`` adds followers, which repeat the
  leader's batch), and the leaders are summed.
- Pipeline parallel: every stage's scheduler records the same requests and tokens under
  its own ``pp_rank``; only the first stage (lowest ``pp_rank``) is read.
- ``--enable-priority-scheduling`` (0.5.10+): scheduler gauges carry ``priority=""`` (the
  total) plus ``priority="<int>"`` breakdowns of the queue counts: only ``""`` is read.
  Tokenizer series (no ``tp_rank``) are labelled with each request's priority, a
  partition: they are summed, as are ``is_streaming``, ``cache_source`` parts and ``pid``.
- Ratios are never summed: KV usage over several ranks is weighted by each rank's
  ``max_total_num_tokens`` (the plain mean where that gauge is absent, before 0.5.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpumon.backends.errors import GpumonError
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.parsers.sglang_log import (
    SglangLogStats,
    log_line_stamp,
    parse_sglang_log_line,
)

__all__ = [
    "CORE_LINE_FILTER",
    "METRICS_LINE_FILTER",
    "Histogram",
    "SglangLogStats",
    "SglangParseError",
    "SglangScrape",
    "filter_metrics_text",
    "histogram_quantile",
    "log_line_stamp",
    "parse_sglang_log_line",
    "parse_sglang_metrics",
]

# Families read every scrape: gauges and counters (27 samples on a v0.5.18 server). Left
# out on purpose: the ``cache_hit_rate`` gauge (last prefill batch only, and before 0.5.20
# zeroed by every decode log: the tracker computes the rate from counters) and anything
# not shown.
CORE_FAMILIES = (
    "num_running_reqs",
    "num_queue_reqs",
    "gen_throughput",
    "token_usage",
    "full_token_usage",
    "swa_token_usage",
    "mamba_usage",
    "num_used_tokens",
    "max_total_num_tokens",
    "realtime_tokens_total",
    "generation_tokens_total",
    "prompt_tokens_total",
    "cached_tokens_total",
    "prefill_effective_tokens_total",
    # speculative decoding (docs/formats.md 6.13): gauges of the last decode log batch
    "spec_accept_length",
    "spec_accept_rate",
    "spec_verify_calls_total",
    # KV pressure and failures, where the version exports them
    "num_retracted_reqs",
    "num_retracted_requests_total",
    "num_paused_reqs",
    "num_aborted_requests_total",
)
# Histograms (about 70 samples): only needed for latency quantiles over a long window.
# 0.4.3 names the ITL histogram ``time_per_output_token_seconds`` (renamed by 0.4.6).
LATENCY_FAMILIES = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "time_per_output_token_seconds",
)


def _line_pattern(latency: bool) -> str:
    names = "|".join(CORE_FAMILIES)
    if latency:
        names += "|(?:" + "|".join(LATENCY_FAMILIES) + ")_(?:bucket|sum|count)"
    return rf"sglang[:_](?:{names})[{{ ]"


# For ``re.match`` on one line (no newline): the sample lines of every family used here
# (95 of 500 on a busy v0.5.18 server), or without the histograms (27). HELP and TYPE
# lines are left out: values are read by sample name, so types are not needed.
METRICS_LINE_FILTER = _line_pattern(latency=True)
CORE_LINE_FILTER = _line_pattern(latency=False)
_FULL = lazy_pattern(METRICS_LINE_FILTER)
_CORE = lazy_pattern(CORE_LINE_FILTER)
_MAX_ERROR_TEXT = 160


class SglangParseError(GpumonError, ValueError):
    """The text is not a (complete) SGLang metrics page; the message says why."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative Prometheus histogram summed over its series.

    ``buckets`` are (upper bound, cumulative count) sorted by bound, ending at ``inf``.
    """

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float | None

    def minus(self, earlier: Histogram) -> Histogram | None:
        """Observations since ``earlier``; None when the bucket layouts differ or a count
        went down (the server restarted in between)."""
        if [b for b, _ in self.buckets] != [b for b, _ in earlier.buckets]:
            return None
        deltas = tuple(
            (b, c - e) for (b, c), (_, e) in zip(self.buckets, earlier.buckets, strict=True)
        )
        if any(d < 0 for _, d in deltas) or self.count < earlier.count:
            return None
        total = None if self.sum is None or earlier.sum is None else self.sum - earlier.sum
        return Histogram(deltas, self.count - earlier.count, total)


def histogram_quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding
    rank ``q * total``. None when there are no observations or no ``+Inf`` bucket. A rank
    in the ``+Inf`` bucket answers the highest finite bound; the first bucket starts at 0
    (when its bound is positive)."""
    if not buckets or buckets[-1][0] != math.inf or not 0.0 <= q <= 1.0:
        return None
    total = buckets[-1][1]
    if not total > 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for i, (bound, count) in enumerate(buckets):
        count = max(count, prev_count)  # Prometheus forces monotonic buckets
        if count >= rank and count > prev_count:
            if bound == math.inf:
                return buckets[i - 1][0] if i > 0 else None
            if i == 0 and bound <= 0:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return buckets[-2][0] if len(buckets) > 1 else None


@dataclass(frozen=True, slots=True)
class SglangScrape:
    """The numbers of one ``/metrics`` fetch of one server. ``None``: not in the text.

    Counters are raw totals since the server started (the tracker turns two scrapes into
    rates), summed over the stats-logging ranks (module docstring). ``token_usage`` is,
    per rank, the largest of ``full_token_usage`` (unrounded, 0.5.10+; else
    ``token_usage``), ``swa_token_usage`` and ``mamba_usage``, then weighted by capacity
    over the ranks. The hybrid gauges count only where the model is hybrid: SGLang sets
    them only for hybrid SWA / SSM pools and leaves them at their 0.0 default otherwise
    (``SchedulerStats``), so a non-hybrid server's usage is its ``token_usage``.
    ``gen_throughput`` is SGLang's own gauge summed over the ranks: stale between log
    lines, used only where there is no ``realtime_tokens_total`` (before 0.5.7).
    ``ttft``/``itl`` are None when histograms were not parsed this time. ``ranks`` is
    how many stats-logging ranks the numbers cover.
    """

    model: str | None = None
    running: float | None = None
    queued: float | None = None
    gen_throughput: float | None = None
    token_usage: float | None = None
    used_tokens: float | None = None
    max_total_tokens: float | None = None
    decode_tokens: float | None = None  # realtime_tokens_total{mode="decode"}
    prefill_compute_tokens: float | None = None  # realtime_tokens_total{mode="prefill_compute"}
    prefill_cache_tokens: float | None = None  # realtime_tokens_total{mode="prefill_cache"}
    generation_tokens: float | None = None  # generation_tokens_total (finished requests)
    prompt_tokens: float | None = None
    cached_tokens: float | None = None
    effective_input_tokens: float | None = None  # prefill_effective_tokens_total{mode="input"}
    effective_hit_tokens: float | None = None  # ... summed over the *_hit modes
    ttft: Histogram | None = None
    itl: Histogram | None = None
    # speculative decoding: the mean over the ranks that report one (a server without a
    # drafter exports 0.0: None here); SGLang's verify steps so far
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_verify_calls: float | None = None
    retracted: float | None = None  # num_retracted_reqs: retracted in the last batch
    retracted_total: float | None = None  # num_retracted_requests_total
    paused: float | None = None  # num_paused_reqs
    aborted_total: float | None = None  # num_aborted_requests_total
    samples: int = 0
    ranks: int = 0
    ranked: bool = False  # scheduler series carry tp_rank (0.5.x), else merged by the server

    def counters(self) -> tuple[float | None, ...]:
        """The monotonic totals, for spotting a counter reset (server restart)."""
        return (
            self.decode_tokens,
            self.prefill_compute_tokens,
            self.prefill_cache_tokens,
            self.generation_tokens,
            self.prompt_tokens,
            self.cached_tokens,
            self.effective_input_tokens,
            self.effective_hit_tokens,
        )


def filter_metrics_text(text: str, latency: bool = True) -> str:
    """The lines of ``text`` that ``parse_sglang_metrics`` reads, each ending in a newline.

    Without ``latency`` the histogram lines are left out too.
    """
    rx = _FULL if latency else _CORE
    return "".join(line + "\n" for line in text.splitlines() if rx.match(line))


def parse_sglang_metrics(text: str, latency: bool = True) -> SglangScrape:
    """Parse one ``/metrics`` page (complete, as served: every line ends in a newline).

    ``latency=False`` skips the histograms (``ttft``/``itl`` None), which is most of
    the parsing cost. Raises ``SglangParseError`` for text that does not end in a newline
    (cut off: the last value may be partial), that the Prometheus parser rejects, that
    repeats a series, or that carries none of SGLang's metrics (an HTML error page).
    Never raises anything else.
    """
    if text and not text.endswith("\n"):
        raise SglangParseError("metrics text is truncated (it does not end in a newline)")
    wanted = filter_metrics_text(text, latency)
    try:
        return _build(wanted, latency)
    except SglangParseError:
        raise
    except Exception as e:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on bad text
        detail = str(e) or type(e).__name__
        if len(detail) > _MAX_ERROR_TEXT:
            detail = detail[:_MAX_ERROR_TEXT] + "..."
        raise SglangParseError(f"invalid Prometheus text: {detail}") from None


_RANK_GAUGES = (
    "token_usage",
    "full_token_usage",
    "swa_token_usage",
    "mamba_usage",
    "max_total_num_tokens",
)

_Sample = tuple[str, dict[str, str], float]


def _rank_int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _leaders(samples: list[_Sample]) -> tuple[int | None, dict[str, int]]:
    """The first pipeline stage and, per ``dp_rank``, the lowest ``tp_rank`` on it."""
    stages = [_rank_int(lb.get("pp_rank", "0")) for _, lb, _ in samples if "tp_rank" in lb]
    known = [p for p in stages if p is not None]
    first = min(known) if known else None
    leader: dict[str, int] = {}
    for _, labels, _ in samples:
        tp = _rank_int(labels.get("tp_rank"))
        if tp is None or _rank_int(labels.get("pp_rank", "0")) != first:
            continue
        dp = labels.get("dp_rank", "")
        leader[dp] = min(tp, leader.get(dp, tp))
    return first, leader


def _rank_key(labels: dict[str, str], first: int | None, leader: dict[str, int]) -> str | None:
    """The DP group a scheduler sample is the stats-logging leader of; ``""`` for a
    tokenizer sample or an unranked 0.4.x one; None when the sample is not counted."""
    if "tp_rank" not in labels:
        return ""
    if labels.get("priority", ""):  # a per-priority breakdown of the total under ""
        return None
    tp, pp = _rank_int(labels["tp_rank"]), _rank_int(labels.get("pp_rank", "0"))
    dp = labels.get("dp_rank", "")
    if tp is None or pp != first or leader.get(dp) != tp:
        return None
    return dp


class _Sums:
    """Per-name sums of the samples kept, plus histogram pieces."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.counts: dict[str, int] = {}  # samples above 0 per name (for ratio means)
        self.by_label: dict[tuple[str, str], float] = {}  # (name, mode/cache_source) -> sum
        self.buckets: dict[str, dict[float, float]] = {}
        self.per_rank: dict[str, dict[str, float]] = {}  # dp group -> usage gauges
        self.model: str | None = None

    def add(self, name: str, labels: dict[str, str], value: float, rank: str) -> None:
        if not math.isfinite(value):
            return
        if self.model is None and labels.get("model_name"):
            self.model = labels["model_name"]
        if name.endswith("_bucket"):
            le = labels.get("le")
            bound = float(le) if le is not None else math.nan  # float() takes "+Inf"
            if not math.isnan(bound):
                per = self.buckets.setdefault(name[: -len("_bucket")], {})
                per[bound] = per.get(bound, 0.0) + value
            return
        self.values[name] = self.values.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + (value > 0)
        part = labels.get("mode", labels.get("cache_source"))
        if part is not None:
            self.by_label[name, part] = self.by_label.get((name, part), 0.0) + value
        if name in _RANK_GAUGES:
            gauges = self.per_rank.setdefault(rank, {})
            gauges[name] = gauges.get(name, 0.0) + value

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def mean(self, name: str) -> float | None:
        """The mean of the samples above 0 (a ratio gauge, never summed); None when none
        is (SGLang's default 0.0: the feature is off)."""
        n = self.counts.get(name, 0)
        return self.values[name] / n if n else None

    def part(self, name: str, label: str) -> float | None:
        return self.by_label.get((name, label))

    def histogram(self, *names: str) -> Histogram | None:
        for name in names:
            per = self.buckets.get(name)
            if not per or math.inf not in per:
                continue  # no buckets, or cut before the +Inf bucket
            buckets = tuple(sorted(per.items()))
            count = self.values.get(name + "_count", per[math.inf])
            return Histogram(buckets, count, self.values.get(name + "_sum"))
        return None

    def token_usage(self) -> float | None:
        """Per rank the largest pool usage, weighted by capacity over the ranks."""
        usage: list[tuple[float, float | None]] = []
        for gauges in self.per_rank.values():
            base = gauges.get("full_token_usage", gauges.get("token_usage"))
            parts = (base, gauges.get("swa_token_usage"), gauges.get("mamba_usage"))
            known = [v for v in parts if v is not None]
            if known:
                usage.append((max(known), gauges.get("max_total_num_tokens")))
        if not usage:
            return None
        caps = [c for _, c in usage if c is not None and c > 0]
        if len(caps) == len(usage):
            return sum(u * (c or 0.0) for u, c in usage) / sum(caps)
        return sum(u for u, _ in usage) / len(usage)


def _accept_rate(sums: _Sums) -> float | None:
    """``sglang:spec_accept_rate``, whose formula changed twice (docs/formats.md 6.13):
    0.5.4-0.5.5 accepted tokens, the bonus token included, over verify steps x
    (``speculative_num_steps`` + 1); 0.5.6-0.5.10 the same over verify steps x
    ``speculative_num_draft_tokens``; from 0.5.11 accepted drafts over proposed drafts
    (``num_draft_tokens`` - 1 a step). So before 0.5.11 a drafter whose every draft is
    rejected still reads 1/num_draft_tokens, and from 0.5.11 it reads 0.0: a 0.0 rate
    beside an accept length (at least 1.0 with a drafter, the bonus token) is that
    drafter's, not "no drafter". gpumon shows the value as served and judges
    ``spec_accept_low`` on the accept length, whose formula did not change."""
    rate = sums.mean("spec_accept_rate")
    drafter = sums.mean("spec_accept_length") is not None
    if rate is None and drafter and sums.get("spec_accept_rate") is not None:
        return 0.0
    return rate


def _build(text: str, latency: bool) -> SglangScrape:
    # Imported here: prometheus_client (with its exposition's HTTP server) costs every
    # start-up ~20 ms, and most hosts have no SGLang server.
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[_Sample] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if not name.startswith(("sglang:", "sglang_")):
                continue
            key = (name[7:], tuple(sorted(sample.labels.items())))
            if key in seen:
                raise SglangParseError(f"series repeated in the text: {name}{sample.labels}")
            seen.add(key)
            samples.append((name[7:], sample.labels, float(sample.value)))
    if not samples:
        raise SglangParseError("no SGLang metrics in the text (expected sglang:num_running_reqs)")
    first, leader = _leaders(samples)
    sums = _Sums()
    for name, labels, value in samples:
        rank = _rank_key(labels, first, leader)
        if rank is not None:
            sums.add(name, labels, value, rank)

    hits = [sums.part("prefill_effective_tokens_total", m) for m in _HIT_MODES]
    cached = sums.part("cached_tokens_total", "total")
    return SglangScrape(
        model=sums.model,
        running=sums.get("num_running_reqs"),
        queued=sums.get("num_queue_reqs"),
        gen_throughput=sums.get("gen_throughput"),
        token_usage=sums.token_usage(),
        used_tokens=sums.get("num_used_tokens"),
        max_total_tokens=sums.get("max_total_num_tokens"),
        decode_tokens=sums.part("realtime_tokens_total", "decode"),
        prefill_compute_tokens=sums.part("realtime_tokens_total", "prefill_compute"),
        prefill_cache_tokens=sums.part("realtime_tokens_total", "prefill_cache"),
        generation_tokens=sums.get("generation_tokens_total"),
        prompt_tokens=sums.get("prompt_tokens_total"),
        # "total" is itself the sum of the other sources: never add it to them
        cached_tokens=cached if cached is not None else sums.get("cached_tokens_total"),
        effective_input_tokens=sums.part("prefill_effective_tokens_total", "input"),
        effective_hit_tokens=(
            sum(h for h in hits if h is not None) if any(h is not None for h in hits) else None
        ),
        ttft=sums.histogram("time_to_first_token_seconds") if latency else None,
        itl=(
            sums.histogram("inter_token_latency_seconds", "time_per_output_token_seconds")
            if latency
            else None
        ),
        spec_accept_length=sums.mean("spec_accept_length"),
        spec_accept_rate=_accept_rate(sums),
        spec_verify_calls=sums.get("spec_verify_calls_total"),
        retracted=sums.get("num_retracted_reqs"),
        retracted_total=sums.get("num_retracted_requests_total"),
        paused=sums.get("num_paused_reqs"),
        aborted_total=sums.get("num_aborted_requests_total"),
        samples=len(samples),
        ranks=max(len(leader), 1 if sums.per_rank else 0),
        ranked=bool(leader),
    )


_HIT_MODES = ("device_hit", "host_hit", "storage_hit")
