"""Textual's own floor beside gpumon's dashboard: what a minimal Textual app costs when it
does what the dashboard's GPU table does each second, measured in the same run.

The floor app (``--app``): the same Textual as gpumon's, one ``Static`` of 9 lines (a
header and 8 GPU rows, 118 columns, the numbers in them changing every second) updated at
1 Hz; nothing else. Beside it, ``gpumon local`` on the NVML shim's 8 GPUs (dashboard and
agent). Each runs in tmux at 120x40, interleaved (floor, gpumon, floor, gpumon ...) for
``--runs`` windows of ``--window`` s after ``--warmup`` s; printed per run: CPU (% of one
core, utime+stime of the pane's process and its descendants over the window, from
/proc) and the tree's peak (sum of VmHWM) and end RSS. What gpumon costs above the floor
is gpumon's own; the floor is what any Textual dashboard pays.

    python bench/bench_textual_floor.py [--runs 2] [--window 30] [--venv .venv]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from procfs import CLK_TCK, memory_kib, ticks, tree

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "bench" / "nvml_shim"


def run_app() -> None:
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Floor(App[None]):
        def compose(self) -> ComposeResult:
            yield Static(id="rows")

        def on_mount(self) -> None:
            self.n = 0
            self.tick()
            self.set_interval(1.0, self.tick)

        def tick(self) -> None:
            self.n += 1
            head = f"{'GPU':<4}{'NAME':<24}{'UTIL':>6}{'MEM':>22}{'TEMP':>6}{'POWER':>12}"
            rows = [
                f"{g:<4}{'NVIDIA H100 80GB HBM3':<24}{(self.n * 7 + g * 13) % 100:>5}%"
                f"{(self.n * 311 + g * 997) % 81559:>12} / 81559 MiB{40 + (self.n + g) % 30:>5}C"
                f"{100 + (self.n * 3 + g) % 600:>8} W" + " " * 40
                for g in range(8)
            ]
            self.query_one("#rows", Static).update("\n".join([head.ljust(118), *rows]))

    Floor().run()


def measure(
    name: str, argv: list[str], venv_bin: Path, warmup: float, window: float
) -> dict[str, float]:
    env = [
        "env",
        "-i",
        f"PATH={venv_bin}:/usr/bin:/bin",
        f"HOME={os.environ.get('HOME', '/root')}",
        "LANG=C.UTF-8",
        "TERM=tmux-256color",
        f"PYTHONPATH={SHIM}",
    ]
    sock = f"gpumon-floor-{os.getpid()}-{name}"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "120", "-y", "40", f"exec {shlex.join(env + argv)}"],
        check=True,
    )
    try:
        pid = int(subprocess.check_output([*tmux, "display", "-p", "#{pane_pid}"], text=True))
        time.sleep(warmup)
        t0, w0 = ticks(tree(pid), reaped=True), time.monotonic()
        time.sleep(window)
        pids = tree(pid)
        t1, w1 = ticks(pids, reaped=True), time.monotonic()
        pane = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True)
        screen = pane.stdout
        if not screen.strip():
            raise SystemExit(f"{name}: blank screen after the window")
        return {
            "cpu": 100 * (t1 - t0) / CLK_TCK / (w1 - w0),
            "peak": memory_kib(pids, "VmHWM") / 1024,
            "rss": memory_kib(pids, "VmRSS") / 1024,
            "procs": len(pids),
        }
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", action="store_true", help="run the floor app itself")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--venv", default=str(Path(sys.executable).parent.parent))
    args = ap.parse_args()
    if args.app:
        run_app()
        return 0
    venv_bin = Path(args.venv) / "bin"
    tools = {
        "textual-floor": [str(venv_bin / "python"), str(Path(__file__).resolve()), "--app"],
        "gpumon-local": [str(venv_bin / "gpumon"), "local"],
    }
    got: dict[str, list[dict[str, float]]] = {n: [] for n in tools}
    print("| tool | run | CPU % of one core | tree peak MiB | RSS at end MiB | procs | load |")
    print("|---|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        for name, argv in tools.items():
            m = measure(name, argv, venv_bin, args.warmup, args.window)
            got[name].append(m)
            print(
                f"| {name} | {run} | {m['cpu']:.2f} | {m['peak']:.1f} | {m['rss']:.1f} "
                f"| {m['procs']:.0f} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )
    floor, gm = got["textual-floor"], got["gpumon-local"]
    print(
        "gpumon local / Textual floor: CPU "
        + ", ".join(f"{g['cpu'] / f['cpu']:.2f}x" for f, g in zip(floor, gm, strict=True))
        + f"; tree peak {statistics.median(g['peak'] for g in gm):.1f} against "
        f"{statistics.median(f['peak'] for f in floor):.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
