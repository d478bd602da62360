"""What the incident page costs ``gpumon watch`` (issue 40): its CPU over ``--seconds``
without a page view, then with one every ``--every`` seconds (``/`` and the OOM's
incident page, the way a phone left open on it refreshes), in windows that alternate
(``--rounds`` of each), so the machine's other load falls on both alike. Also the time
to answer each page (median of the views).

The watch runs ``demo`` at speed 1 from scenario time 40 s: the drafter's OOM comes
10 s later and the page's incident is its (active, then resolved: still found in the
alert history), the same for both kinds of window.

    python bench/bench_web.py [--seconds 60] [--every 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from prometheus import free_port

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
_dashboard: Any = importlib.import_module("bench_dashboard")
CLK_TCK, cpu_ticks = _dashboard.CLK_TCK, _dashboard.cpu_ticks


def fetch(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = resp.read()
    return (time.perf_counter() - start) * 1000, body


def window(pid: int, seconds: float, views: list[str], every: float) -> tuple[float, list[float]]:
    """(CPU % of one core of the watch itself over ``seconds``, each view's ms)."""
    took: list[float] = []
    start, t0 = cpu_ticks(pid), time.monotonic()
    while time.monotonic() - t0 < seconds:
        if views:
            for url in views:
                took.append(fetch(url)[0])
        time.sleep(min(every, max(seconds - (time.monotonic() - t0), 0.0)))
    wall = time.monotonic() - t0
    end = cpu_ticks(pid)
    return (end[0] - start[0]) / CLK_TCK / wall * 100, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="one window")
    parser.add_argument("--every", type=float, default=5.0, help="a page view this often")
    parser.add_argument("--rounds", type=int, default=3, help="windows of each")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": str(Path(tmp) / "state"), "XDG_CONFIG_HOME": tmp}
        watch = subprocess.Popen(
            [*GPUMON, "watch", "demo", "--metrics-port", str(port), "--demo-time", "40"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            key = None
            while key is None:
                assert time.monotonic() < deadline, "no incident on the page"
                time.sleep(1)
                try:
                    _, body = fetch(base + "/api/state")
                except OSError:
                    continue
                listed = json.loads(body)["incidents"]
                key = listed[0]["path"] if listed else None
            views = [base + "/", base + key]
            time.sleep(5)
            quiet: list[float] = []
            viewed: list[float] = []
            took: list[float] = []
            for _ in range(args.rounds):
                quiet.append(window(watch.pid, args.seconds, [], args.every)[0])
                cpu, ms = window(watch.pid, args.seconds, views, args.every)
                viewed.append(cpu)
                took += ms
        finally:
            watch.terminate()
            watch.wait(timeout=30)
    print(f"gpumon watch demo, {args.rounds} x {args.seconds:.0f} s windows of each, alternating")
    print(f"  no page view:               CPU {', '.join(f'{c:.2f}' for c in quiet)} % of one core")
    print(
        f"  / and the incident page every {args.every:.0f} s: CPU "
        f"{', '.join(f'{c:.2f}' for c in viewed)} % of one core"
    )
    print(
        f"  median {statistics.median(viewed) - statistics.median(quiet):+.2f} points; "
        f"a view takes {statistics.median(took):.1f} ms (median of {len(took)}), "
        f"max {max(took):.1f} ms"
    )


if __name__ == "__main__":
    main()
