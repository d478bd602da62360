"""GPU memory traces for the time-to-full rule: what memory does where it never runs out
and where it does, and the one replay that counts its warnings (the fast lane's tests
and ``bench/bench_time_to_full.py`` both read them).

Every trace is one GPU of the demo's board (97887 MiB, 637 reserved: the RTX PRO 6000 of
``backends/sim``), sampled once a second (gpumon's default interval), generated from
fixed seeds:

- ``oscillation``: the NVML stand-in's memory oscillating +-20 % below 80 % (a sine from
  40 % to 80 % of total, +-12 MiB of noise); ``oscillation_high``: the same shape between
  75 % and 95 %, every rise above the floor of use.
- ``sawtooth``: PyTorch's caching allocator under a training loop (pytorch/pytorch
  ``c10/cuda/CUDACachingAllocator.cpp``, at 001074d: a freed block stays reserved for
  reuse; a batch larger than any before needs new segments, large ones rounded up to
  2 MiB; ``torch.cuda.empty_cache()`` returns the unused segments to the driver; the
  allocator's "Expandable Segments" note describes the growth with each slightly larger
  batch): 58 GiB of weights, gradients and optimizer state; a step each 1.2 s whose
  activations take 13-26 GiB by its sequence length, so reserved memory jumps back at the
  first step after an ``empty_cache`` and then steps up with each longest batch so far;
  ``empty_cache`` every 500 steps (an evaluation, a checkpoint). 82-88 % of total at its
  top; it never runs out. ``each_step``: the loop calling ``empty_cache`` after every
  step, sampled at a random point of it (reserved climbing through the forward pass,
  held through the backward, released at its end).
- ``sglang_pool``: an SGLang server (sgl-project/sglang ``python/sglang/srt/
  server_args.py``: ``mem_fraction_static``, "the fraction of the memory used for static
  allocation (model weights and KV cache memory pool)"): weights loaded over 20 s, the KV
  pool allocated at once to 0.88 of total, CUDA graphs captured over 20 s (+1.5 GiB),
  then serving: flat but +-4 MiB and a few early 2-20 MiB allocator steps.
- ``drafter``: the demo's drafter on GPU 6 (``backends/sim``'s training-oom scenario through
  the simulated nvidia-smi and the real parsers, all 8 GPUs) from scenario time 0 to its
  CUDA OOM at 60 s.
- ``ramp``: 10 min steady at 60 % (+-12 MiB), then a linear rise of R MiB/s until used
  memory reaches what the GPU has (the OOM); ``staircase``: the same leak in blocks at
  irregular intervals.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.model import GpuSample, HostSample
from gpumon.backends.sim import MEMORY_RESERVED_MIB, MEMORY_TOTAL_MIB, OOM_AT, OOM_GPU, SimSettings
from gpumon.backends.sim.past import sample_at, sim_printers

from waiting import FakeClock

TOTAL = MEMORY_TOTAL_MIB
USABLE = MEMORY_TOTAL_MIB - MEMORY_RESERVED_MIB
GIB = 1024.0
HOUR = 3600.0
T0 = 1_800_000_000.0
PHASES = 4  # an oscillation is watched from four starting points of its cycle
STEADY_S = 600.0  # a ramp's steady stretch before it starts


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    samples: Callable[[], Iterator[tuple[float, HostSample]]]  # (seconds in, sample)
    oom_at: float | None = None  # seconds in; None: it never runs out
    ramp_at: float = 0.0  # where it runs out: a warning before this is a false one
    gpu: int = 0


@dataclass(frozen=True, slots=True)
class Replay:
    """What the rule said over a trace."""

    seconds: float
    warnings: tuple[tuple[float, str], ...]  # (seconds in, message) of each raised
    false: int  # raised where nothing runs out, or before the ramp
    lead_s: float | None  # the first warning on the ramp, seconds before the OOM


def replay(trace: Trace, rules: AlertRules | None = None) -> Replay:
    """Feed ``trace`` through ``AlertEngine.on_sample`` (the monitor's rule code) on a
    clock that moves with the samples; each ``time_to_full`` alert raised is a warning
    (one that stays up is one)."""
    clock = FakeClock(T0)
    engine = AlertEngine("trace", rules or AlertRules(), clock=clock.time)
    at = [0.0]
    warnings: list[tuple[float, str]] = []
    engine.add_listener(
        lambda a: (
            warnings.append((at[0], a.message))
            if a.kind == "time_to_full" and a.gpu == trace.gpu
            else None
        )
    )
    for seconds, sample in trace.samples():
        at[0] = seconds
        clock.now = sample.time
        engine.on_sample(sample)
    ramp_at = trace.ramp_at if trace.oom_at is not None else math.inf
    leads = [trace.oom_at - s for s, _ in warnings if s >= ramp_at] if trace.oom_at else []
    return Replay(
        at[0],
        tuple(warnings),
        sum(1 for s, _ in warnings if s < ramp_at),
        max(leads) if leads else None,
    )


def one_gpu(t: float, used: float) -> HostSample:
    used_mib = min(max(round(used), 0), USABLE)
    gpu = GpuSample(
        index=0,
        memory_total_mib=TOTAL,
        memory_reserved_mib=MEMORY_RESERVED_MIB,
        memory_used_mib=used_mib,
        memory_free_mib=USABLE - used_mib,
    )
    return HostSample("trace", T0 + t, None, (gpu,), ())


def series(values: Callable[[float], float], seconds: float) -> Iterator[tuple[float, HostSample]]:
    for k in range(int(seconds) + 1):
        yield float(k), one_gpu(float(k), values(float(k)))


def noise(seed: int, mib: float) -> Callable[[float], float]:
    """+-``mib`` of noise, the same for the same second (a trace can be read again)."""
    return lambda t: random.Random(seed * 1_000_003 + int(t)).uniform(-mib, mib)


def oscillation(period: float, phase: int, seconds: float = HOUR) -> Trace:
    """The stand-in's: 40 % to 80 %, starting at ``phase`` quarters of its cycle."""
    return _sine("oscillation", period, phase, 0.40, 0.80, seconds)


def oscillation_high(period: float, phase: int, seconds: float = HOUR) -> Trace:
    return _sine("oscillation-high", period, phase, 0.75, 0.95, seconds)


def _sine(name: str, period: float, phase: int, low: float, high: float, seconds: float) -> Trace:
    mid, amp = (low + high) / 2.0 * TOTAL, (high - low) / 2.0 * TOTAL
    wobble = noise(int(period) * 10 + phase, 12.0)
    start = 2.0 * math.pi * phase / PHASES

    def values(t: float) -> float:
        return mid + amp * math.sin(2.0 * math.pi * t / period + start) + wobble(t)

    return Trace(f"{name} {period:g} s", lambda: series(values, seconds))


def sawtooth(each_step: bool = False, seconds: float = HOUR) -> Trace:
    """Reserved memory of a training loop under the caching allocator (module docstring)."""
    base, step_s, every = 58.0 * GIB + 500.0, 1.2, 1 if each_step else 500
    rng = random.Random(7 if each_step else 5)
    steps = int(seconds / step_s) + 2
    need = [(13.0 + 13.0 * rng.random()) * GIB for _ in range(steps)]  # activations by length
    held: list[float] = []  # reserved above the base after each step
    top = 0.0
    for k in range(steps):
        if k % every == 0:
            top = 0.0  # empty_cache: the unused segments go back to the driver
        top = max(top, math.ceil(need[k] / 2.0) * 2.0)  # new segments, 2 MiB rounded
        held.append(top)
    into = [random.Random(11 + k).random() for k in range(int(seconds) + 1)]

    def values(t: float) -> float:
        k = int(t / step_s)
        if not each_step:
            return base + held[k]
        x = into[int(t)]  # where in its step the sample falls
        return base + (need[k] * min(x / 0.5, 1.0) if x < 0.9 else 0.0)

    name = "sawtooth each step" if each_step else "sawtooth"
    return Trace(name, lambda: series(values, seconds))


def sglang_pool(seconds: float = HOUR) -> Trace:
    weights, pool = 16.0 * GIB, 0.88 * TOTAL
    wobble = noise(3, 4.0)
    rng = random.Random(9)
    steps = sorted(rng.uniform(60.0, 900.0) for _ in range(6))
    sizes = [rng.choice((2.0, 4.0, 8.0, 20.0)) for _ in steps]

    def values(t: float) -> float:
        if t < 20.0:
            return 500.0 + weights * t / 20.0
        if t < 25.0:
            return 500.0 + weights
        graphs = 1.5 * GIB * min((t - 25.0) / 20.0, 1.0)
        grown = sum(s for at, s in zip(steps, sizes, strict=True) if t >= at)
        return 500.0 + pool + graphs + grown + wobble(t)

    return Trace("sglang pool", lambda: series(values, seconds))


def drafter(settings: SimSettings | None = None) -> Trace:
    """The demo's GPU 6 up to its OOM; ``settings`` may stop the jupyter (``kills``)."""
    settings = settings or SimSettings()
    printers = sim_printers(settings)

    def samples() -> Iterator[tuple[float, HostSample]]:
        for k in range(int(OOM_AT)):
            yield float(k), sample_at(printers, settings, float(k), "demo")

    return Trace("ramp drafter (demo GPU 6)", samples, oom_at=OOM_AT, gpu=OOM_GPU)


def ramp(
    rate: float, jitter: float = 12.0, before: Callable[[float], float] | None = None
) -> Trace:
    """10 min of ``before`` (default: steady at 60 %), then from 60 % up at ``rate``."""
    start = 0.60 * TOTAL
    wobble = noise(int(rate), jitter)
    oom_at = STEADY_S + (USABLE - start) / rate
    first = before or (lambda t: start)

    def values(t: float) -> float:
        if t < STEADY_S:
            return first(t) + wobble(t)
        return start + (t - STEADY_S) * rate + wobble(t)

    name = f"ramp {rate:g} MiB/s" + (f" +-{jitter:g}" if jitter != 12.0 else "")
    return Trace(name, lambda: series(values, oom_at), oom_at, STEADY_S)


def staircase(block: float, every: float) -> Trace:
    """A leak in blocks: ``block`` MiB at intervals of ``every`` s +-40 %, from 60 %."""
    start = 0.60 * TOTAL
    rng = random.Random(int(block))
    at, steps = STEADY_S, list[float]()
    while start + len(steps) * block < USABLE:
        at += every * rng.uniform(0.6, 1.4)
        steps.append(at)
    oom_at = steps[-1]
    wobble = noise(int(block) + 1, 12.0)

    def values(t: float) -> float:
        return start + block * sum(1 for s in steps if s <= t) + wobble(t)

    name = f"ramp {block:g} MiB each ~{every:g} s"
    return Trace(name, lambda: series(values, oom_at), oom_at, STEADY_S)
