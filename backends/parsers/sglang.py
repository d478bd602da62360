"""SGLang's Prometheus ``/metrics`` text -> one frozen ``SglangScrape`` per fetch.

The text is parsed with ``prometheus_client.parser``; before that, the lines of the
metric families gpumon uses are picked out (``METRICS_LINE_FILTER``), because the parser
costs ~25 us per sample and a busy server prints ~500 samples. The agent can apply the
same filter on the target to cut bandwidth.

Both name prefixes are accepted: ``sglang:`` (SGLang's own page) and ``sglang_``
(Prometheus 3 underscore escaping, the router's ``/engine_metrics``). Series of TP ranks
other than 0 are dropped (``--enable-metrics-for-all-schedulers`` repeats the same batch
on every rank); everything else (``dp_rank``, ``is_streaming``, ``pid``, ...) is summed.
``NaN`` and infinite values read as absent. A family the text does not carry is ``None``,
never 0. Log lines (metrics off) are in ``sglang_log``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.errors import GpumonError
from gpumon.backends.parsers.sglang_log import SglangLogStats, parse_sglang_log_line

__all__ = [
    "CORE_LINE_FILTER",
    "METRICS_LINE_FILTER",
    "Histogram",
    "SglangLogStats",
    "SglangParseError",
    "SglangScrape",
    "filter_metrics_text",
    "histogram_quantile",
    "parse_sglang_log_line",
    "parse_sglang_metrics",
]

# Families read every scrape: gauges and counters (21 samples on a v0.5.18 server). Left
# out on purpose: the ``cache_hit_rate`` gauge (last prefill batch only, zeroed by every
# decode log: the tracker computes the rate from counters) and anything not shown.
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
)
# Histograms (about 70 samples): only needed for latency quantiles over a long window.
LATENCY_FAMILIES = ("time_to_first_token_seconds", "inter_token_latency_seconds")


def _line_pattern(latency: bool) -> str:
    names = "|".join(CORE_FAMILIES)
    if latency:
        names += "|(?:" + "|".join(LATENCY_FAMILIES) + ")_(?:bucket|sum|count)"
    return rf"sglang[:_](?:{names})[{{ ]"


# For ``re.match`` on one line (no newline): the sample lines of every family used here
# (89 of 500 on a busy v0.5.18 server), or without the histograms (21). HELP and TYPE
# lines are left out: values are read by sample name, so types are not needed.
METRICS_LINE_FILTER = _line_pattern(latency=True)
CORE_LINE_FILTER = _line_pattern(latency=False)
_FULL = re.compile(METRICS_LINE_FILTER)
_CORE = re.compile(CORE_LINE_FILTER)
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
    rates). ``token_usage`` is the unrounded max(full, swa, mamba) when the server prints
    those, else its 2-decimal ``token_usage`` gauge. ``gen_throughput`` is SGLang's own
    gauge: stale between log lines, kept only as a fallback for servers without token
    counters. ``ttft``/``itl`` are None when histograms were not parsed this time.
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
    samples: int = 0

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
    except Exception as e:  # the parser raises ValueError, IndexError, ... on bad text
        detail = str(e) or type(e).__name__
        if len(detail) > _MAX_ERROR_TEXT:
            detail = detail[:_MAX_ERROR_TEXT] + "..."
        raise SglangParseError(f"invalid Prometheus text: {detail}") from None


class _Sums:
    """Per-name sums of the samples kept, plus histogram pieces."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.by_label: dict[tuple[str, str], float] = {}  # (name, mode/cache_source) -> sum
        self.buckets: dict[str, dict[float, float]] = {}
        self.model: str | None = None
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.samples = 0

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        key = (name, tuple(sorted(labels.items())))
        if key in self.seen:
            raise SglangParseError(f"series repeated in the text: {name}{labels}")
        self.seen.add(key)
        self.samples += 1
        if labels.get("tp_rank", "0") != "0" or not math.isfinite(value):
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
        part = labels.get("mode", labels.get("cache_source"))
        if part is not None:
            self.by_label[name, part] = self.by_label.get((name, part), 0.0) + value

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def part(self, name: str, label: str) -> float | None:
        return self.by_label.get((name, label))

    def histogram(self, name: str) -> Histogram | None:
        per = self.buckets.get(name)
        if not per or math.inf not in per:
            return None  # no buckets, or cut before the +Inf bucket
        buckets = tuple(sorted(per.items()))
        count = self.values.get(name + "_count", per[math.inf])
        return Histogram(buckets, count, self.values.get(name + "_sum"))


def _build(text: str, latency: bool) -> SglangScrape:
    sums = _Sums()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if not name.startswith(("sglang:", "sglang_")):
                continue
            sums.add(name[7:], sample.labels, float(sample.value))
    if not sums.samples:
        raise SglangParseError("no SGLang metrics in the text (expected sglang:num_running_reqs)")

    usage_parts = [
        v
        for v in (sums.get(n) for n in ("full_token_usage", "swa_token_usage", "mamba_usage"))
        if v is not None
    ]
    hits = [sums.part("prefill_effective_tokens_total", m) for m in _HIT_MODES]
    cached = sums.part("cached_tokens_total", "total")
    return SglangScrape(
        model=sums.model,
        running=sums.get("num_running_reqs"),
        queued=sums.get("num_queue_reqs"),
        gen_throughput=sums.get("gen_throughput"),
        token_usage=max(usage_parts) if usage_parts else sums.get("token_usage"),
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
        itl=sums.histogram("inter_token_latency_seconds") if latency else None,
        samples=sums.samples,
    )


_HIT_MODES = ("device_hit", "host_hit", "storage_hit")
