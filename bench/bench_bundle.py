"""What ``gpumon bundle`` costs: the demo's bundle, and a host whose followed log is a
large file with no newline (issue 34).

- ``demo``: ``gpumon bundle demo --demo-time 70``, ``--runs`` times (fresh output each
  time, the user's environment): the median and range of the wall time, the archive's
  size on disk, the bytes of its files before compression, how many files it holds. The
  time includes the interpreter's start, the simulator's start, the first rounds of every
  source (up to 10 s), the demo's last 10 minutes fed to the recorder, the doctor and the
  target's commands.
- ``nul-log``: a real sshd on 127.0.0.1 (``tests/support/sshd_server.py``) whose host
  follows a job log with a CUDA OOM (the incident) and a ``--log-mb`` MiB file of NUL
  bytes with no newline (sparse: no disk), bundled with ``--time``. Printed: the peak RSS
  of the gpumon process (``ru_maxrss`` of that child, from ``wait4``), its wall time, its
  exit code, and the size in the bundle of the log's file against the per-file cap.
  ``--line-at-end``: one short line after the NULs, so the agent sends a line of it (a
  gpumon that only bundled the logs it had heard from read the whole file then).

Run: ``PYTHONPATH=tests/support .venv/bin/python bench/bench_bundle.py [--case all]
[--runs 3] [--log-mb 256] [--time 60] [--line-at-end]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from gpumon.backends.bundle.archive import FILE_CAP

from sshd_server import SshServer

REPO = Path(__file__).resolve().parents[1]
GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]


def demo(runs: int) -> None:
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(runs):
            out = Path(folder) / f"b{i}.tar.gz"
            began = time.perf_counter()
            subprocess.run(
                [*GPUMON, "bundle", "demo", "--demo-time", "70", "-o", str(out)],
                check=True, capture_output=True,
            )  # fmt: skip
            walls.append(time.perf_counter() - began)
        with tarfile.open(out) as tar:
            members = tar.getmembers()
        raw = sum(m.size for m in members)
        size = out.stat().st_size
    print(
        f"gpumon bundle demo --demo-time 70: median {statistics.median(walls):.2f} s "
        f"(min {min(walls):.2f}, max {max(walls):.2f}, {runs} runs); "
        f"{size / 1024:.0f} KiB on disk, {raw / 1024:.0f} KiB in {len(members)} files"
    )


def nul_log(log_mb: int, seconds: float, line_at_end: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        server = SshServer(root / "sshd")
        server.setup()
        server.start()
        try:
            oom = root / "train.log"
            traceback = REPO / "tests" / "fixtures" / "nvidia" / "torch_oom_traceback.txt"
            oom.write_text("step 1 loss=2.1\n" + traceback.read_text())
            nul = root / "nul.log"
            with nul.open("wb") as f:
                f.truncate(log_mb << 20)
                if line_at_end:
                    f.seek(0, os.SEEK_END)
                    f.write(b"\nstep 2 loss=2.0\n")
            config = root / "config.toml"
            config.write_text(
                server.config_toml(python=sys.executable)
                + f"watch_logs = {json.dumps([str(oom), str(nul)])}\n"
            )
            home = root / "home"
            home.mkdir()
            env = dict(
                os.environ,
                HOME=str(home),
                GPUMON_SSH_CONFIG="",
                XDG_CONFIG_HOME=str(home / ".config"),
                XDG_STATE_HOME=str(home / ".state"),
            )
            out = root / "b.tar.gz"
            argv = [*GPUMON, "--config", str(config), "bundle", "ct200", "-o", str(out)]
            began = time.perf_counter()
            child = subprocess.Popen(
                [*argv, "--time", f"{seconds:g}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - began
            child.returncode = os.waitstatus_to_exitcode(status)
            kept = 0
            if out.exists():
                with tarfile.open(out) as tar:
                    kept = sum(m.size for m in tar.getmembers() if m.name.endswith("nul.log"))
        finally:
            server.kill()
    but = " but one line at its end" if line_at_end else ""
    print(
        f"gpumon bundle of a host following a {log_mb} MiB log with no newline{but} "
        f"(--time {seconds:g}): peak RSS {usage.ru_maxrss / 1024:.0f} MiB, {wall:.1f} s, "
        f"exit {child.returncode}; the log's file in the bundle {kept / 2**20:.1f} MiB "
        f"(cap {FILE_CAP / 2**20:.0f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("demo", "nul-log", "all"), default="all")
    parser.add_argument("--runs", type=int, default=3, help="demo runs")
    parser.add_argument("--log-mb", type=int, default=256, help="the NUL log's size")
    parser.add_argument("--time", type=float, default=60.0, help="the bundle's --time")
    parser.add_argument("--line-at-end", action="store_true", help="one line after the NULs")
    args = parser.parse_args()
    if args.case in ("demo", "all"):
        demo(args.runs)
    if args.case in ("nul-log", "all"):
        nul_log(args.log_mb, args.time, args.line_at_end)


if __name__ == "__main__":
    main()
