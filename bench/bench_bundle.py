"""How long ``gpumon bundle demo --demo-time 70`` takes and how big its file is.

Runs the command ``--runs`` times (fresh output each time, the user's environment) and
prints the median and range of the wall time, the archive's size on disk, the bytes of its
files before compression and how many files it holds. The time includes the interpreter's
start, the simulator's start, the first rounds of every source (up to 10 s), the demo's
last 10 minutes fed to the recorder, the doctor and the target's commands.

Run: ``.venv/bin/python bench/bench_bundle.py [--runs 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.runs):
            out = Path(folder) / f"b{i}.tar.gz"
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "gpumon.tui.cli", "bundle", "demo", "--demo-time", "70",
                 "-o", str(out)],
                check=True, capture_output=True,
            )  # fmt: skip
            walls.append(time.perf_counter() - began)
        with tarfile.open(out) as tar:
            members = tar.getmembers()
        raw = sum(m.size for m in members)
        size = out.stat().st_size
    print(
        f"gpumon bundle demo --demo-time 70: median {statistics.median(walls):.2f} s "
        f"(min {min(walls):.2f}, max {max(walls):.2f}, {args.runs} runs); "
        f"{size / 1024:.0f} KiB on disk, {raw / 1024:.0f} KiB in {len(members)} files"
    )


if __name__ == "__main__":
    main()
