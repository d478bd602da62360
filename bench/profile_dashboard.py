"""Where the dashboard's and its agent's CPU goes: py-spy on each, the top costs printed.

Runs ``gpumon local`` as the side-by-side runs do (tmux at 120x40, ``env -i`` with the
benches' NVML shim on PYTHONPATH: 8 simulated GPUs behind the real nvidia-ml-py, 8
sleeping processes as their users), waits ``--warmup`` s, then samples the dashboard's
process and its agent's, each with its own ``py-spy record`` (raw stacks, 100 Hz, without
pausing the process), for ``--seconds`` s. Printed for each: its CPU over the window from
/proc (utime+stime, % of one core) and, from the samples, the top functions by self time
and by total time (ms of CPU per second of wall time), and the self time per area
(Textual, Rich, gpumon's tui and backends packages, asyncio, the rest of the standard
library). Only samples of a thread holding the GIL count (``--gil``): py-spy's own idle
test, here, takes threads blocked in select() or a lock's wait for busy ones; a C call
that lets the GIL go while it works (zlib on a large buffer, a read) is then not seen, so
the samples' sum is the Python part of the CPU figure from /proc.

py-spy is in the test extra (requirements-test.lock), not gpumon's own locks: the
test venv has it, or name it with ``--py-spy``. It reads the
processes' memory (ptrace): run as root or with ``kernel.yama.ptrace_scope=0``.

    python bench/profile_dashboard.py [--seconds 60] [--venv /tmp/anchors-venv]
        [--command 'gpumon local'] [--top 20] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procfs import CLK_TCK, cmdline, memory_kib, ticks, tree

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "bench" / "nvml_shim"
RATE = 100  # py-spy samples a second

# Self time grouped by where the frame's file is: py-spy shortens a path to its package
# part ("textual/app.py", "asyncio/events.py"); the agent's modules run as gpumon_remote.
AREAS = (
    ("textual", ("textual/",)),
    ("rich", ("rich/",)),
    ("gpumon tui", ("gpumon/tui/", "tui/")),
    ("gpumon backends", ("gpumon/backends/", "backends/")),
    ("agent (backends/remote)", ("gpumon_remote", "remote/")),
    ("pynvml + shim", ("pynvml", "sitecustomize", "nvml_fake")),
    ("asyncssh", ("asyncssh/",)),
    ("asyncio", ("asyncio/",)),
)


def area(frame: str) -> str:
    where = frame.rsplit("(", 1)[-1]
    for name, marks in AREAS:
        if any(m in where for m in marks):
            return name
    return "stdlib and the rest"


def read_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw format: one stack a line, frames root first joined by ';', a count."""
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def report(
    name: str, stacks: list[tuple[list[str], int]], cpu_pct: float, seconds: float, top: int
) -> None:
    total = sum(c for _, c in stacks)
    per_s = 1000.0 / RATE / seconds  # ms of CPU a second of wall time, per sample
    print(
        f"\n== {name}: {cpu_pct:.2f} % of one core by /proc; py-spy: {total} busy samples, "
        f"{total * per_s:.1f} ms/s"
    )
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        own[frames[-1]] += count
        areas[area(frames[-1])] += count
        for frame in set(frames):
            incl[frame] += count
    print(f"  self time by area (ms/s, share of {name}'s samples)")
    for where, count in areas.most_common():
        print(f"    {where:<28} {count * per_s:6.2f}  {100 * count / total:5.1f} %")
    for title, counter in (("self", own), ("total (incl. callees)", incl)):
        print(f"  top {top} by {title} (ms/s, share)")
        for frame, count in counter.most_common(top):
            print(f"    {count * per_s:6.2f}  {100 * count / total:5.1f} %  {frame[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument(
        "--venv",
        default=str(Path(sys.executable).parent.parent),
        help="the venv gpumon runs from (default: this interpreter's)",
    )
    ap.add_argument("--command", default="gpumon local")
    ap.add_argument("--py-spy", default=None, help="py-spy (default: the venv's, or PATH's)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--keep", default=None, help="a folder to keep the raw profiles in")
    args = ap.parse_args()

    venv_bin = Path(args.venv) / "bin"
    spy = args.py_spy or (
        str(venv_bin / "py-spy") if (venv_bin / "py-spy").exists() else shutil.which("py-spy")
    )
    if not spy:
        print(
            "py-spy not found: pip install py-spy into the bench's venv, or --py-spy",
            file=sys.stderr,
        )
        return 2
    sleepers = [subprocess.Popen(["sleep", "10000"]) for _ in range(8)]
    pids = ",".join(str(p.pid) for p in sleepers)
    sock = f"gpumon-profile-{os.getpid()}"
    env = shlex.join(
        [
            "env",
            "-i",
            f"PATH={venv_bin}:/usr/bin:/bin",
            f"HOME={os.environ.get('HOME', '/root')}",
            "LANG=C.UTF-8",
            "TERM=tmux-256color",
            f"PYTHONPATH={SHIM}",
            f"NVML_SHIM_PIDS={pids}",
        ]
    )
    out_dir = Path(args.keep or tempfile.mkdtemp(prefix="gpumon-profile-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [
                "tmux",
                "-L",
                sock,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "40",
                "-s",
                "m",
                f"exec {env} {args.command}",
            ],
            check=True,
        )
        dash = int(
            subprocess.run(
                ["tmux", "-L", sock, "display", "-p", "#{pane_pid}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        time.sleep(args.warmup)
        agents = [p for p in tree(dash)[1:] if "gpumon-agent" in cmdline(p)]
        targets = {"dashboard": dash, **({"agent": agents[0]} if agents else {})}
        if not agents:
            print("no agent under the dashboard (not a local host?): the dashboard alone")
        spies, before = {}, {}
        for name, pid in targets.items():
            before[name] = ticks([pid])
            spies[name] = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(int(args.seconds)),
                    "--rate",
                    str(RATE),
                    "--format",
                    "raw",
                    "--gil",
                    "--nonblocking",
                    "--output",
                    str(out_dir / f"{name}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        t0 = time.time()
        for spy_proc in spies.values():
            spy_proc.wait()
        wall = time.time() - t0
        load = os.getloadavg()
        after = {name: ticks([pid]) for name, pid in targets.items()}
        rss = {n: (memory_kib([p]), memory_kib([p], "VmHWM")) for n, p in targets.items()}
        print(
            f"{args.command!r} under tmux 120x40, {wall:.0f} s window, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores"
        )
        for name in targets:
            print(
                f"  {name}: RSS {rss[name][0] / 1024:.1f} MiB, peak {rss[name][1] / 1024:.1f} MiB"
            )
        for name in targets:
            cpu = 100 * (after[name] - before[name]) / CLK_TCK / wall
            report(name, read_raw(out_dir / f"{name}.txt"), cpu, wall, args.top)
        if args.keep:
            print(f"\nraw profiles in {out_dir}")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], check=False, stderr=subprocess.DEVNULL)
        for p in sleepers:
            p.kill()
            p.wait()
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
