"""Cost of the fleet view with 1,000 nodes x 8 GPUs in a real Prometheus.

Figures (issue 14): the per-refresh query time and bytes (the fixed aggregated set), the
same nodes asked one query per node, the event-loop time of a refresh (answers parsed
and rows built; the table updated; the visible lines drawn; target < 50 ms), the time
from a refresh starting to the frame that shows it, scrolling (page down: key to frame),
and the process' RSS.

    python bench/bench_fleet.py [--nodes 1000] [--gpus 8] [--rounds 10] [--warm 40]

The stand-in dcgm-exporter (tests/support/dcgm_exporter.py) runs in its own process so
its rendered 17 MB page is not in the RSS measured; Prometheus (Debian's) scrapes it every
5 s with honor_labels. ``--warm`` seconds of scrapes come first (the sparkline's range
query has that much history, not 30 min: its cost is per step and series, so it is close).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

from gpumon.backends.config import Config  # noqa: E402
from gpumon.backends.config.fleet import FleetConfig  # noqa: E402
from gpumon.backends.fleet import FleetQueries, FleetSource, PrometheusClient  # noqa: E402
from gpumon.backends.fleet.prom import MAX_CONNECTIONS  # noqa: E402
from gpumon.tui.fleet.app import FleetApp  # noqa: E402

from prom_fleet import FleetPrometheus  # noqa: E402


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def line(name: str, values: list[float], unit: str = "ms", target: float | None = None) -> None:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    med = statistics.median(ordered)
    verdict = ""
    if target is not None:
        verdict = f"  (target < {target:g} {unit}: {'ok' if p95 < target else 'OVER'})"
    print(f"  {name:<52} median {med:9.2f} {unit}  p95 {p95:9.2f} {unit}{verdict}")


async def loop_cpu(work: Callable[[], Coroutine[Any, Any, Any]]) -> tuple[Any, float, float]:
    """Run ``work()``; its result, wall seconds and the CPU seconds of this thread (the
    event loop's) meanwhile."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = await work()
    return result, time.perf_counter() - wall, time.thread_time() - cpu


async def queries(url: str, nodes: int, rounds: int, connections: int) -> None:
    client = PrometheusClient(url, timeout=120, max_connections=connections)
    source = FleetSource(FleetConfig("bench", url, timeout=120), client=client)
    walls, cpus, sizes = [], [], []
    snap = None
    for _ in range(rounds):
        snap, wall, cpu = await loop_cpu(source.refresh)
        assert snap.error is None, snap.error
        walls.append(wall * 1000)
        cpus.append(cpu * 1000)
        sizes.append(snap.stats.bytes / 1024)
    assert snap is not None and len(snap.rows) == nodes
    print(
        f"aggregated: {snap.stats.requests} requests per refresh ({connections} at once), "
        f"{len(snap.rows)} rows"
    )
    line("refresh wall time (all queries at once)", walls)
    line("  of it on the event loop (parse JSON, build rows)", cpus)
    line("bytes received per refresh", sizes, "KiB")
    # Which queries cost what (one at a time).
    for name, expr in FleetQueries().instant().items():
        t0 = time.perf_counter()
        await client.query(expr)
        s = client.take_stats()
        print(
            f"    {name:<16} {1000 * (time.perf_counter() - t0):7.1f} ms  {s.bytes / 1024:8.1f} KiB"
        )
    await source.close()

    # The alternative: one query per node (every dcgm series of that node), 20 at a time.
    names = sorted(r.node for r in snap.rows)
    per_node = PrometheusClient(url, timeout=120, max_connections=20)
    q = FleetQueries()
    sem = asyncio.Semaphore(20)

    async def one(node: str) -> None:
        async with sem:
            await per_node.query(q.one_node(node))

    async def all_nodes() -> None:
        await asyncio.gather(*(one(n) for n in names))

    _, wall, cpu = await loop_cpu(all_nodes)
    s = per_node.take_stats()
    await per_node.close()
    print(f"one query per node: {s.requests} requests")
    print(f"  {'wall time':<52} {1000 * wall:9.1f} ms")
    print(f"  {'  of it on the event loop':<52} {1000 * cpu:9.1f} ms")
    print(f"  {'bytes received':<52} {s.bytes / 1024:9.1f} KiB")


async def screen(url: str, nodes: int, rounds: int) -> None:
    before = rss_mib()
    source = FleetSource(FleetConfig("bench", url, refresh=3600, timeout=120))
    app = FleetApp(Config(path=None), source)
    shows: list[float] = []
    frames: list[float] = []
    draws: list[float] = []
    scrolls: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        fleet = app.fleet
        while fleet.refreshes < 1:
            await pilot.pause(0.05)
        for _ in range(rounds):
            done = fleet.refreshes
            fleet.action_refresh_now()
            while fleet.refreshes == done:
                await pilot.pause(0.01)
            shows.append(fleet.show_s * 1000)
            frames.append(fleet.refresh_to_screen_s * 1000)
            table = fleet.table
            t0 = time.perf_counter()
            table._cache.clear()
            for y in range(table.size.height):
                table.render_line(y)
            draws.append((time.perf_counter() - t0) * 1000)
        idle: list[float] = []
        for key, into in (("x", idle), ("pagedown", scrolls)) * (rounds * 2):
            t0 = time.perf_counter()
            await pilot.press(key)  # x: no binding, the Pilot round trip alone
            await pilot.pause()
            into.append((time.perf_counter() - t0) * 1000)
        assert len(fleet.shown) == nodes
        after = rss_mib()
    print(f"fleet screen, 160x50, {nodes} nodes:")
    line("show(): sort, filter, rows into the table, header", shows, target=50)
    line("table: draw the visible lines (48)", draws, target=50)
    line("refresh start -> frame drawn (queries included)", frames)
    line("a key without a binding: Pilot's round trip", idle)
    base = statistics.median(idle)
    line("page down: key -> frame, less that round trip", [v - base for v in scrolls], target=50)
    print(f"  RSS: {before:.0f} MiB before the app, {after:.0f} MiB with {nodes} nodes on screen")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warm", type=float, default=40.0)
    parser.add_argument(
        "--connections", type=int, default=0, help="queries at once (default: gpumon's)"
    )
    args = parser.parse_args()
    exporter = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests/support/dcgm_exporter.py"),
            str(args.nodes),
            str(args.gpus),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stdout is not None
        port = int(exporter.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            prom = FleetPrometheus(
                Path(tmp),
                {"dcgm": [f"127.0.0.1:{port}"]},
                scrape_interval="5s",
                scrape_timeout="5s",
            ).start()
            try:
                prom.wait_for("DCGM_FI_DEV_FB_USED", args.nodes * args.gpus, timeout=300)
                series = prom.query("count({__name__=~'DCGM_.*'})")[0]["value"][1]
                print(f"Prometheus {prom.url}: {series} dcgm series; warming {args.warm:g} s")
                time.sleep(args.warm)
                connections = args.connections or MAX_CONNECTIONS
                asyncio.run(queries(prom.url, args.nodes, args.rounds, connections))
                asyncio.run(screen(prom.url, args.nodes, args.rounds))
            finally:
                prom.stop()
    finally:
        exporter.kill()
        exporter.wait()


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="gpumon-bench-"))
    main()
