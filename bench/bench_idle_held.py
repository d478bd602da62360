"""gpu_idle_held: the rule's cost per sample on 8 GPUs, and the time from the demo's GPUs
going idle to the incident.

Cost: ``AlertEngine.on_sample`` on 8 GPUs with the rule on against the same engine with
it off (``idle_held_after_s = 0``), for busy GPUs (the rule only counts) and for 8 GPUs
held and idle past the window (the alert's text is built every sample: the worst case).
Latency: the demo host in ``--scenario idle`` started 5 s before its drafter's GPUs go
idle (scenario time 30 s), sampled every ``--interval``; the time from the first idle
moment to the alert, against the demo's 60 s window (``--after`` shortens it).

    python bench/bench_idle_held.py [--samples N] [--after S] [--interval S]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import GpuProcess, GpuSample, HostSample
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.sim.scenario import DEMO_IDLE_HELD_AFTER_S, IDLE_AT, wall_time


def host_sample(t: float, util: float) -> HostSample:
    gpus = tuple(
        GpuSample(
            index=i,
            uuid=f"GPU-{i}",
            utilization_pct=util,
            memory_total_mib=97887,
            memory_used_mib=86000 + i,
            memory_free_mib=97887 - 637 - 86000 - i,
        )
        for i in range(8)
    )
    procs = tuple(
        GpuProcess(pid=1000 + i, name="python3", memory_mib=86000, gpu_uuid=f"GPU-{i}")
        for i in range(8)
    )
    return HostSample("bench", t, None, gpus, procs)


def per_sample_us(rules: AlertRules, util: float, count: int) -> float:
    """Microseconds per on_sample, the best of 7 runs of ``count`` samples a second apart
    (the least disturbed by other load)."""
    runs = []
    for _ in range(7):
        engine = AlertEngine("bench", rules, jobs={"drafter": (5, 6, 7)})
        batch = [host_sample(1_800_000_000.0 + k, util) for k in range(count)]
        start = time.perf_counter()
        for s in batch:
            engine.on_sample(s)
        runs.append((time.perf_counter() - start) / count * 1e6)
    return min(runs)


def bench_cost(count: int) -> None:
    on, off = AlertRules(idle_held_after_s=60.0), AlertRules(idle_held_after_s=0.0)
    for what, util in (("busy (97 %)", 97.0), ("held and idle (1 %)", 1.0)):
        a, b = per_sample_us(on, util, count), per_sample_us(off, util, count)
        print(
            f"on_sample, 8 GPUs {what}: {a:.1f} us with gpu_idle_held, {b:.1f} us without "
            f"(the rule: {a - b:+.1f} us/sample)"
        )


async def bench_latency(after_s: float, interval: float) -> None:
    settings = demo_settings("idle", demo_time=IDLE_AT - 5.0)
    idle_wall = wall_time(settings, IDLE_AT)
    host = resolve_host(load_config(None), "demo")
    host = replace(host, interval=interval, alerts=replace(host.alerts, idle_held_after_s=after_s))
    monitor = make_monitor(host, settings, reconnect=False, record=False)
    monitor.start()
    try:
        deadline = time.time() + after_s + 60.0
        while time.time() < deadline:
            found = [a for a in monitor.alerts.active() if a.kind == "gpu_idle_held"]
            if found:
                alert = found[0]
                seen = alert.time - idle_wall
                print(
                    f"demo idle -> incident: {seen:.1f} s after the GPUs went idle "
                    f"(threshold {after_s:g} s + {seen - after_s:.1f} s = "
                    f"{(seen - after_s) / interval:.1f} samples at {interval:g} s): "
                    f"{alert.message}"
                )
                return
            await asyncio.sleep(0.05)
        print("demo idle -> incident: NOT raised within the threshold + 60 s")
    finally:
        await monitor.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--after", type=float, default=DEMO_IDLE_HELD_AFTER_S)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    bench_cost(args.samples)
    asyncio.run(bench_latency(args.after, args.interval))


if __name__ == "__main__":
    main()
