"""The simulated SGLang servers' numbers as pure functions of scenario time.

Server ``i`` (one per GPU) serves ``MODEL`` and has been up ``UPTIME_AT_T0`` seconds at
scenario time 0 (or since a restart recorded by the caller). Its decode token counter
advances at about ``TOKENS_PER_S[i]`` (1,180 tok/s; 9.4K tok/s for all eight) with a slow
+-4 % swell, so rates are steady but not flat. Gauges change once per decode log
interval (40 decode steps), as SGLang's do. Noise comes from
``random.Random(f"{seed}:sglang:{i}:{k}")``, so the same settings and time always give
the same text. Standard library only.

Scenario ``hang`` (``scenario.HANG_AT``): server ``HUNG_INDEX`` stops at ``HANG_AT`` as a
server stuck in a collective does: its token counters and its log stand still with
``HUNG_RUNNING`` requests running and the queue growing by one every
``HUNG_QUEUE_EVERY_S``; the ``gen_throughput`` gauge keeps its last value (SGLang sets it
only when it logs a decode batch), and 25 s in the tokenizer logs a failed
``/health_generate`` (a load balancer's probe). Server ``SPEC_INDEX`` runs speculative
decoding whose drafter is almost always rejected: accept length ``SPEC_ACCEPT_LENGTH``
from the start, on its page and in its decode lines. Server ``PREFILL_INDEX`` starts one long
chunked prefill at the same moment: its decode counter stands still too, while its
prefill counter grows ``PREFILL_CHUNK`` tokens and it logs a ``Prefill batch`` line every
log interval.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from gpumon.backends.sim.scenario import HANG_AT, SimSettings, wall_time

MODEL = "Qwen/Qwen3-8B"
SERVERS = 8
TOKENS_PER_S = tuple(1180.0 + (i - 3.5) * 4.0 for i in range(SERVERS))  # sum 9440
UPTIME_AT_T0 = 9000.0
RUNNING = 72
QUEUED = 8
TOKEN_USAGE = 0.87
MAX_TOTAL_TOKENS = 344864
CONTEXT_LEN = 40960
DECODE_LOG_STEPS = 40
LOG_INTERVAL_S = DECODE_LOG_STEPS * RUNNING / TOKENS_PER_S[0]  # ~2.44 s between decode logs
PREFILL_PER_DECODE = 2.2  # prompt tokens computed per generated token
CACHE_PER_DECODE = 1.55  # prompt tokens served from the radix cache per generated token
TOKENS_PER_REQUEST = 610.0
STREAMING_SHARE = 0.94
HUNG_INDEX = 0  # hang: the server of GPU 0 (port 30000) hangs
PREFILL_INDEX = 1  # hang: the server of GPU 1 runs one long prefill (not hung)
HUNG_RUNNING = 37
HUNG_QUEUE_EVERY_S = 10.0
HEALTH_FAILED_AFTER_S = 25.0  # a probe at HANG_AT + 5 s times out 20 s later
PREFILL_CHUNK = 8192  # --chunked-prefill-size
PREFILL_RUNNING = 12
SPEC_INDEX = 2  # hang: the server of GPU 2 runs a drafter whose tokens are rejected
SPEC_ACCEPT_LENGTH = 1.04  # tokens per verify step (1 + accepted drafts)
SPEC_DRAFT_TOKENS = 4  # --speculative-num-draft-tokens
_SWELL, _SWELL_PERIOD_S = 0.04, 47.0
_TTFT = (0.6, 0.9)  # log-normal (median s, sigma)
_ITL = (0.055, 0.25)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0)
ITL_BUCKETS = (
    *(0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06),
    *(0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
)


def go_float(value: float) -> str:
    """A number the way prometheus_client prints it: ``72.0``, ``1.1634512e+07``, ``+Inf``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    s = repr(float(value))
    dot = s.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _cdf(x: float, median: float, sigma: float) -> float:
    return 0.5 * (1.0 + math.erf(math.log(x / median) / (sigma * math.sqrt(2.0))))


@dataclass(frozen=True, slots=True)
class ServerState:
    """One server at one moment: counters since its start, gauges of its last log line."""

    index: int
    uptime: float
    decode_tokens: int
    running: int
    queued: int
    token_usage: float
    gen_throughput: float
    log_epoch: int  # number of decode log lines so far
    prefill_extra: int = 0  # prompt tokens of the long prefill (scenario hang)


