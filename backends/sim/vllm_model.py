"""The simulated vLLM servers' numbers as pure functions of scenario time (``vllm``).

Two vLLM 0.34.0 servers (V1 engine, ``vllm serve MODEL --port N``, one GPU each: GPUs
``VLLM_GPUS``) beside six SGLang servers. Server ``k`` has been up ``UPTIME_AT_T0``
seconds at scenario time 0; its generation counter advances at about
``TOKENS_PER_S[k]``. Server ``WEDGED_INDEX`` wedges at ``WEDGE_AT``: its generation and
prompt counters stand still with ``WEDGED_RUNNING`` requests running and the waiting queue
growing by one every ``WAITING_EVERY_S``, while ``/health`` answers 200 (the API server
lives; the engine core's loop does not move). Its GPU spins (``scenario.gpu_states``).

The page is what vLLM 0.34.0's ``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``)
renders through prometheus_client for one engine (``engine="0"``): the families, help
texts, label names and buckets of ``tests/fixtures/upstream/vllm/0.34.0/metrics.prom``,
counters with their ``_created`` gauges. The log carries the ``LoggingStatLogger``'s line
every ``LOG_INTERVAL_S`` (``VLLM_LOG_STATS_INTERVAL``, 10 s): ``INFO`` while the engine
made or had made tokens in the last two intervals, ``DEBUG`` (not printed at vLLM's
default level) once both were 0 (``LoggingStatLogger._update_stats``: "Avoid log noise on
an idle production system"). So a wedged engine's log says one ``Avg generation
throughput: 0.0`` line, then nothing. Standard library only.
"""

from __future__ import annotations

import math
import random
import time

from gpumon.backends.sim.scenario import VLLM_MODEL, WEDGE_AT, SimSettings, wall_time
from gpumon.backends.sim.sglang_model import _cdf, _labels, go_float

MODEL = VLLM_MODEL
VERSION = "0.34.0"
SERVERS = 2
TOKENS_PER_S = (1420.0, 1385.0)
PROMPT_PER_GEN = 2.4  # prompt tokens per generated token
PREFIX_HIT_SHARE = 0.38  # of the prompt tokens looked up
UPTIME_AT_T0 = 7200.0  # a multiple of LOG_INTERVAL_S: stats lines at scenario 10 s marks
LOG_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL (vllm/envs.py, 0.34.0: 10.0)
RUNNING = 48
WAITING = 2
KV_USAGE = 0.64
TOKENS_PER_REQUEST = 540.0
WEDGED_INDEX = 0  # vllm: the server on the first vLLM GPU wedges at WEDGE_AT
WEDGED_RUNNING = 41
WAITING_EVERY_S = 4.0
MAX_MODEL_LEN = 32768
# vllm/v1/metrics/loggers.py 0.34.0's buckets (as in the capture)
TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0),
    *(7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
ITL_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5),
    *(10.0, 20.0, 40.0, 80.0),
)
_TTFT = (0.21, 0.5)  # log-normal (median s, sigma)
_ITL = (0.031, 0.2)


def wedged(settings: SimSettings, index: int, t: float) -> bool:
    """Whether server ``index`` is wedged at scenario time ``t``."""
    return settings.scenario == "vllm" and index == WEDGED_INDEX and t >= WEDGE_AT


def generation_tokens(settings: SimSettings, index: int, t: float) -> int:
    """Tokens generated since the server's start (stands still from a wedge)."""
    if wedged(settings, index, t):
        t = WEDGE_AT
    uptime = max(t + UPTIME_AT_T0, 0.0)
    phase = random.Random(f"{settings.seed}:vllm:{index}:phase").uniform(0.0, 2 * math.pi)
    w = 2 * math.pi / 53.0
    swell = 0.05 / w * (math.cos(phase) - math.cos(w * uptime + phase))
    return int(TOKENS_PER_S[index] * (uptime + swell))


def requests(settings: SimSettings, index: int, t: float) -> tuple[int, int, float]:
    """(running, waiting, KV usage 0..1) at ``t``: steady with a little noise; a wedged
    server keeps its batch and its KV blocks while new requests queue."""
    if wedged(settings, index, t):
        return WEDGED_RUNNING, WAITING + int((t - WEDGE_AT) / WAITING_EVERY_S), KV_USAGE
    rng = random.Random(f"{settings.seed}:vllm:{index}:{math.floor(t)}")
    return (
        RUNNING + rng.randint(-3, 3),
        WAITING + rng.randint(-2, 2),
        KV_USAGE + rng.uniform(-0.02, 0.02),
    )


