"""``SglangTracker``: one SGLang server's live numbers from successive ``/metrics`` scrapes
(or its log lines when metrics are off), and ``sglang_totals`` over a host's servers.

Rates come from counter deltas between scrapes, never from one scrape: until two good
scrapes in a row exist a rate is None. A counter going down means the server restarted:
the tracker starts over from that scrape instead of reporting a negative rate. A failed
fetch marks the server down and keeps the last values (``stale``).

Times (``t``) are when the data came, on the monitor's judging clock (``Workloads.now``:
monotonic, so a wall-clock step makes no server hung and hides no hang; a test's or a
replay's one clock alike). Two come from the target and are compared only with times of
its own clock: a scrape's reading time (``at``, the agent's: a rate spans the readings)
and a log line's stamp, whose age is taken against the time the agent read the line
(``read_at``) and then counted back from when it came.

The generation rate says where it came from (``gen_tokens_per_s_source``): ``counter``
(``realtime_tokens_total{mode="decode"}``, bumped every decode step, 0.5.7+), ``gauge``
(SGLang's ``gen_throughput``, before 0.5.7: ``generation_tokens_total`` only grows when a
request finishes, so it is never used for the rate) or ``log`` (metrics off). In log mode
every stats-logging rank prints its own line (``[... DP3 TP3]``): the latest line of each
leader is kept and the leaders are summed, as on the metrics page.

Hung (``hung``): requests are running or queued and no token was made for
``hung_after_s``. Progress is any of the server's token counters moving between two
scrapes (``realtime_tokens_total`` decode and prefill modes from 0.5.7, else
``generation_tokens_total`` / ``prompt_tokens_total``), or a ``Decode batch`` /
``Prefill batch`` log line, dated by its own stamp (a log read from its tail says when
the server last decoded, before gpumon watched). ``gen_throughput`` is never progress: it
keeps its last value while nothing is decoded. With metrics on, the counters must also be
seen standing still over two scrapes ``MIN_RATE_SPAN_S`` apart, so a log stamp in another
time zone cannot make a busy server hung; a server whose decode counter is still 0 (it
just started) or that restarted counts from when it was first seen.

Before ``hung_after_s`` the server's own log can say it: ``Health check failed.`` (its
tokenizer got no token for a ``/health_generate`` probe in SGLANG_HEALTH_CHECK_TIMEOUT, a
load balancer's or gpumon's) with no progress since. Then ``hung`` gives an early verdict
(``Hung.early``), a warning that the same alert raises to critical at ``hung_after_s``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.parsers.sglang import (
    Histogram,
    SglangLogStats,
    SglangParseError,
    SglangScrape,
    histogram_quantile,
    log_line_stamp,
    parse_sglang_log_line,
    parse_sglang_metrics,
)

RATE_WINDOW_S = 5.0  # throughput: counter delta over (about) the last 5 s
# No counter rate over less than this: a scrape's time is its request's midpoint, and on a
# loaded target an answer late by a quarter second made the first rate of two scrapes
# 0.5 s apart read 1.8x the server's (a rate waits a second or two more to be right)
MIN_RATE_SPAN_S = 2.0
SLOW_WINDOW_S = 60.0  # cache hit rate and latency quantiles: over the last minute
QUANTILE_MIN_COUNT = 50  # requests a latency quantile's window needs (a p95: 2 or 3 above it)
LATENCY_EVERY_S = 10.0  # histograms are 3/4 of the parsing cost; read them this often
LOG_FALLBACK_S = 30.0  # log lines count only when no metrics scrape came for this long
LOG_RANK_TTL_S = 120.0  # a rank whose last stats line is this old no longer counts
HISTORY_LEN = 120
# ``KV cache pool is full. Retract requests. #retracted_reqs: 3, ...`` (0.5.x) and the older
# ``Decode out of memory happened. #retracted_reqs: 1, ...`` (docs/formats.md 5.5)
_RETRACTED = lazy_pattern(
    r"(?:KV cache pool is full\. Retract requests\.|Decode out of memory happened\.) "
    r"#retracted_reqs: (\d{1,9})"
)
# what SGLang's tokenizer logs when /health_generate got no token in its timeout
# (python/sglang/srt/entrypoints/http_server.py ``health_generate``; docs/formats.md 6.11)
_HEALTH_FAILED = "Health check failed. Server couldn't get a response"
HUNG_AFTER_S = 60.0  # ``[hosts.NAME.sglang] hung_after_s``
SPEC_ACCEPT_MIN = 1.5  # ``[hosts.NAME.sglang] spec_accept_min``
SPEC_LOW_FOR_S = 60.0  # the accept length stays below the minimum this long: a warning
# SGLang's /health_generate waits SGLANG_HEALTH_CHECK_TIMEOUT (20 s) for a token, then
# answers 503: the probe waits a little longer than that.
HEALTH_PROBE_TIMEOUT_S = 25.0
# A page that cannot be read this many scrapes in a row is an ``sglang_error``: one page cut
# short is a server killed mid-answer (stopped, not broken)
UNREADABLE_SCRAPES = 2
# The agent's errors (remote/fetch.py) for an answer that came but cannot be read
_UNREADABLE_ERRORS = ("page larger than", "connection closed mid-answer")
HEALTH_SLOW_S = 15.0  # a 503 this late is SGLang's own health timeout, not a quick refusal


@dataclass(frozen=True, slots=True)
class _RankLine:
    """The latest stats of one logging rank, and its latest decode throughput."""

    t: float
    stats: SglangLogStats
    gen_throughput: float | None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/server_info`` (0.5.6+) or ``/get_server_info`` says about a server."""

    model: str | None = None
    version: str | None = None
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    dp_attention: bool = False
    max_total_tokens: float | None = None

    @property
    def parallel(self) -> str | None:
        """``"DP 8 (attention), TP 8"``, ``"TP 2"``, ``"TP 1"``; None when unknown."""
        if self.tp is None and self.dp is None and self.pp is None:
            return None
        parts = []
        if (self.dp or 1) > 1:
            parts.append(f"DP {self.dp}" + (" (attention)" if self.dp_attention else ""))
        if (self.pp or 1) > 1:
            parts.append(f"PP {self.pp}")
        if (self.tp or 1) > 1 or not parts:
            parts.append(f"TP {self.tp or 1}")
        return ", ".join(parts)

    @property
    def short(self) -> str | None:
        """The parallelism for a narrow cell: ``"DP 8 TP 8"``, ``"TP 2"``; None for one GPU."""
        text = self.parallel
        if text is None or text == "TP 1":
            return None
        return text.replace(" (attention)", "").replace(",", "")


