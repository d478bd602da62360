"""Host-side process attribution: CPU per poll on the Proxmox host, with the host's
Python (``remote.host_procs`` as gpumon ships it) and without (``SHELL_LOOP`` under sh).

    python bench/bench_host_procs.py [--procs 8] [--polls 40] [--interval 0.25]

GPU processes are ``--procs`` sleepers on this machine; nvidia-smi is a tiny sh script that
prints their rows (its own cost is measured and shown apart: a real nvidia-smi costs what
it costs in both variants). CPU is user + system time of the collector and everything it
ran (``RUSAGE_CHILDREN`` around its whole life), divided by the polls it made; the
interpreter's start is measured apart too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gpumon.backends.remote import host_procs, procfacts
from gpumon.backends.remote.bootstrap import program_argv


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fake_smi(root: Path, pids: list[int]) -> Path:
    rows = "\n".join(f"{p}, 1024, GPU-{i % 8}, 00000000:{i:02X}:00.0" for i, p in enumerate(pids))
    smi = root / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{rows}\nEOF\n")
    smi.chmod(0o755)
    return smi


def smi_cost(smi: Path, n: int = 50) -> float:
    before = cpu_children()
    for _ in range(n):
        subprocess.run([str(smi)], stdout=subprocess.DEVNULL, check=True)
    return (cpu_children() - before) / n


def python_cost(smi: Path, polls: int, interval: float) -> tuple[float, float, int]:
    """(CPU s per poll, CPU s of start + exit alone, polls made)."""
    options = json.dumps({"interval": interval, "nvidia_smi": str(smi), "nvml": False})
    argv, data = program_argv(sys.executable, "host_procs", args=[options], flags=("-u",))

    def run(wanted: int) -> tuple[float, int]:
        before = cpu_children()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(data)
        proc.stdin.flush()
        seen = 0
        while seen < wanted:
            line = proc.stdout.readline()
            if not line:
                break
            seen += json.loads(line).get("type") == "proc_records"
        proc.stdin.close()
        proc.wait()
        return cpu_children() - before, seen

    start, _ = run(1)  # start, one poll, exit
    total, seen = run(polls)
    return (total - start) / max(seen - 1, 1), start, seen


def shell_cost(smi: Path, polls: int, interval: float) -> tuple[float, int]:
    argv = ["sh", "-c", host_procs.SHELL_LOOP, "gpumon-host-procs", str(interval), str(smi)]
    before = cpu_children()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    rounds = 0
    while rounds < polls:
        line = proc.stdout.readline()
        if not line:
            break
        rounds += line.startswith(b"@end")
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    return (cpu_children() - before) / max(rounds, 1), rounds


def device_scan_cost(n: int = 10) -> tuple[float, int]:
    """(CPU s per ``device_file_users`` scan of this machine's /proc, processes scanned):
    what the agent inside a container pays per process poll without host access."""
    import time

    started = time.process_time()
    for _ in range(n):
        procfacts.device_file_users()
    count = sum(1 for e in os.listdir("/proc") if e.isdigit())
    return (time.process_time() - started) / n, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--polls", type=int, default=40)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args()
    sleepers = [
        subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL) for _ in range(args.procs)
    ]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            smi = fake_smi(Path(tmp), [p.pid for p in sleepers])
            per_smi = smi_cost(smi)
            py, start, py_polls = python_cost(smi, args.polls, args.interval)
            sh, sh_polls = shell_cost(smi, args.polls, args.interval)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    scan, scanned = device_scan_cost()
    print(f"GPU processes: {args.procs}; polls: python {py_polls}, shell {sh_polls}")
    print(f"stand-in nvidia-smi alone: {per_smi * 1000:.1f} ms CPU per call")
    print(
        f"python host agent: {py * 1000:.1f} ms CPU per poll "
        f"({(py - per_smi) * 1000:.1f} ms without nvidia-smi); "
        f"start + exit {start * 1000:.0f} ms once"
    )
    print(
        f"shell loop (no Python): {sh * 1000:.1f} ms CPU per poll "
        f"({(sh - per_smi) * 1000:.1f} ms without nvidia-smi)"
    )
    print(
        f"inside a container without host access: /proc/*/fd scan {scan * 1000:.1f} ms CPU "
        f"for {scanned} processes"
    )
    every = 3.0
    print(
        f"at one poll every {every:g} s: python {py / every * 100:.2f} % of a core, "
        f"shell {sh / every * 100:.2f} % (plus nvidia-smi's own cost in both)"
    )


if __name__ == "__main__":
    main()
