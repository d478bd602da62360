"""From an OOM line appended on the target to the alert in the monitor, and whether a log
growing at 50,000 lines/s delays GPU samples. Runs the real agent and monitor on this
machine (``local`` transport) with the simulator's nvidia-smi; only files it creates.

    python bench/bench_alert_latency.py [--rounds N] [--flood-s S]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from gpumon.backends.config import HostConfig
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.sim import write_wrapper

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)


def flood(path: Path, rate: int, seconds: float, stop: threading.Event) -> int:
    """Append ``rate`` ordinary lines a second for ``seconds``; returns lines written."""
    written = 0
    batch = max(rate // 100, 1)
    start = time.monotonic()
    with path.open("a") as f:
        while not stop.is_set() and time.monotonic() - start < seconds:
            f.write(
                "".join(f"step {written + i} | loss 2.31 | 12.8 Ktok/s\n" for i in range(batch))
            )
            f.flush()
            written += batch
            delay = start + written / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return written


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--flood-s", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = root / "train.log"
        log.write_text("")
        smi = write_wrapper(root, demo_settings(demo_time=5))
        host = HostConfig(
            name="bench", kind="local", python=sys.executable, nvidia_smi=str(smi),
            interval=1.0, watch_logs=(str(log),), kernel_log=False,
        )  # fmt: skip
        monitor = make_monitor(host, record=False)
        monitor.start()
        while monitor.samples < 2:
            await monitor.wait_for_update(5)
        latencies = []
        for _ in range(args.rounds):
            before = {a.key for a in monitor.alerts.history()}
            t0 = time.monotonic()
            with log.open("a") as f:
                f.write(OOM + "\n")
            while not {a.key for a in monitor.alerts.history() if a.kind == "cuda_oom"} - before:
                await asyncio.sleep(0.005)
            latencies.append(time.monotonic() - t0)
            monitor.alerts.acknowledge_all()
            await asyncio.sleep(0.3)
        print(f"OOM line appended -> alert in the monitor ({args.rounds} rounds, interval 1 s):")
        print(
            f"  median {statistics.median(latencies) * 1000:.0f} ms, "
            f"max {max(latencies) * 1000:.0f} ms (target: one sampling interval, 1000 ms)"
        )

        # A log flood: are GPU samples still on time, and is an OOM in the flood caught?
        times: list[float] = []  # arrival of each new GPU sample
        counted = [monitor.samples]

        def on_change(m: HostMonitor) -> None:
            if m.samples != counted[0]:
                counted[0] = m.samples
                times.append(time.monotonic())

        monitor.add_listener(on_change)
        stop = threading.Event()
        result: list[int] = []
        writer = threading.Thread(
            target=lambda: result.append(flood(log, 50_000, args.flood_s, stop)), daemon=True
        )
        before = {a.key for a in monitor.alerts.history()}
        writer.start()
        await asyncio.sleep(args.flood_s / 2)
        with log.open("a") as f:
            f.write(OOM + "\n")
        await asyncio.sleep(args.flood_s / 2 + 1.5)
        stop.set()
        writer.join()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        caught = {a.key for a in monitor.alerts.history() if a.kind == "cuda_oom"} - before
        rate = result[0] / args.flood_s if result else 0
        print(f"log flood: {rate:,.0f} lines/s for {args.flood_s:g} s")
        if gaps:
            print(
                f"  GPU sample gaps during the flood: median {statistics.median(gaps):.2f} s, "
                f"max {max(gaps):.2f} s (interval 1 s)"
            )
        print(f"  OOM line inside the flood caught: {'yes' if caught else 'NO'}")
        await monitor.stop()


if __name__ == "__main__":
    asyncio.run(main())