def parse_server_info(body: str) -> ServerInfo | None:
    """The parallelism, model and version in a server-info JSON body; None if not JSON."""
    try:
        raw = untrusted.loads(body)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None

    def size(key: str) -> int | None:
        v = raw.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    def text(key: str) -> str | None:
        v = raw.get(key)
        return v if isinstance(v, str) and v else None

    total = raw.get("max_total_num_tokens")
    attn_dp = size("attn_dp_size")  # 0.5.23: --attn-dp-size, beside the deprecated flag
    dp = max(size("dp_size") or 1, attn_dp or 1) if size("dp_size") or attn_dp else None
    return ServerInfo(
        model=text("served_model_name") or text("model_path"),
        version=text("version"),
        tp=size("tp_size"),
        dp=dp,
        pp=size("pp_size"),
        dp_attention=raw.get("enable_dp_attention") is True or (attn_dp or 1) > 1,
        max_total_tokens=float(total) if isinstance(total, int | float) and total > 0 else None,
    )


@dataclass(frozen=True, slots=True)
class Hung:
    """A server with requests and no token for ``silent_s`` seconds (``SglangTracker.hung``).

    ``last_decode``: the log's last ``Decode batch`` line and its age in seconds, when the
    log is followed."""

    port: int
    running: int
    queued: int
    silent_s: float
    last_decode: tuple[str, float] | None = None
    early: bool = False  # not yet ``hung_after_s``: its log's failed health check says so

    def headline(self) -> str:
        """``sglang :30000 hung: 37 running, no token for 94 s`` (early: ``... may be
        hung: ...``)."""
        queued = f", {self.queued} queued" if self.queued else ""
        hung = "may be hung" if self.early else "hung"
        return (
            f"sglang :{self.port} {hung}: {self.running} running{queued}, "
            f"no token for {self.silent_s:.0f} s"
        )


def stamp_epoch(stamp: str | None) -> float | None:
    """The epoch seconds of a log stamp ``2026-11-29 14:32:00`` read as local time; None
    when there is none or it does not parse."""
    if stamp is None:
        return None
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _written(stamp: str | None, t: float, read: float) -> float:
    """When a log line stamped ``stamp`` was written, on the clock of ``t`` (when it came):
    its age when it was read at ``read`` (by the clock the stamp is on), back from ``t``;
    ``t`` itself without a stamp, or for one later than its reading (never after it came).
    The stamp is never compared with ``t``'s clock: a wall-clock step of either side made
    every line an hour old (a busy server hung) or half an hour new (a hang unseen)."""
    return written_at(stamp_epoch(stamp), t, read)


def written_at(stamped: float | None, t: float, read: float) -> float:
    """``_written`` for a stamp already read as epoch seconds (None: no stamp); vLLM's
    lines spell their stamps their own way."""
    return t if stamped is None else t - max(read - stamped, 0.0)


@dataclass(frozen=True, slots=True)
class _Point:
    t: float  # when the scrape came (the judging clock)
    scrape: SglangScrape
    at: float | None = None  # when the target read it (the agent's clock), where said


def _span(t: float, at: float | None, base: _Point) -> float:
    """Seconds between ``base`` and a scrape that came at local ``t``, read at ``at``: by
    the target's clock where both say it (when the page was read, which a rate needs; a
    loaded link or event loop delays the arrival, not the reading), else by arrival."""
    return at - base.at if at is not None and base.at is not None else t - base.t


