"""From a stalled collective to the named rank: how long gpumon takes.

A stall is known after ``stall_after_s`` of silence (or at once on the NCCL watchdog's
line, which itself waited its timeout); the rank is named when ``r`` keeps the evidence:
the dumps are read from the target and analysed before the stop. This measures the part
after the stall is known, on the real captures (tests/fixtures/upstream/flight-recorder/):

- ``analyze``: reading and analysing one job's dumps in process (``parsers.flight_recorder``),
  per release and dump set, the median of ``--repeat`` runs;
- ``demo r``: ``gpumon restart demo drafter --scenario stall --demo-time 150 --yes`` as a
  user runs it: the seconds from the command's start (the demo's start-up, its first
  rounds and the plan included) to its evidence line naming the rank, and to the stop (the
  whole evidence step, its bundle written), the median of ``--runs``.

The time from the stall to the named rank is then ``stall_after_s`` (or the watchdog's
timeout) plus the ``demo r`` figure up to the named rank.

    python bench/bench_fr_rank.py [--repeat 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpumon.backends.parsers.flight_recorder import analyze

CAPTURES = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "upstream" / "flight-recorder"
)


def bench_analyze(repeat: int) -> None:
    for release in sorted(CAPTURES.glob("torch-*")):
        for kind in ("on-demand", "on-timeout"):
            dumps = {
                int(p.name.rsplit("_", 1)[1]): p.read_bytes()
                for p in (release / kind).glob("trace_rank_*")
            }
            took = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                report = analyze(dumps)
                took.append(time.perf_counter() - t0)
            size = sum(map(len, dumps.values()))
            print(
                f"analyze {release.name} {kind}: {len(dumps)} dumps, {size} bytes: "
                f"{statistics.median(took) * 1000:.2f} ms (median of {repeat}); "
                f"{report.words('job')}"
            )


def bench_demo(runs: int) -> None:
    named, stopped = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "XDG_STATE_HOME": f"{home}/state", "HOME": home}
            env.pop("GPUMON_CONFIG", None)
            argv = [sys.executable, "-m", "gpumon.tui.cli", "restart", "demo", "drafter"]
            argv += ["--scenario", "stall", "--demo-time", "150", "--yes"]
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            seen: dict[str, float] = {}
            for line in proc.stdout:
                now = time.monotonic() - t0
                if "never entered" in line and "named" not in seen:
                    seen["named"] = now
                if line.startswith("[stop] stopping") and "stop" not in seen:
                    seen["stop"] = now
            proc.wait()
            if "named" not in seen or "stop" not in seen:
                raise SystemExit(f"bench_fr_rank: the run named no rank (exit {proc.returncode})")
            named.append(seen["named"])
            stopped.append(seen["stop"])
    print(
        f"demo r: the rank named {statistics.median(named):.2f} s after the command started, "
        f"the stop at {statistics.median(stopped):.2f} s (median of {runs}; "
        f"all: {', '.join(f'{n:.2f}' for n in named)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bench_analyze(args.repeat)
    bench_demo(args.runs)


if __name__ == "__main__":
    main()