def decode_tokens(index: int, uptime: float, seed: int) -> int:
    """Tokens generated in ``uptime`` seconds (monotonic in ``uptime``)."""
    u = max(uptime, 0.0)
    phase = random.Random(f"{seed}:sglang:{index}:phase").uniform(0.0, 2 * math.pi)
    w = 2 * math.pi / _SWELL_PERIOD_S
    swell = _SWELL / w * (math.cos(phase) - math.cos(w * u + phase))
    return int(TOKENS_PER_S[index] * (u + swell))


def stopped_at(settings: SimSettings, index: int, started: float) -> float | None:
    """The scenario time at which server ``index`` stopped decoding (hung, or in its long
    prefill), or None: it decodes. A server restarted after it decodes again."""
    if settings.scenario != "hang" or index not in (HUNG_INDEX, PREFILL_INDEX):
        return None
    return HANG_AT if started < HANG_AT else None


def server_state(settings: SimSettings, index: int, t: float, started: float) -> ServerState:
    """Server ``index`` at scenario time ``t``, (re)started at scenario time ``started``."""
    stop = stopped_at(settings, index, started)
    if stop is not None and t >= stop:
        return _stopped_state(settings, index, t, started, stop)
    uptime = max(t - started, 0.0)
    epoch = math.floor(uptime / LOG_INTERVAL_S)
    rng = random.Random(f"{settings.seed}:sglang:{index}:{epoch}")
    at_log = epoch * LOG_INTERVAL_S
    previous = decode_tokens(index, at_log - LOG_INTERVAL_S, settings.seed)
    gen = (decode_tokens(index, at_log, settings.seed) - previous) / LOG_INTERVAL_S
    return ServerState(
        index=index,
        uptime=uptime,
        decode_tokens=decode_tokens(index, uptime, settings.seed),
        running=RUNNING + rng.randint(-2, 2) if epoch > 0 else 0,
        queued=QUEUED + rng.randint(-2, 2) if epoch > 0 else 0,
        token_usage=TOKEN_USAGE + rng.uniform(-0.012, 0.012) if epoch > 0 else 0.0,
        gen_throughput=max(gen, 0.0) if epoch > 0 else 0.0,
        log_epoch=epoch,
    )


def _stopped_state(
    settings: SimSettings, index: int, t: float, started: float, stop: float
) -> ServerState:
    """A server that stopped decoding at ``stop``: its counters and gauges as they were
    then (``gen_throughput`` too: nothing logs a decode batch), its requests as they are."""
    before = server_state(settings, index, stop - 1e-6, started)
    since = t - stop
    if index == HUNG_INDEX:
        running, queued, extra = HUNG_RUNNING, before.queued + int(since / HUNG_QUEUE_EVERY_S), 0
    else:
        chunks = math.floor(since / LOG_INTERVAL_S) + 1
        running, queued, extra = PREFILL_RUNNING, 3, chunks * PREFILL_CHUNK
    return ServerState(
        index=index,
        uptime=max(t - started, 0.0),
        decode_tokens=before.decode_tokens,
        running=running,
        queued=queued,
        token_usage=before.token_usage,
        gen_throughput=before.gen_throughput,
        log_epoch=before.log_epoch,
        prefill_extra=extra,
    )


def _speculative(settings: SimSettings, index: int) -> bool:
    return settings.scenario == "hang" and index == SPEC_INDEX


def _spec_accept_rate() -> float:
    """Accepted drafts over proposed ones, SGLang 0.5.11+'s formula: (length - 1) / the
    drafts proposed per verify step."""
    return (SPEC_ACCEPT_LENGTH - 1.0) / SPEC_DRAFT_TOKENS


def _spec_gauges(settings: SimSettings, index: int) -> tuple[tuple[str, str, float], ...]:
    """SGLang's speculative gauges: 0.0 on a server without a drafter, as it exports."""
    spec = _speculative(settings, index)
    return (
        (
            "spec_accept_length",
            "The average acceptance length of speculative decoding.",
            SPEC_ACCEPT_LENGTH if spec else 0.0,
        ),
        (
            "spec_accept_rate",
            # 0.5.18's text (0.5.11+: drafts only; docs/formats.md 6.13)
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            round(_spec_accept_rate(), 4) if spec else 0.0,
        ),
    )


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


_SCHED = {"engine_type": "unified", "model_name": MODEL, "moe_ep_rank": "0", "pp_rank": "0"}
_SCHED["tp_rank"] = "0"
_TOK = {"engine_type": "unified", "model_name": MODEL}