def _delta(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else new - old


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or not whole > 0:
        return None
    return min(max(part / whole, 0.0), 1.0)


class SglangTracker:
    """Live numbers of the SGLang server on ``port`` (see the module docstring)."""

    engine = "sglang"  # as its alerts' texts name it: ``sglang :30000``

    def __init__(
        self,
        port: int,
        *,
        rate_window_s: float = RATE_WINDOW_S,
        slow_window_s: float = SLOW_WINDOW_S,
        latency_every_s: float = LATENCY_EVERY_S,
        history_len: int = HISTORY_LEN,
        min_rate_span_s: float = MIN_RATE_SPAN_S,
    ) -> None:
        self.port = port
        self.rate_window_s = rate_window_s
        self.min_rate_span_s = min(min_rate_span_s, rate_window_s)
        self.slow_window_s = max(slow_window_s, rate_window_s)
        self.latency_every_s = latency_every_s
        self.up: bool | None = None  # None: never fetched
        # the /dev/nvidiaN its process tree holds, its GPUs (vLLM's discovery says them)
        self.minors: tuple[int, ...] = ()
        self.hung_s: float | None = None  # seconds without a token while hung (judge_hung)
        # since when ``hung`` cannot judge for want of a page (a failed or unreadable
        # scrape, the counters' span started over after it): ``hung_holds``
        self.unjudged_since: float | None = None
        self.stale = False  # the values are older than the last attempt
        self.error: str | None = None
        # why the last /metrics page came but could not be read (None: read, or no page),
        # and how many scrapes in a row that has been so
        self.unreadable: str | None = None
        self.unreadable_runs = 0
        self.metrics_enabled: bool | None = None  # False: /metrics said 404
        self.restarts = 0  # counter resets seen
        self.last_update: float | None = None
        self.model: str | None = None
        self.gen_tokens_per_s: float | None = None
        self.gen_tokens_per_s_source: str | None = None  # counter | gauge | log
        self.info: ServerInfo | None = None
        self.running: float | None = None
        self.queued: float | None = None
        self.token_usage: float | None = None
        self.used_tokens: float | None = None
        self.max_total_tokens: float | None = None
        self.cache_hit_rate: float | None = None
        self.cache_parts: tuple[float, float] | None = None  # (cached, all) prompt tokens
        self.ttft_p50_s: float | None = None
        self.ttft_p95_s: float | None = None
        self.itl_p50_s: float | None = None
        self.history: deque[tuple[float, float | None]] = deque(maxlen=history_len)
        self._points: deque[_Point] = deque()
        self._last_scrape_t: float | None = None
        self._last_latency_t: float | None = None
        self._prefills: deque[tuple[float, int, int]] = deque()  # log mode: (t, new, cached)
        self._log_ranks: dict[tuple[int | None, int | None, int | None], _RankLine] = {}
        self._log_t: float | None = None  # the last stats line used
        self._one_rank_page = False  # the last page spoke for one DP rank of several
        # hung: when this run of the server was first seen, when a counter last moved,
        # since when the counters stand still, the last progress line of the log
        self.watched_since: float | None = None
        self._run_seen: float | None = None  # the first scrape of this run of the server
        self.counter_progress_at: float | None = None
        self._frozen_since: float | None = None
        self.log_progress_at: float | None = None
        self.last_decode_line: tuple[float, str] | None = None  # (its time, the line)
        self.health_asked_at: float | None = None  # /health_generate, asked when hung
        # the stamp of the log's last ``Health check failed.`` (a probe that got no token
        # in SGLANG_HEALTH_CHECK_TIMEOUT), from the backlog too: a hang's evidence
        self.health_failed_at: float | None = None
        # speculative decoding (None: no drafter, or not exported) and KV pressure
        self.spec_accept_length: float | None = None
        self.spec_accept_rate: float | None = None
        # verify steps so far (0.5.18+) and per second: a drafter's decode steps moving
        self.spec_verify_calls: float | None = None
        self.spec_verify_per_s: float | None = None
        self.spec_low_since: float | None = None  # accept length below the minimum since
        self._spec_log: deque[tuple[float, float]] = deque()  # (decode line time, length)
        self.retracted: float | None = None
        self.retracted_total: float | None = None
        self.paused: float | None = None
        self.aborted_total: float | None = None
        # #retracted_reqs of the log's retract lines, summed (None: no log line seen)
        self.retracted_log: int | None = None
        self.health: tuple[float, int | None, str | None] | None = None  # (t, status, error)
        self._health_pending = False  # asked, no answer yet
        self._health_waited: float | None = None  # how long the last answer took

    # ------------------------------------------------------------------ feeding it
    def wants_latency(self, t: float) -> bool:
        """Whether the next scrape should include the histograms: until two scrapes in a
        row have them (quantiles need a delta), then every ``latency_every_s``."""
        with_histograms = sum(1 for p in self._points if p.scrape.ttft or p.scrape.itl)
        last = self._last_latency_t
        if with_histograms < 2 or last is None or t < last:
            return True
        return t - last >= self.latency_every_s - 0.05

    def observe_http(
        self,
        status: int | None,
        body: str,
        t: float,
        error: str | None = None,
        *,
        at: float | None = None,
    ) -> None:
        """One fetch of ``/metrics``: status 200 is parsed; 404 means metrics are off
        (the server is up; numbers come from its log); anything else, or no status
        (refused, timeout), marks the server down. A page that came but cannot be read
        (``unreadable``) is said apart from one that did not come: the server is broken,
        not stopped."""
        unreadable = None
        if status == 200:
            if not self.observe_text(body, t, at=at):
                why = (self.error or "").removeprefix("bad /metrics text: ")
                unreadable = f"page cannot be read: {why}"
        elif status is None and error is not None and error.startswith(_UNREADABLE_ERRORS):
            self.mark_down(t, error)
            unreadable = error if error.startswith("page") else f"page cut short: {error}"
        elif status == 404:
            self.up, self.metrics_enabled = True, False
            self.error = "/metrics answers 404: SGLang runs without --enable-metrics"
        else:
            self.mark_down(t, error or f"HTTP {status}")
        self.unreadable = unreadable
        self.unreadable_runs = self.unreadable_runs + 1 if unreadable is not None else 0

    def page_error(self) -> str | None:
        """The ``sglang_error`` text while the server's ``/metrics`` page has been
        unreadable ``UNREADABLE_SCRAPES`` scrapes in a row: ``sglang :24061 /metrics page
        larger than 8 MiB: not read``; None otherwise."""
        if self.unreadable is None or self.unreadable_runs < UNREADABLE_SCRAPES:
            return None
        return f"sglang :{self.port} /metrics {self.unreadable}"

    def observe_text(self, text: str, t: float, *, at: float | None = None) -> bool:
        """Parse a ``/metrics`` body and observe it; False (and ``error`` set, values
        stale) when the text does not parse."""
        try:
            scrape = parse_sglang_metrics(text, latency=self.wants_latency(t))
        except SglangParseError as e:
            self.page_unread(t, str(e))
            return False
        self.observe(scrape, t, at=at)
        return True

    def observe_info(self, status: int | None, body: str) -> None:
        """The server-info answer (fetched once per server start): model, parallelism."""
        info = parse_server_info(body) if status == 200 else None
        if info is not None:
            self.info = info
            self.model = self.model or info.model

    def mark_down(self, t: float, reason: str) -> None:
        """The server did not answer (or ``/health`` failed): keep the last values, stale.

        The next good scrape starts the rates over (they need two scrapes in a row).
        """
        self.up, self.stale, self.error = False, True, reason
        self._points.clear()
        self._frozen_since = None
        self.history.append((t, None))
        self._unjudged(t)

    def page_unread(self, t: float, why: str) -> None:
        """A ``/metrics`` page came at ``t`` but did not parse (``why``): the server is up,
        its values stale."""
        self.up, self.stale, self.error = True, True, f"bad /metrics text: {why}"
        self._unjudged(t)

    def _unjudged(self, t: float) -> None:
        """From ``t`` on, ``hung`` cannot judge for want of a page (``hung_holds``)."""
        if self.unjudged_since is None:
            self.unjudged_since = t

    def observe(self, scrape: SglangScrape, t: float, *, at: float | None = None) -> None:
        """A good scrape at local time ``t`` (read at ``at`` by the target's clock, where
        said: the rates' spans, ``_span``): updates every number."""
        self.up, self.stale, self.error, self.metrics_enabled = True, False, None, True
        if self._points:
            last = self._points[-1]
            if t <= last.t or _went_down(scrape, last.scrape):
                if t > last.t:
                    self.restarts += 1
                    self.watched_since = self._run_seen = t  # a new run: it just started
                    self.counter_progress_at = self.log_progress_at = None
                self._points.clear()
        self._track_progress(scrape, t)
        self._points.append(_Point(t, scrape, at))
        while len(self._points) > 2 and self._points[1].t <= t - self.slow_window_s:
            self._points.popleft()
        self._last_scrape_t = self.last_update = t
        if scrape.ttft is not None or scrape.itl is not None:
            self._last_latency_t = t
        self.model = scrape.model or self.model
        self.running, self.queued = scrape.running, scrape.queued
        self.token_usage = scrape.token_usage
        self.used_tokens, self.max_total_tokens = scrape.used_tokens, scrape.max_total_tokens
        if scrape.spec_accept_length is not None or scrape.spec_verify_calls is not None:
            self.spec_accept_length = scrape.spec_accept_length
            self.spec_accept_rate = scrape.spec_accept_rate
        self.spec_verify_calls = scrape.spec_verify_calls
        self.retracted, self.retracted_total = scrape.retracted, scrape.retracted_total
        self.paused, self.aborted_total = scrape.paused, scrape.aborted_total
        self._rates(scrape, t, at)
        # SGLang 0.4.x pages carry no rank labels and (from 0.4.4 on) keep the most recent
        # DP rank's gauges only: with several DP ranks the log, which every leader writes,
        # is the whole server.
        info = self.info
        self._one_rank_page = info is not None and (info.dp or 1) > 1 and not scrape.ranked
        if self._one_rank_page and self._log_t is not None and t - self._log_t < LOG_FALLBACK_S:
            self._log_numbers()
        self.history.append((t, self.gen_tokens_per_s))

    def observe_log_line(self, line: str, t: float, *, read_at: float | None = None) -> bool:
        """A server log line that came at ``t``, read at ``read_at`` by the clock its stamp
        is on (the target's; None: ``t``'s); True when it was a stats line that was used."""
        read = t if read_at is None else read_at
        stats = parse_sglang_log_line(line)
        if stats is None and _HEALTH_FAILED in line:
            self.health_failed_at = _written(log_line_stamp(line), t, read)
        retracted = _RETRACTED.search(line) if stats is None else None
        # KV pressure: requests pushed back to the queue
        self.retracted_log = (self.retracted_log or 0) + (int(retracted[1]) if retracted else 0)
        if stats is None:
            return False
        self._log_progress(stats, line, t, read)
        return self.observe_log(stats, t)

    # ------------------------------------------------------------------ hung
    def _track_progress(self, scrape: SglangScrape, t: float) -> None:
        """Counter progress: any token counter above the previous scrape's."""
        if self.watched_since is None:
            self.watched_since = t
        if self._run_seen is None:
            self._run_seen = t
        if not self._points:
            self._frozen_since = t
            return
        before = self._points[-1].scrape
        pairs = zip(scrape.counters(), before.counters(), strict=True)
        if any(a is not None and b is not None and a > b for a, b in pairs):
            self.counter_progress_at = self._frozen_since = t
        elif self._frozen_since is None:
            self._frozen_since = self._points[-1].t

    def _log_progress(self, stats: SglangLogStats, line: str, t: float, read: float) -> None:
        """A stats line is progress at its own stamp (never later than it came)."""
        if self.watched_since is None:
            self.watched_since = t
        at = _written(stats.time, t, read)
        if self.log_progress_at is None or at > self.log_progress_at:
            self.log_progress_at = at
        if stats.kind == "decode":
            self.last_decode_line = (at, line.strip())
            extra = dict(stats.extra)
            length, rate = _number(extra.get("accept len")), _number(extra.get("accept rate"))
            recent = self._last_scrape_t is not None and t - self._last_scrape_t < LOG_FALLBACK_S
            if length is not None and not (recent and self.spec_accept_length is not None):
                self.spec_accept_length, self.spec_accept_rate = length, rate
            if length is not None:
                self._spec_log.append((at, length))
                while self._spec_log and self._spec_log[0][0] < t - 2 * SPEC_LOW_FOR_S:
                    self._spec_log.popleft()

    def hung(self, t: float, after_s: float = HUNG_AFTER_S, *, early: bool = False) -> Hung | None:
        """The hung verdict at ``t`` (module docstring), or None: the server is down or
        unknown, idle (nothing running or queued), making tokens, or not yet watched
        long enough to tell. With ``early``, before ``after_s`` an early one
        (``Hung.early``) where its log's last failed health check came after its last
        progress."""
        if self.up is not True or self.stale or self.watched_since is None:
            return None
        running, queued = round(self.running or 0), round(self.queued or 0)
        if running + queued <= 0:
            return None
        if self.metrics_enabled:
            frozen = self._frozen_for(t)
            if frozen is None or frozen < self.min_rate_span_s:
                # too short a span to judge by (the first pages, or their span started
                # over): a verdict the log gave before them holds (``hung_holds``)
                self._unjudged(t)
                return None
        self.unjudged_since = None  # judged again, from pages
        last = self._last_progress()
        silent = t - last
        failed = self.health_failed_at
        before = silent < after_s
        if before and (not early or failed is None or failed < last):
            return None
        decode = None
        if self.last_decode_line is not None:
            at, text = self.last_decode_line
            decode = (text, max(t - at, 0.0))
        return Hung(self.port, running, queued, silent, decode, early=before)

    def _last_progress(self) -> float:
        """When a token was last seen made (a counter, a log line), else when this run of
        the server was first seen; ``hung``'s silence is counted from it."""
        known = [x for x in (self.counter_progress_at, self.log_progress_at) if x is not None]
        if self._never_decoded() and self._run_seen is not None:
            known.append(self._run_seen)  # this run just started: older lines are another's
        if known:
            return max(known)
        assert self.watched_since is not None  # hung's callers: watched
        return self.watched_since

    def hung_holds(self, t: float, after_s: float) -> bool:
        """Whether a hung verdict that is up stays up at ``t`` though ``hung`` gives none
        for want of a page: its last scrape failed or could not be read (a loaded target's
        server misses the agent's 2 s timeout; a wedged one may too), or the counters' span
        started over after it, or is still too short: the first pages after a verdict the
        server's log gave before any page was read (vLLM's stats line: a loaded demo's log
        came before its first scrape). No page is no token: it holds while nothing says a token
        came (the silence is still ``after_s`` or more) or the work went (the last values
        still have requests), for at most ``after_s`` without a judged page (longer: a
        server stopped or gone, not hung). Ends then as it would have; at once where the
        port refuses the connection (a hung server's process still listens: one that is
        not there is stopped, or restarting, not hung)."""
        since = self.unjudged_since
        if since is None or self.watched_since is None or t - since >= after_s:
            return False
        if self.up is False and "connection refused" in (self.error or "").lower():
            return False  # nothing listens on its port: the server went (K stopped it)
        if round(self.running or 0) + round(self.queued or 0) <= 0:
            return False
        return t - self._last_progress() >= after_s

    def _frozen_for(self, t: float) -> float | None:
        """How long the counters have stood still at ``t``: since the scrape that began it
        came, or, where the target stamped that scrape and the last one, the time between
        their readings, whichever is longer. The rates take the target's span (``_span``), so
        a loaded event loop that takes two scrapes read 2 s apart in one turn gave a rate of
        0 and ended a one-shot's wait, while by arrival they were not 2 s apart and the hung
        server was not said (CI at load 15: ``snapshot --scenario hang`` without it)."""
        frozen = self._frozen_since
        if frozen is None:
            return None
        base = next((p for p in self._points if p.t == frozen), None)
        if base is None or not self._points:
            return t - frozen
        last = self._points[-1]
        return max(t - frozen, _span(last.t, last.at, base))

    def wants_health_probe(self, t: float, after_s: float) -> bool:
        """Whether to ask ``/health_generate`` now: asked only while hung (the caller
        says so) and never more than once per ``after_s``; True also marks it asked."""
        asked = self.health_asked_at
        if asked is not None and asked <= t < asked + after_s:
            return False
        if self._health_pending and asked is not None and t < asked + HEALTH_PROBE_TIMEOUT_S + 5:
            return False  # the last one is still under way (SGLang holds it 20 s)
        self.health_asked_at, self._health_pending = t, True
        return True

    def observe_health(self, status: int | None, error: str | None, t: float) -> None:
        """The answer to ``/health_generate`` (None: none came, ``error`` says why)."""
        self.health = (t, status, error)
        asked = self.health_asked_at
        self._health_waited = None if asked is None or not self._health_pending else t - asked
        self._health_pending = False

    def health_text(self, t: float, within_s: float, silent_s: float) -> str | None:
        """What the last ``/health_generate`` said, if it came within ``within_s``:
        ``/health_generate timed out``, ``/health_generate answered 503``; else, where the
        log says a health check failed in the ``silent_s`` without progress (gpumon's
        probe or a load balancer's, before gpumon came too), ``... timed out (its log)``."""
        if self.health is None or t - self.health[0] > within_s:
            failed = self.health_failed_at
            if failed is not None and failed >= t - silent_s:
                return "/health_generate timed out (its log)"
            return None
        _, status, error = self.health
        waited = self._health_waited
        if status == 503 and waited is not None and waited >= HEALTH_SLOW_S:
            # SGLang's answer when no token came in its health timeout (20 s)
            return f"/health_generate timed out (503 after {waited:.0f} s)"
        if status is not None:
            return f"/health_generate answered {status}"
        if error is not None and "timed out" in error:
            return "/health_generate timed out"
        return f"/health_generate did not answer ({error or 'no answer'})"

    def spec_low(self, t: float, minimum: float = SPEC_ACCEPT_MIN) -> float | None:
        """Seconds the accept length has stayed below ``minimum`` while the server
        decodes (tokens come: a rate above 0), or None (no drafter, above the minimum,
        not decoding: an idle server's gauge keeps its last batch's value)."""
        length = self.spec_accept_length
        decoding = (self.gen_tokens_per_s or 0.0) > 0 and not self.stale and self.up is True
        if length is None or length >= minimum or not decoding:
            self.spec_low_since = None
            return None
        if self.spec_low_since is None:
            self.spec_low_since = t
        # the log's decode lines say how long before that it was already low
        since = self.spec_low_since
        for at, value in reversed(self._spec_log):
            if value >= minimum:
                break
            since = min(since, at)
        return t - since

    def _never_decoded(self) -> bool:
        """The newest scrape's generated-token counter is 0: a server that just started."""
        if not self._points:
            return False
        scrape = self._points[-1].scrape
        made = scrape.decode_tokens
        if made is None:
            made = scrape.generation_tokens
        return made is not None and made <= 0

    def observe_log(self, stats: SglangLogStats, t: float) -> bool:
        """A parsed stats line. Used only while no metrics scrape came for
        ``LOG_FALLBACK_S`` (metrics off), or while the pages speak for one DP rank of
        several (SGLang 0.4.x): returns whether it was used."""
        recent = self._last_scrape_t is not None and t - self._last_scrape_t < LOG_FALLBACK_S
        if recent and not self._one_rank_page:
            return False
        self.last_update = self._log_t = t
        self.stale = False
        key = (stats.rank("DP"), stats.rank("PP"), stats.rank("TP"))
        old = self._log_ranks.get(key)
        gen = stats.gen_throughput if stats.kind == "decode" else None
        if gen is None and old is not None:
            gen = old.gen_throughput
        self._log_ranks[key] = _RankLine(t, stats, gen)
        for k in [k for k, v in self._log_ranks.items() if v.t < t - LOG_RANK_TTL_S]:
            del self._log_ranks[k]
        leaders = self._log_numbers()
        if stats.kind == "decode":
            self.history.append((t, self.gen_tokens_per_s))
        elif (
            stats.new_tokens is not None
            and stats.cached_tokens is not None
            and any(r.stats is stats for r in leaders)
        ):
            self._prefills.append((t, stats.new_tokens, stats.cached_tokens))
            while self._prefills and self._prefills[0][0] < t - self.slow_window_s:
                self._prefills.popleft()
            cached = sum(c for _, _, c in self._prefills)
            total = cached + sum(n for _, n, _ in self._prefills)
            self.cache_parts = (float(cached), float(total)) if total else None
            self.cache_hit_rate = _ratio(cached, total)
        return True

    def _log_numbers(self) -> list[_RankLine]:
        """Running, queued, KV usage and (once a decode line came) the rate from the
        latest line of each leader; returns the leaders' lines."""
        leaders = _log_leaders(self._log_ranks)
        self.running = _sum([_f(r.stats.running) for r in leaders])
        self.queued = _sum([_f(r.stats.queued) for r in leaders])
        usage = [r.stats.token_usage for r in leaders if r.stats.token_usage is not None]
        if usage:
            self.token_usage = sum(usage) / len(usage)  # DP ranks hold equal KV pools
        rates = [r.gen_throughput for r in leaders if r.gen_throughput is not None]
        if rates:
            self.gen_tokens_per_s, self.gen_tokens_per_s_source = sum(rates), "log"
        return leaders

    # ------------------------------------------------------------------ rates
    def _base(self, t: float, window: float, want: str | None = None) -> _Point | None:
        """The oldest earlier point inside ``window`` (with histogram ``want``), else the
        newest earlier one."""
        earlier = [p for p in list(self._points)[:-1] if want is None or getattr(p.scrape, want)]
        for p in earlier:
            if p.t >= t - window - 1e-6:
                return p
        return earlier[-1] if earlier else None

    def _rates(self, new: SglangScrape, t: float, at: float | None = None) -> None:
        # the counters' base: the scrape about ``rate_window_s`` ago, read at least
        # ``min_rate_span_s`` before this one (``_span``), else no counter rate
        fast = self._base(t, self.rate_window_s)
        span = None if fast is None else _span(t, at, fast)
        if span is not None and span < self.min_rate_span_s:
            fast = span = None
        slow = self._base(t, self.slow_window_s)
        if new.decode_tokens is None:
            # Before 0.5.7 (or before the first decode step): SGLang's own gauge. The
            # finished-request counter would read 0 during long generations, then spike.
            self.gen_tokens_per_s = new.gen_throughput
            self.gen_tokens_per_s_source = None if new.gen_throughput is None else "gauge"
        else:
            tokens = None if fast is None else _delta(new.decode_tokens, fast.scrape.decode_tokens)
            self.gen_tokens_per_s = None if tokens is None or span is None else tokens / span
            self.gen_tokens_per_s_source = None if self.gen_tokens_per_s is None else "counter"
        verify = (
            None if fast is None else _delta(new.spec_verify_calls, fast.scrape.spec_verify_calls)
        )
        self.spec_verify_per_s = (  # a counter that went back (a reset) gives no rate
            None if verify is None or verify < 0 or span is None else verify / span
        )
        self.cache_parts = None if slow is None else _cache_parts(new, slow.scrape)
        self.cache_hit_rate = _ratio(*self.cache_parts) if self.cache_parts else None
        if new.ttft is not None:
            base = self._base(t, self.slow_window_s, "ttft")
            self.ttft_p50_s, self.ttft_p95_s = _quantiles(
                new.ttft, base.scrape.ttft if base else None
            )
        elif slow is None:
            self.ttft_p50_s = self.ttft_p95_s = None
        if new.itl is not None:
            base = self._base(t, self.slow_window_s, "itl")
            self.itl_p50_s = _quantiles(new.itl, base.scrape.itl if base else None)[0]
        elif slow is None:
            self.itl_p50_s = None

    # ------------------------------------------------------------------ output
    def capacity(self) -> float | None:
        """KV slots of the whole server: the metrics' sum over ranks, else server info's
        (``DataParallelController`` reports DP rank 0's pool: times ``dp_size``)."""
        if self.max_total_tokens is not None:
            return self.max_total_tokens
        info = self.info
        if info is None or info.max_total_tokens is None:
            return None
        return info.max_total_tokens * (info.dp or 1)

    def snapshot_json(self) -> dict[str, Any]:
        """The snapshot object of this server; ``null`` where unknown."""

        def r(v: float | None, digits: int) -> float | None:
            return None if v is None else round(v, digits)

        return {
            "port": self.port,
            "up": self.up,
            "model": self.model,
            "version": self.info.version if self.info else None,
            "parallel": self.info.parallel if self.info else None,
            "gen_tokens_per_s": r(self.gen_tokens_per_s, 2),
            "gen_tokens_per_s_source": self.gen_tokens_per_s_source,
            "running": None if self.running is None else round(self.running),
            "queued": None if self.queued is None else round(self.queued),
            "token_usage": r(self.token_usage, 4),
            "cache_hit_rate": r(self.cache_hit_rate, 4),
            "ttft_p50_s": r(self.ttft_p50_s, 4),
            "ttft_p95_s": r(self.ttft_p95_s, 4),
            "itl_p50_s": r(self.itl_p50_s, 5),
            "spec_accept_length": r(self.spec_accept_length, 3),
            "spec_accept_rate": r(self.spec_accept_rate, 4),
            "spec_verify_calls_total": _int(self.spec_verify_calls),
            "spec_verify_per_s": r(self.spec_verify_per_s, 2),
            "retracted_reqs": _int(self.retracted),
            "retracted_requests_total": _int(self.retracted_total),
            "paused_reqs": _int(self.paused),
            "aborted_requests_total": _int(self.aborted_total),
            "retracted_in_log": self.retracted_log,
            "idle": self.idle,
        }

    @property
    def idle(self) -> bool | None:
        """Up and answering with no request running or queued: a server without traffic
        (its GPUs at 0 % keep its KV cache pool: not held and idle). None while that is
        not known (down, stale, or its numbers not read)."""
        if not self.up or self.stale or self.running is None or self.queued is None:
            return None
        return self.running == 0 and self.queued == 0


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


def _number(text: str | None) -> float | None:
    """A log item's number (``1.04``), or None."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _f(v: int | None) -> float | None:
    return None if v is None else float(v)


def _log_leaders(
    ranks: dict[tuple[int | None, int | None, int | None], _RankLine],
) -> list[_RankLine]:
    """The stats-logging leaders among the ranks heard: the first pipeline stage, and per
    DP group its lowest TP rank (``--enable-metrics-for-all-schedulers`` makes TP
    followers print the same batch before 0.5.10)."""
    stages = [pp for _, pp, _ in ranks if pp is not None]
    first = min(stages) if stages else None
    best: dict[int | None, tuple[int, _RankLine]] = {}
    for (dp, pp, tp), line in ranks.items():
        if pp != first:
            continue
        tp_rank = -1 if tp is None else tp
        if dp not in best or tp_rank < best[dp][0]:
            best[dp] = (tp_rank, line)
    return [line for _, line in best.values()]


def _went_down(new: SglangScrape, old: SglangScrape) -> bool:
    pairs = zip(new.counters(), old.counters(), strict=True)
    return any(a is not None and b is not None and a < b for a, b in pairs)


def _cache_parts(new: SglangScrape, old: SglangScrape) -> tuple[float, float] | None:
    """(cached, all) prompt tokens between two scrapes, from the best counters present."""
    cache = _delta(new.prefill_cache_tokens, old.prefill_cache_tokens)
    compute = _delta(new.prefill_compute_tokens, old.prefill_compute_tokens)
    if cache is not None and compute is not None:
        return cache, cache + compute
    hit = _delta(new.effective_hit_tokens, old.effective_hit_tokens)
    fresh = _delta(new.effective_input_tokens, old.effective_input_tokens)
    if hit is not None and fresh is not None:
        return hit, hit + fresh
    cached = _delta(new.cached_tokens, old.cached_tokens)
    prompt = _delta(new.prompt_tokens, old.prompt_tokens)
    if cached is not None and prompt is not None:
        return cached, prompt
    return None


def _quantiles(new: Histogram, old: Histogram | None) -> tuple[float | None, float | None]:
    """p50 and p95 of the requests between ``old`` and ``new`` (the last minute); of every
    request since the server started (``new`` alone) while that window holds fewer than
    ``QUANTILE_MIN_COUNT``: a p95 of the two or three requests a one-second window of a
    snapshot holds is whichever bucket they fell in (0.095 s, then 1.9 s, at the same
    scenario time). None before a window exists."""
    if old is None:
        return None, None
    window = new.minus(old)
    if window is None:
        return None, None
    if window.count < QUANTILE_MIN_COUNT:
        window = new
    return histogram_quantile(0.5, window.buckets), histogram_quantile(0.95, window.buckets)


@dataclass(frozen=True, slots=True)
class SglangTotals:
    """A host's servers together: sums over the servers that report (not down)."""

    servers: int
    up: int
    gen_tokens_per_s: float | None
    running: int | None
    queued: int | None
    token_usage: float | None  # sum of used KV tokens / sum of capacity
    cache_hit_rate: float | None  # sum of cached prompt tokens / sum of prompt tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "servers": self.servers,
            "up": self.up,
            "gen_tokens_per_s": (
                None if self.gen_tokens_per_s is None else round(self.gen_tokens_per_s, 1)
            ),
            "running": self.running,
            "queued": self.queued,
            "token_usage": None if self.token_usage is None else round(self.token_usage, 4),
            "cache_hit_rate": None
            if self.cache_hit_rate is None
            else round(self.cache_hit_rate, 4),
        }


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return sum(known) if known else None


