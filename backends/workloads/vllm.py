"""``VllmTracker``: one vLLM server's live numbers, built on the SGLang tracker's scrape,
rate, quantile and hang machinery (``sglang.py``): a vLLM page parses into a
``VllmScrape`` whose shared fields mean what SGLang's do (``parsers/vllm.py``).

What is vLLM's own here: the prompt-token and preemption rates, the ITL p95, finished
requests by reason (and those of the last minute that are not ``stop`` or ``length``:
aborted, failed), the drafter's acceptance over the rate window (vLLM's own PromQL,
``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``: the counters' rates, not their
totals since start, so a drafter that decays is seen), the periodic stats line of its
log (progress only while it says tokens were generated: a wedged engine prints one
``Avg generation throughput: 0.0`` line with requests running, then nothing, 0.34.0's
``LoggingStatLogger`` logging at DEBUG after two idle intervals), the engine core's death in
its log, and the probe: ``/health`` (vLLM's answers 200 while the engine is wedged, so
it is evidence, never the verdict).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumon.backends.parsers.vllm import (
    VllmLogStats,
    VllmParseError,
    VllmScrape,
    engine_died,
    parse_vllm_log_line,
    parse_vllm_metrics,
)
from gpumon.backends.workloads.sglang import (
    Hung,
    ServerInfo,
    SglangTracker,
    _delta,
    _quantiles,
    _span,
    parse_server_info,
    written_at,
)

HUNG_AFTER_S = 60.0  # ``[hosts.NAME.vllm] hung_after_s``
KV_PRESSURE_MIN = 0.9  # ``[hosts.NAME.vllm] kv_pressure_min``: KV use this high ...
# ... with preemptions rising: requests are pushed out of the cache and recomputed


@dataclass(frozen=True, slots=True)
class Wedged(Hung):
    """A vLLM server with requests and no generation token for ``silent_s``."""

    def headline(self) -> str:
        """``vllm :8000 wedged: 37 running, 4 waiting, no token for 94 s``."""
        waiting = f", {self.queued} waiting" if self.queued else ""
        return (
            f"vllm :{self.port} wedged: {self.running} running{waiting}, "
            f"no token for {self.silent_s:.0f} s"
        )


def _log_epoch(stamp: str | None, t: float) -> float | None:
    """vLLM's ``11-29 14:32:00`` (no year) as local epoch seconds in the year of ``t``
    (the year before where that lands in the future: a log read across New Year)."""
    if stamp is None:
        return None
    year = time.localtime(t).tm_year
    for y in (year, year - 1):
        try:
            at = time.mktime(time.strptime(f"{y}-{stamp}", "%Y-%m-%d %H:%M:%S"))
        except (ValueError, OverflowError):
            return None
        if at <= t + 60:
            return at
    return None


class VllmTracker(SglangTracker):
    """Live numbers of the vLLM server on ``port`` (module docstring)."""

    engine = "vllm"

    def __init__(self, port: int, **kwargs: Any) -> None:
        super().__init__(port, **kwargs)
        self.prompt_tokens_per_s: float | None = None
        self.preemptions_per_s: float | None = None
        self.preemptions_total: float | None = None
        self.itl_p95_s: float | None = None
        self.finished: tuple[tuple[str, float], ...] = ()
        self.engines: int | None = None
        self.last_stats_line: tuple[float, str] | None = None  # (its time, the line)
        self.engine_dead: tuple[float, str] | None = None  # (when, the log's line)
        # requests that finished in about the last minute, by reason: not stop or length
        # (None: the page has no request_success_total, or no minute to compare yet)
        self.failed_recent: tuple[tuple[str, float], ...] | None = None
        self.pid: int | None = None  # its API server's, from discovery

    def observe_info(self, status: int | None, body: str) -> None:
        """``/version``'s ``{"version": "0.8.5"}``: the release, beside the sizes its
        command line gave (``observe_processes``)."""
        info = parse_server_info(body) if status == 200 else None
        if info is not None:
            self.info = replace(self.info or ServerInfo(), version=info.version)

    def observe_processes(
        self, parallel: Mapping[str, int], minors: Sequence[int], pid: int | None = None
    ) -> None:
        """What the agent's discovery says of the server's processes: the parallel sizes
        of its command line (``tp``, ``pp``, ``dp``; vLLM's default 1 where not given),
        the ``/dev/nvidiaN`` its engine core and workers hold, its API server's PID (as
        the watched machine numbers it; None: not said)."""
        old = self.info or ServerInfo()
        sizes = {k: parallel.get(k, 1) for k in ("tp", "pp", "dp")}
        self.info = replace(old, tp=sizes["tp"], pp=sizes["pp"], dp=sizes["dp"])
        self.minors = tuple(sorted(set(minors)))
        if pid is not None:
            self.pid = pid

    def observe_text(self, text: str, t: float, *, at: float | None = None) -> bool:
        try:
            scrape = parse_vllm_metrics(text, latency=self.wants_latency(t))
        except VllmParseError as e:
            self.page_unread(t, str(e))
            return False
        self.observe(scrape, t, at=at)
        return True

    def observe(self, scrape: Any, t: float, *, at: float | None = None) -> None:
        spec = (self.spec_accept_length, self.spec_accept_rate)
        super().observe(scrape, t, at=at)
        if not isinstance(scrape, VllmScrape):
            return
        self._spec_window(scrape, t, spec)
        slow = self._base(t, self.slow_window_s)
        self.failed_recent = None if slow is None else _failed(scrape, slow.scrape)
        self.preemptions_total = scrape.preemptions_total
        self.finished = scrape.finished
        self.engines = scrape.engines
        base = self._base(t, self.rate_window_s)
        span = None if base is None else _span(t, at, base)
        if base is None or span is None or span < self.min_rate_span_s:
            self.prompt_tokens_per_s = self.preemptions_per_s = None
        else:
            old = base.scrape
            prompt = _delta(scrape.prompt_tokens, old.prompt_tokens)
            old_pre = old.preemptions_total if isinstance(old, VllmScrape) else None
            pre = _delta(scrape.preemptions_total, old_pre)
            self.prompt_tokens_per_s = None if prompt is None or prompt < 0 else prompt / span
            self.preemptions_per_s = None if pre is None or pre < 0 else pre / span
        if scrape.itl is not None:
            itl_base = self._base(t, self.slow_window_s, "itl")
            self.itl_p95_s = _quantiles(scrape.itl, itl_base.scrape.itl if itl_base else None)[1]

    def _spec_window(
        self, scrape: VllmScrape, t: float, before: tuple[float | None, float | None]
    ) -> None:
        """The drafter's acceptance over the rate window (the base's counters to these):
        mean acceptance length ``1 + accepted / drafts`` and rate ``accepted / draft
        tokens``, vLLM's formulas over rates. No draft in the window (no decoding) keeps
        the last window's; before any window, the totals since start (the parser's)."""
        base = self._base(t, self.rate_window_s)
        old = base.scrape if base is not None else None
        if not isinstance(old, VllmScrape) or scrape.spec_accepted is None:
            return
        accepted = _delta(scrape.spec_accepted, old.spec_accepted)
        drafts = _delta(scrape.spec_drafts, old.spec_drafts)
        tokens = _delta(scrape.spec_draft_tokens, old.spec_draft_tokens)
        if accepted is None or accepted < 0 or not ((drafts or 0) > 0 or (tokens or 0) > 0):
            if before[0] is not None or before[1] is not None:
                self.spec_accept_length, self.spec_accept_rate = before
            return
        if drafts is not None and drafts > 0:
            self.spec_accept_length = 1.0 + accepted / drafts
        if tokens is not None and tokens > 0:
            self.spec_accept_rate = min(accepted / tokens, 1.0)

    def observe_log_line(self, line: str, t: float, *, read_at: float | None = None) -> bool:
        """A server log line that came at ``t``, read at ``read_at`` by the clock its stamp
        is on (the target's; None: ``t``'s, as ``SglangTracker.observe_log_line``): the
        periodic stats line (progress while it says tokens were generated), or the engine
        core's death; True for a stats line."""
        if engine_died(line):
            if self.engine_dead is None:
                self.engine_dead = (t, line.strip()[:200])
            return False
        stats = parse_vllm_log_line(line)
        if stats is None:
            return False
        self._stats_line(stats, line, t, t if read_at is None else read_at)
        return True

    def _stats_line(self, stats: VllmLogStats, line: str, t: float, read: float) -> None:
        if self.watched_since is None:
            self.watched_since = t
        # the stamp against the target's reading, never against gpumon's clock
        at = written_at(_log_epoch(stats.time, read), t, read)
        self.last_stats_line = (at, line.strip())
        if stats.gen_tokens_per_s > 0 or stats.prompt_tokens_per_s > 0:
            if self.log_progress_at is None or at > self.log_progress_at:
                self.log_progress_at = at
            self.engine_dead = None  # it serves again: a new engine
        if self._last_scrape_t is None:  # metrics not read (yet): the line's numbers
            self.up, self.stale, self.last_update = True, False, t
            self.running, self.queued = float(stats.running), float(stats.waiting)
            self.token_usage = stats.kv_usage
            self.gen_tokens_per_s, self.gen_tokens_per_s_source = stats.gen_tokens_per_s, "log"
            self.prompt_tokens_per_s = stats.prompt_tokens_per_s

    def hung(self, t: float, after_s: float = HUNG_AFTER_S, *, early: bool = False) -> Hung | None:
        verdict = super().hung(t, after_s)  # vLLM's log says no failed health check
        if verdict is None:
            return None
        last = self.last_stats_line
        line = None if last is None else (last[1], max(t - last[0], 0.0))
        return Wedged(verdict.port, verdict.running, verdict.queued, verdict.silent_s, line)

    def health_text(self, t: float, within_s: float, silent_s: float) -> str | None:
        """What the last ``/health`` said: ``/health answered 200`` (the engine looks
        alive to a load balancer), or that it did not answer."""
        if self.health is None or t - self.health[0] > within_s:
            return None
        _, status, error = self.health
        if status is not None:
            return f"/health answered {status}"
        return f"/health did not answer ({error or 'no answer'})"

    def page_error(self) -> str | None:
        text = super().page_error()
        return None if text is None else text.replace("sglang :", "vllm :", 1)

    def kv_pressure(self, minimum: float = KV_PRESSURE_MIN) -> str | None:
        """``vllm :8000 KV cache 97 % full, 2.5 preemptions/s`` while the KV use is at
        least ``minimum`` and requests are being preempted; None otherwise."""
        usage, rate = self.token_usage, self.preemptions_per_s
        if self.stale or not self.up or usage is None or rate is None:
            return None
        if usage < minimum or rate <= 0:
            return None
        return (
            f"vllm :{self.port} KV cache {usage:.0%} full, {rate:.1f} preemptions/s: "
            "requests are evicted and recomputed"
        )

    def dead_text(self) -> str | None:
        """The engine core died (its log) while the API server still answers."""
        if self.engine_dead is None or self.up is not True:
            return None
        _, line = self.engine_dead
        return f"vllm :{self.port} engine core dead, API server still answering; its log: {line}"

    def snapshot_json(self) -> dict[str, Any]:
        out = super().snapshot_json()

        def r(v: float | None, digits: int) -> float | None:
            return None if v is None else round(v, digits)

        out["waiting"] = out["queued"]
        out.update(
            {
                "engines": self.engines,
                "prompt_tokens_per_s": r(self.prompt_tokens_per_s, 2),
                "itl_p95_s": r(self.itl_p95_s, 5),
                "preemptions_per_s": r(self.preemptions_per_s, 3),
                "preemptions_total": None
                if self.preemptions_total is None
                else round(self.preemptions_total),
                "finished_by_reason": {k: round(v) for k, v in self.finished} or None,
                "failed_last_minute": None
                if self.failed_recent is None
                else {k: round(v) for k, v in self.failed_recent},
                "engine_dead": self.engine_dead[1] if self.engine_dead else None,
            }
        )
        for key in (  # SGLang's own families: vLLM has none of them
            "spec_verify_calls_total",
            "spec_verify_per_s",
            "retracted_reqs",
            "retracted_requests_total",
            "paused_reqs",
            "aborted_requests_total",
            "retracted_in_log",
        ):
            out.pop(key, None)
        return out


# ``request_success_total``'s reasons of a request served (vllm/v1/engine/__init__.py
# FinishReason, 0.34.0: STOP, LENGTH); the others are shown: ABORT (the client's), ERROR
# (a 500), REPETITION (a repetitive pattern cut off)
SERVED_REASONS = frozenset({"stop", "length"})


def _failed(new: VllmScrape, old: Any) -> tuple[tuple[str, float], ...] | None:
    """Requests that finished between ``old`` and ``new`` for a reason not served, by
    reason (each such reason the page has, 0 too); None without the family."""
    if not new.finished:
        return None
    before = dict(old.finished) if isinstance(old, VllmScrape) else {}
    out = []
    for reason, total in new.finished:
        if reason in SERVED_REASONS:
            continue
        delta = total - before.get(reason, 0.0)
        out.append((reason, delta if delta >= 0 else total))  # went back: a restart
    return tuple(out)