class _Page:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}"]

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"sglang:{name}{_labels(**labels)} {go_float(value)}")

    def histogram(
        self, name: str, labels: dict[str, str], bounds: tuple[float, ...], counts: list[int]
    ) -> None:
        """``counts`` cumulative per bound, then the +Inf count; ``_sum`` comes first."""
        for bound, count in zip((*bounds, math.inf), counts, strict=True):
            self.sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, count)
        self.sample(f"{name}_count", labels, counts[-1])


def metrics_text(settings: SimSettings, index: int, t: float, started: float) -> str:
    """The ``/metrics`` page of server ``index`` at scenario time ``t`` (v0.5.18 shape)."""
    s = server_state(settings, index, t, started)
    d = s.decode_tokens
    compute, cache = int(d * PREFILL_PER_DECODE) + s.prefill_extra, int(d * CACHE_PER_DECODE)
    requests = int(d / TOKENS_PER_REQUEST)
    used = int(s.token_usage * MAX_TOTAL_TOKENS)
    p = _Page()
    gauges = (
        ("num_running_reqs", "The number of running requests.", s.running),
        ("num_queue_reqs", "The number of requests in the waiting queue.", s.queued),
        ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
        ("gen_throughput", "The generation throughput (token/s).", round(s.gen_throughput, 2)),
        ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("token_usage", "The token usage.", round(s.token_usage, 2)),
        ("full_token_usage", "The token usage for full attention layers.", s.token_usage),
        ("swa_token_usage", "The token usage for SWA layers.", 0.0),
        ("mamba_usage", "The token usage for Mamba layers.", 0.0),
        ("num_used_tokens", "The number of used tokens.", used),
        ("kv_available_tokens", "Number of free token slots in the KV cache pool.", 12000),
        ("kv_used_tokens", "Number of actively used token slots in the KV cache pool.", used),
        (
            "max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            MAX_TOTAL_TOKENS,
        ),
        ("context_len", "Maximum context length.", CONTEXT_LEN),
        ("page_size", "KV cache page size in tokens.", 1),
        ("fwd_occupancy", "Forward pass GPU occupancy percentage.", math.nan),
        ("is_cuda_graph", "Whether the batch is using CUDA graph.", 0.0),
        *_spec_gauges(settings, index),
    )
    for name, help_text, value in gauges:
        p.family(name, "gauge", help_text)
        p.sample(name, _SCHED, value)
    if _speculative(settings, index):
        p.family("spec_verify_calls_total", "counter", "Total number of verify steps.")
        p.sample("spec_verify_calls_total", _SCHED, int(d / SPEC_ACCEPT_LENGTH))
    p.family("num_retracted_reqs", "gauge", "The number of retracted requests.")
    p.sample("num_retracted_reqs", {**_SCHED, "pid": str(2419020 + 168 * index)}, 0)

    ttft_n = (int(requests * STREAMING_SHARE), requests - int(requests * STREAMING_SHARE))
    p.family(
        "time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds."
    )
    for streaming, n in zip(("true", "false"), ttft_n, strict=True):
        labels = {**_TOK, "is_streaming": streaming}
        p.sample("time_to_first_token_seconds_sum", labels, round(n * 0.9, 3))
        counts = [int(n * _cdf(b, *_TTFT)) for b in TTFT_BUCKETS] + [n]
        p.histogram("time_to_first_token_seconds", labels, TTFT_BUCKETS, counts)
    p.family(
        "inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds."
    )
    p.sample("inter_token_latency_seconds_sum", _TOK, round(d * 0.0567, 3))
    counts = [int(d * _cdf(b, *_ITL)) for b in ITL_BUCKETS] + [d]
    p.histogram("inter_token_latency_seconds", _TOK, ITL_BUCKETS, counts)

    counters = (
        ("prompt_tokens_total", "Number of prefill tokens processed.", compute + cache),
        ("generation_tokens_total", "Number of generation tokens processed.", d),
        ("num_requests_total", "Number of requests processed.", requests),
    )
    for name, help_text, total in counters:
        p.family(name, "counter", help_text)
        share = int(total * STREAMING_SHARE)
        p.sample(name, {**_TOK, "is_streaming": "true"}, share)
        p.sample(name, {**_TOK, "is_streaming": "false"}, total - share)
    p.family("cached_tokens_total", "counter", "Number of cached prompt tokens by source.")
    p.sample("cached_tokens_total", {**_TOK, "cache_source": "device"}, cache)
    p.family("realtime_tokens_total", "counter", "Total number of tokens processed.")
    for mode, value in (("prefill_compute", compute), ("prefill_cache", cache), ("decode", d)):
        p.sample("realtime_tokens_total", {**_SCHED, "mode": mode}, value)
    p.family("prefill_effective_tokens_total", "counter", "Effective prefill tokens.")
    modes = (("input", compute), ("device_hit", cache), ("host_hit", 0), ("storage_hit", 0))
    for mode, value in modes:
        p.sample("prefill_effective_tokens_total", {**_SCHED, "mode": mode}, value)
    p.family(
        "http_requests_total", "counter", "Total number of HTTP requests by endpoint and method"
    )
    p.sample(
        "http_requests_total", {"endpoint": "/v1/chat/completions", "method": "POST"}, requests
    )
    p.sample("http_requests_total", {"endpoint": "/metrics", "method": "GET"}, int(s.uptime))
    p.family("process_cpu_seconds_total", "counter", "Total CPU time consumed by this process")
    p.sample("process_cpu_seconds_total", {"component": "tokenizer"}, round(s.uptime * 0.69, 2))
    p.family("http_requests_active", "gauge", "Number of currently active HTTP requests")
    p.sample("http_requests_active", {"endpoint": "/metrics", "method": "GET"}, 1)
    return "\n".join(p.lines) + "\n"