def sglang_totals(trackers: list[SglangTracker]) -> SglangTotals:
    """Throughput, requests, KV usage and hit rate summed over ``trackers`` that are not
    down; each value is None only when no such server reports it. KV usage is weighted
    by each server's capacity (``max_total_num_tokens``, else the server-info one); where
    a server's capacity is unknown (no ``max_total_num_tokens`` gauge before 0.5.6, and no
    server info) it is the plain mean of the servers' own usage, never a sum."""
    live = [s for s in trackers if s.up is not False]
    running, queued = _sum([s.running for s in live]), _sum([s.queued for s in live])
    kv = [(s.token_usage, s.capacity()) for s in live if s.token_usage is not None]
    caps = [c for _, c in kv if c is not None and c > 0]
    if not kv:
        usage = None
    elif len(caps) == len(kv):
        usage = sum(u * (c or 0.0) for u, c in kv) / sum(caps)
    else:
        usage = sum(u for u, _ in kv) / len(kv)
    parts = [s.cache_parts for s in live if s.cache_parts is not None]
    prompt = sum(a for _, a in parts)
    return SglangTotals(
        servers=len(trackers),
        up=sum(1 for s in trackers if s.up),
        gen_tokens_per_s=_sum([s.gen_tokens_per_s for s in live]),
        running=None if running is None else round(running),
        queued=None if queued is None else round(queued),
        token_usage=usage,
        cache_hit_rate=sum(c for c, _ in parts) / prompt if prompt > 0 else None,
    )
