"""Cost of the dashboard: refresh and plot time on the event loop, CPU use, first frame.

Targets (issues #3 and #5): one full refresh of 8 GPUs <= 15 ms of event-loop time, also
with both workload panes (8 SGLang servers and a job, full histories); a detail-view plot
redraw <= 40 ms; ``gpumon demo`` at 1 Hz in tmux at 120x40 <= 2 % of one core (the
gpumon process, and with its children: the agent and the simulator); first frame with
data < 1 s.

    python bench/bench_dashboard.py [--seconds 60] [--rounds 40] [--skip-tmux]

The in-process part runs the app under Textual's test driver on the simulated CT200 with
an hour of synthetic history per GPU (the worst case for sparklines and the 1 h plots):
in training-oom (the jobs pane), and in sglang with a job added (both panes, every
tracker's history full).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import GpuHistory
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.workloads import JobTracker
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen

from procfs import CLK_TCK, stat, ticks

GPUMON = Path(sys.executable).parent / "gpumon"


def summary(name: str, samples_ms: list[float], target: float | None = None) -> None:
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    med = statistics.median(ordered)
    verdict = ""
    if target is not None:
        verdict = f"  (target <= {target:g} ms: {'ok' if p95 <= target else 'OVER'})"
    print(f"  {name:<44} median {med:7.2f} ms   p95 {p95:7.2f} ms{verdict}")


def fill_history(monitor: HostMonitor, seconds: float = 3600.0) -> None:
    """An hour of 1 Hz history per GPU before the real samples (a slow memory ramp)."""
    latest = monitor.latest
    assert latest is not None
    start = latest.time - seconds
    for gpu in latest.gpus:
        real = monitor.histories[gpu.index]
        hist = GpuHistory(max(real.maxlen, int(seconds) + len(real) + 10))
        for k in range(int(seconds)):
            t = start + k
            if t >= real.times[0]:
                break
            wave = 0.5 + 0.4 * math.sin(k / 300 + gpu.index)
            total = gpu.memory_total_mib or 97887
            hist.append_values(t, total * wave, 100 * wave, 40 + 40 * wave, 600 * wave)
        for i in range(len(real)):
            hist.append_values(
                real.times[i],
                real.memory_used_mib[i],
                real.utilization_pct[i],
                real.temperature_c[i],
                real.power_w[i],
            )
        monitor.histories[gpu.index] = hist


def fill_workloads(monitor: HostMonitor) -> None:
    """Full histories for every SGLang tracker, and a job with a full rate history (so
    both panes are on screen with the most they draw), on the trackers' clock."""
    now = monitor.workloads.now()
    for tracker in monitor.workloads.sglang.values():
        points = list(tracker.history)
        need = (tracker.history.maxlen or 120) - len(points)
        synthetic = [(now - 2 * (need - k) - 2, 1000.0 + 10 * (k % 7)) for k in range(need)]
        tracker.history.clear()
        tracker.history.extend([*synthetic, *points])
    job = JobTracker("bench-job", "kv", (0, 1))
    job.feed("step 100/5000 | loss 2.5 | 12.8 Ktok/s", now - 1)
    job.feed("step 101/5000 | loss 2.5 | 12.8 Ktok/s", now)
    job.rate_history.clear()
    size = job.rate_history.maxlen or 120
    job.rate_history.extend((now - size + k, 12800.0 + k) for k in range(size))
    monitor.workloads.jobs[job.name] = job


def invalidate(app: GpumonApp) -> None:
    """Forget every drawn view so the next refresh recomputes and redraws everything."""
    app.dashboard.strip.view = None
    for section in app.dashboard.sections:
        section.header.view = None
        section.titles.view = None
        section.sglang.view = section.jobs.view = None
        section._panes = (None, None)
        section._spark_cache.clear()
        section.gpu_rows.view = None
        section.gpu_rows._row_lines.clear()