def log_stamp(settings: SimSettings, t: float) -> str:
    """The log stamp of scenario time ``t``: ``[2026-11-29 14:32:00]``."""
    return time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(wall_time(settings, t)))


def log_lines(settings: SimSettings, index: int, epoch: int, started: float) -> list[str]:
    """The log lines of server ``index`` written at its ``epoch``-th decode log (v0.5.18):
    every third one is preceded by a prefill line."""
    t = started + epoch * LOG_INTERVAL_S
    s = server_state(settings, index, t + 1e-6, started)
    stamp = log_stamp(settings, t)
    stop = stopped_at(settings, index, started)
    if stop is not None and t >= stop:
        return _stopped_lines(settings, s, t, stop, stamp)
    used = int(s.token_usage * MAX_TOTAL_TOKENS)
    lines = []
    if epoch % 3 == 0:
        rng = random.Random(f"{settings.seed}:sglang:{index}:{epoch}:prefill")
        new, cached = rng.randint(800, 8192), rng.choice((0, 2048, 4096, 6144))
        lines.append(
            f"{stamp} Prefill batch, #new-seq: {rng.randint(1, 4)}, #new-token: {new}, "
            f"#cached-token: {cached}, token usage: {s.token_usage:.2f}, "
            f"#running-req: {s.running}, #queue-req: {s.queued}, "
            f"#pending-token: {s.queued * 2200}, cuda graph: True, "
            f"input throughput (token/s): {new / LOG_INTERVAL_S:.2f}"
        )
    spec = (
        f"accept len: {SPEC_ACCEPT_LENGTH:.2f}, accept rate: {_spec_accept_rate():.2f}, "
        if _speculative(settings, index)
        else ""
    )
    lines.append(
        f"{stamp} Decode batch, #running-req: {s.running}, #token: {used}, "
        f"token usage: {s.token_usage:.2f}, {spec}cuda graph: True, "
        f"gen throughput (token/s): {s.gen_throughput:.2f}, #queue-req: {s.queued}"
    )
    return lines


def _stopped_lines(
    settings: SimSettings, s: ServerState, t: float, stop: float, stamp: str
) -> list[str]:
    """The log of a stopped server at its log time ``t``: the hung one writes nothing but
    the tokenizer's failed health check (once); the one in a long prefill writes a
    ``Prefill batch`` line for each chunk (its running requests wait, nothing decodes)."""
    if s.index == HUNG_INDEX:
        failed = stop + HEALTH_FAILED_AFTER_S
        if not t - LOG_INTERVAL_S < failed <= t:
            return []
        tic = time.strftime("%H:%M:%S", time.localtime(wall_time(settings, failed - 20.0)))
        beat = time.strftime("%H:%M:%S", time.localtime(wall_time(settings, stop)))
        return [
            f"{log_stamp(settings, failed)} Health check failed. Server couldn't get a response "
            f"from detokenizer for last 20 seconds. tic start time: {tic}. "
            f"last_heartbeat time: {beat}"
        ]
    return [
        f"{stamp} Prefill batch, #new-seq: 1, #new-token: {PREFILL_CHUNK}, "
        f"#cached-token: 0, token usage: {s.token_usage:.2f}, "
        f"#running-req: {s.running}, #queue-req: {s.queued}, "
        f"#pending-token: {s.queued * 2200}, cuda graph: False, "
        f"input throughput (token/s): {PREFILL_CHUNK / LOG_INTERVAL_S:.2f}"
    ]