class _Page:
    def __init__(self, created: float) -> None:
        self.lines: list[str] = []
        self.created = go_float(created)

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} {kind}"]

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"vllm:{name}{_labels(**labels)} {go_float(value)}")

    def counter(self, name: str, help_text: str, rows: list[tuple[dict[str, str], float]]) -> None:
        """A prometheus_client counter: ``NAME_total`` and its ``NAME_created`` gauge."""
        self.family(f"{name}_total", "counter", help_text)
        for labels, value in rows:
            self.sample(f"{name}_total", labels, value)
        self.family(f"{name}_created", "gauge", help_text)
        for labels, _ in rows:
            self.lines.append(f"vllm:{name}_created{_labels(**labels)} {self.created}")

    def histogram(
        self, name: str, help_text: str, labels: dict[str, str], bounds: tuple[float, ...], n: int,
        total: float, shape: tuple[float, float],
    ) -> None:  # fmt: skip
        self.family(name, "histogram", help_text)
        counts = [int(n * _cdf(b, *shape)) for b in bounds] + [n]
        for bound, count in zip((*bounds, math.inf), counts, strict=True):
            self.sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, count)
        self.sample(f"{name}_count", labels, n)
        self.sample(f"{name}_sum", labels, round(total, 3))
        self.family(f"{name}_created", "gauge", help_text)
        self.lines.append(f"vllm:{name}_created{_labels(**labels)} {self.created}")


def metrics_text(settings: SimSettings, index: int, t: float) -> str:
    """The ``/metrics`` page of vLLM server ``index`` at scenario time ``t`` (0.34.0)."""
    gen = generation_tokens(settings, index, t)
    prompt = int(gen * PROMPT_PER_GEN)
    running, waiting, kv = requests(settings, index, t)
    done = int(gen / TOKENS_PER_REQUEST)
    labels = {"engine": "0", "model_name": MODEL}
    p = _Page(wall_time(settings, -UPTIME_AT_T0))
    p.family("num_requests_running", "gauge", "Number of requests in model execution batches.")
    p.sample("num_requests_running", labels, running)
    p.family("num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
    p.sample("num_requests_waiting", labels, waiting)
    p.family("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
    p.sample("kv_cache_usage_perc", labels, round(kv, 4))
    p.counter(
        "prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        [(labels, prompt)],
    )
    p.counter(
        "prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        [(labels, int(prompt * PREFIX_HIT_SHARE))],
    )
    p.counter(
        "num_preemptions",
        "Cumulative number of preemption from the engine.",
        [(labels, int(gen / 400_000))],
    )
    p.counter("prompt_tokens", "Number of prefill tokens processed.", [(labels, prompt)])
    p.counter("generation_tokens", "Number of generation tokens processed.", [(labels, gen)])
    reasons = (("stop", 0.955), ("length", 0.04), ("abort", 0.005))
    p.counter(
        "request_success",
        "Count of successfully processed requests.",
        [({**labels, "finished_reason": r}, int(done * share)) for r, share in reasons],
    )
    p.histogram(
        "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
        labels, TTFT_BUCKETS, done, done * 0.24, _TTFT,
    )  # fmt: skip
    p.histogram(
        "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
        labels, ITL_BUCKETS, gen, gen * 0.0316, _ITL,
    )  # fmt: skip
    return "\n".join(p.lines) + "\n"


def log_stamp(settings: SimSettings, t: float) -> str:
    """vLLM's stamp (``vllm/logger.py``'s ``%m-%d %H:%M:%S``): ``11-29 14:32:00``."""
    return time.strftime("%m-%d %H:%M:%S", time.localtime(wall_time(settings, t)))


def stats_line(settings: SimSettings, index: int, epoch: int) -> str | None:
    """The stats line of server ``index`` at its ``epoch``-th interval (scenario time
    ``epoch * LOG_INTERVAL_S``), or None where vLLM logs it at DEBUG (two idle intervals)."""
    t = epoch * LOG_INTERVAL_S

    def rate(a: float, b: float) -> float:
        return (generation_tokens(settings, index, b) - generation_tokens(settings, index, a)) / (
            LOG_INTERVAL_S
        )

    gen, last = rate(t - LOG_INTERVAL_S, t), rate(t - 2 * LOG_INTERVAL_S, t - LOG_INTERVAL_S)
    if gen <= 0 and last <= 0:
        return None
    running, waiting, kv = requests(settings, index, t)
    return (
        f"INFO {log_stamp(settings, t)} [loggers.py:335] Engine 000: "
        f"Avg prompt throughput: {gen * PROMPT_PER_GEN:.1f} tokens/s, "
        f"Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, "
        f"Waiting: {waiting} reqs, GPU KV cache usage: {kv * 100:.1f}%, "
        f"Prefix cache hit rate: {PREFIX_HIT_SHARE * 100:.1f}%"
    )