async def wait_for(pilot: Pilot[int], check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the simulator")
        await pilot.pause(0.05)


async def in_process(size: tuple[int, int], rounds: int, scenario: str = "training-oom") -> None:
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, demo_settings(scenario, demo_time=30))
    app = GpumonApp([monitor])
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: len(app.dashboard.sections[0].rows) == 8)
        await wait_for(pilot, lambda: monitor.processes_time is not None)
        servers = monitor.workloads.sglang
        await wait_for(pilot, lambda: all(s.model is not None for s in servers.values()))
        fill_history(monitor)
        panes = "jobs pane"
        if scenario == "sglang":
            fill_workloads(monitor)
            panes = f"SGLang pane ({len(servers)} servers) and jobs pane"
        app.dashboard.refresh_dashboard()
        await pilot.pause()
        section = app.dashboard.sections[0]
        assert section.jobs.display and (section.sglang.display or scenario != "sglang")
        print(
            f"\n{size[0]}x{size[1]} {scenario}: 8 GPUs, {len(monitor.histories[0])} samples "
            f"of history each, {panes}"
        )
        full, steady, render = [], [], []
        for _ in range(rounds):
            invalidate(app)
            t0 = time.perf_counter()
            app.dashboard.refresh_dashboard()
            full.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            for section in app.dashboard.sections:  # what Textual then calls to draw the new views
                section.header.render()
                section.titles.render()
                section.gpu_rows.render()
                section.sglang.render()
                section.jobs.render()
            app.dashboard.strip.render()
            render.append((time.perf_counter() - t0) * 1000)
            await pilot.pause()
            t0 = time.perf_counter()
            app.dashboard.refresh_dashboard(rows_of=set())  # a timer tick with no new sample
            steady.append((time.perf_counter() - t0) * 1000)
        both = [a + b for a, b in zip(full, render, strict=True)]
        summary("full refresh (views: 8 rows, panes)", full)
        summary("rendering those views (Text: 8 rows, panes)", render)
        summary("full refresh + rendering", both, 15)
        summary("timer tick without a new sample", steady)

        if scenario != "training-oom":
            return
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await wait_for(pilot, lambda: all(p.builds for p in screen.plots.values()))
        sample = app.dashboard.sections[0].shown
        assert sample is not None
        gpu = sample.gpus[0]
        for window in (60.0, 600.0, 3600.0):
            screen.window = window
            times = []
            for _ in range(max(rounds // 2, 5)):
                for plot in screen.plots.values():
                    plot._built = None
                t0 = time.perf_counter()
                screen.redraw_plots(gpu, sample, app.palette)
                times.append((time.perf_counter() - t0) * 1000)
            summary(f"detail: redraw 4 plots, {window / 60:g} min window", times, 40)


# --- tmux -------------------------------------------------------------------------------


class Session:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"gpumon-bench-{os.getpid()}"
        self.env = dict(os.environ)
        self.env.update(
            XDG_STATE_HOME=str(tmp / "state"),
            XDG_CONFIG_HOME=str(tmp / "config"),
            TERM="xterm-256color",
        )
        self.env.pop("TMUX", None)

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def start(self, width: int, height: int) -> float:
        """Start ``gpumon demo``; returns seconds until a GPU row with memory is drawn."""
        t0 = time.monotonic()
        self.tmux("new-session", "-d", "-s", "b", "-x", str(width), "-y", str(height),
                  str(GPUMON), "demo")  # fmt: skip
        while "/95.6G" not in self.tmux("capture-pane", "-p", "-t", "b"):
            if time.monotonic() - t0 > 20:
                raise SystemExit("gpumon demo drew no data in 20 s")
            time.sleep(0.02)
        return time.monotonic() - t0

    def pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env,
                       capture_output=True)  # fmt: skip


def cpu_ticks(root: int) -> tuple[int, int]:
    """(ticks of ``root`` itself, ticks of everything below it, reaped children included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(st[1])
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - below
        below |= frontier
    st = stat(root)
    assert st is not None, "gpumon is gone"
    own = int(st[11]) + int(st[12])
    reaped = int(st[13]) + int(st[14])  # children gpumon waited for
    return own, reaped + ticks(list(below), reaped=True)


def tmux_part(seconds: float) -> None:
    if shutil.which("tmux") is None:
        print("\ntmux not installed: CPU and first-frame figures skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        firsts = []
        for _ in range(3):
            session = Session(Path(tmp))
            try:
                firsts.append(session.start(120, 40))
            finally:
                session.kill()
            time.sleep(0.5)
        print("\nfirst frame with data after starting `gpumon demo` (tmux 120x40, 20 ms polls)")
        verdict = "ok" if max(firsts) < 1 else "OVER"
        shown = ", ".join(f"{f * 1000:.0f}" for f in firsts)
        print(f"  {shown} ms  (target < 1000 ms: {verdict})")

        session = Session(Path(tmp))
        try:
            session.start(120, 40)
            time.sleep(2)  # past start-up
            pid = session.pid()
            own0, kids0 = cpu_ticks(pid)
            t0 = time.monotonic()
            time.sleep(seconds)
            own1, kids1 = cpu_ticks(pid)
            wall = time.monotonic() - t0
        finally:
            session.kill()
        own = (own1 - own0) / CLK_TCK / wall * 100
        kids = (kids1 - kids0) / CLK_TCK / wall * 100
        print(f"\nCPU of `gpumon demo` at 1 Hz in tmux 120x40 over {wall:.0f} s")
        print(f"  gpumon (the dashboard)       {own:5.2f} % of one core"
              f"  (target <= 2 %: {'ok' if own <= 2 else 'OVER'})")  # fmt: skip
        print(f"  agent + simulator children   {kids:5.2f} % of one core")
        print(f"  together                     {own + kids:5.2f} % of one core"
              f"  (target <= 2 %: {'ok' if own + kids <= 2 else 'OVER'})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help="CPU measurement length")
    parser.add_argument("--rounds", type=int, default=40, help="timed refreshes per size")
    parser.add_argument("--skip-tmux", action="store_true", help="in-process figures only")
    args = parser.parse_args()
    for size in ((80, 24), (200, 60)):
        asyncio.run(in_process(size, args.rounds))
        asyncio.run(in_process(size, args.rounds, "sglang"))
    if not args.skip_tmux:
        tmux_part(args.seconds)


if __name__ == "__main__":
    main()
