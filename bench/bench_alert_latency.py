"""From an OOM line appended on the target to the alert in the monitor, and whether a log
flooding at 200,000 lines/s (20 MB/s) delays GPU samples or its own OOM lines. Runs the
real agent and monitor on this machine (``local`` transport) with the simulator's
nvidia-smi; only files it creates.

    python bench/bench_alert_latency.py [--rounds N] [--flood-s S] [--flood-rate LINES]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gpumon.backends.config import HostConfig
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.sim import write_wrapper

# The dashboard bench's CPU accounting (bench/ is this script's folder).
_dashboard: Any = importlib.import_module("bench_dashboard")

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)


LINE = "[rank0] step {:>9} | loss 2.3100 | lr 1.0e-4 | grad_norm 0.93 | 12.8 Ktok/s | mem 71.2G\n"


def agent_cpu_s(marker: str) -> tuple[float, int]:
    """CPU seconds and RSS (KiB) of the agent whose command line holds ``marker`` (its CPU
    through the dashboard bench's ``cpu_ticks``)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()
            if b"gpumon-agent" not in argv or marker.encode() not in argv:
                continue
            with open(f"/proc/{entry}/status") as f:
                rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
        except (OSError, ValueError, StopIteration):
            continue
        own, _ = _dashboard.cpu_ticks(int(entry))
        return own / _dashboard.CLK_TCK, rss
    return float("nan"), 0


class Flood:
    """Appends ``rate`` ordinary ~100-byte lines a second from a thread; ``oom()`` puts an
    OOM line into the stream (between whole lines) and returns when it was written."""

    def __init__(self, path: Path, rate: int) -> None:
        self.path, self.rate = path, rate
        self.block = "".join(LINE.format(i) for i in range(max(rate // 100, 1)))
        self.lines = self.block.count("\n")
        self.written = 0
        self.stop = threading.Event()
        self._oom = threading.Event()
        self._oom_at: list[float] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        with self.path.open("a") as f:
            while not self.stop.is_set():
                if self._oom.is_set():
                    f.write(OOM + "\n")
                    f.flush()
                    self._oom_at.append(time.monotonic())
                    self._oom.clear()
                f.write(self.block)
                f.flush()
                self.written += self.lines
                delay = start + self.written / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    def oom(self) -> float:
        self._oom.set()
        while self._oom.is_set():
            time.sleep(0.0005)
        return self._oom_at[-1]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--flood-s", type=float, default=25.0)
    ap.add_argument("--flood-rate", type=int, default=200_000, help="lines per second")
    ap.add_argument("--oom-every-s", type=float, default=2.0)
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

        # A log flood: are GPU samples still on time, and is each OOM in it caught at once?
        times: list[float] = []  # arrival of each new GPU sample
        counted = [monitor.samples]

        def on_change(m: HostMonitor) -> None:
            if m.samples != counted[0]:
                counted[0] = m.samples
                times.append(time.monotonic())

        monitor.add_listener(on_change)
        flood = Flood(log, args.flood_rate)
        cpu0, _ = agent_cpu_s(tmp)
        flood.thread.start()
        started = time.monotonic()
        in_flood: list[tuple[float, float]] = []  # (seconds into the flood, latency)
        missed = 0
        while time.monotonic() - started < args.flood_s:
            await asyncio.sleep(args.oom_every_s)
            before = {a.key for a in monitor.alerts.history() if a.kind == "cuda_oom"}
            t0 = await asyncio.to_thread(flood.oom)
            while not {a.key for a in monitor.alerts.history() if a.kind == "cuda_oom"} - before:
                if time.monotonic() - t0 > 10:
                    missed += 1
                    break
                await asyncio.sleep(0.005)
            else:
                in_flood.append((t0 - started, time.monotonic() - t0))
            monitor.alerts.acknowledge_all()
        elapsed = time.monotonic() - started
        cpu1, rss = agent_cpu_s(tmp)
        flood.stop.set()
        flood.thread.join()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        print(
            f"log flood: {flood.written / elapsed:,.0f} lines/s "
            f"({flood.written * len(LINE) / elapsed / 1e6:.1f} MB/s) for {elapsed:.0f} s"
        )
        print(
            f"  agent: {(cpu1 - cpu0) / elapsed * 100:.0f} % of one core, RSS {rss / 1024:.1f} MiB"
        )
        if gaps:
            print(
                f"  GPU sample gaps during the flood: median {statistics.median(gaps):.2f} s, "
                f"max {max(gaps):.2f} s (interval 1 s)"
            )
        lags = [lag for _, lag in in_flood]
        if lags:
            first = [lag for at, lag in in_flood if at < elapsed / 2]
            last = [lag for at, lag in in_flood if at >= elapsed / 2]
            print(
                f"  OOM line inside the flood -> alert: {len(lags)} caught, {missed} missed; "
                f"median {statistics.median(lags) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms "
                "(target < 1000 ms)"
            )
            if first and last:
                print(
                    f"  first half median {statistics.median(first) * 1000:.0f} ms, second half "
                    f"{statistics.median(last) * 1000:.0f} ms (a growing lag means falling behind)"
                )
        else:
            print(f"  OOM line inside the flood: NONE caught ({missed} missed)")
        (flow,) = [f for f in monitor.log_flow_json() if f["path"] == str(log)]
        print(
            f"  reported: {flow['lines']:,} lines received, {flow['lines_dropped']:,} dropped "
            f"(flood), {flow['bytes_skipped']:,} bytes skipped unread"
        )
        await monitor.stop()


if __name__ == "__main__":
    asyncio.run(main())
