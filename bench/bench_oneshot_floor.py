"""The one-shot's floor: what ``gpumon snapshot local`` costs before gpumon does anything,
beside the whole command and ``nvitop -1``, in CPU (user+sys of the process and the
children it waited for: gpumon's agent is one), interleaved, in the side-by-side runs'
environment (``env -i``, the NVML shim's 8 GPUs on PYTHONPATH: its sitecustomize patches
pynvml in the processes that import it, nvitop and gpumon's agent).

The steps, each on top of the one before:

- ``python -S``: a bare interpreter, no site (how the agent starts);
- ``python``: site, the venv and the shim (every tool here pays it);
- ``+ asyncio``: the event loop's modules (with ssl, logging, inspect: asyncio imports
  them): what a one-shot on the event loop pays (``snapshot local`` no longer does);
- ``+ gpumon imports``: the modules ``snapshot local`` imports (the agent's included: its
  round runs in gpumon's own process), nothing run;
- ``snapshot local``: the whole command;
- ``snapshot local (BASELINE)``: the same command of another checkout's venv
  (``--baseline-venv``, e.g. main's), interleaved with the rest;
- ``nvitop -1``, when ``--nvitop-venv`` has it.

Printed: the median and least CPU of ``--runs`` (the least is the one the machine's load
disturbed least), in ms.

    python bench/bench_oneshot_floor.py [--runs 10] [--venv .venv] [--nvitop-venv DIR]
        [--baseline-venv ../main/.venv]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "bench" / "nvml_shim"

# What ``snapshot local`` imports before its first sample (its command line, the host
# monitor, the agent whose round it runs, the report), without running any of it.
GPUMON_IMPORTS = (
    "import gpumon.tui.cli.launch, gpumon.tui.cli.command_line, "
    "gpumon.backends.monitor.oneshot, gpumon.backends.monitor.report, "
    "gpumon.backends.remote.agent"
)


def cpu_s(argv: list[str], venv_bin: Path) -> float:
    env = {
        "PATH": f"{venv_bin}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONPATH": str(SHIM),
    }
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--venv", default=str(Path(sys.executable).parent.parent))
    ap.add_argument("--nvitop-venv", default="/tmp/anchors-venv")
    ap.add_argument("--baseline-venv", help="another checkout's venv: its snapshot local too")
    args = ap.parse_args()
    venv_bin = Path(args.venv) / "bin"
    py = str(venv_bin / "python")
    steps = {
        "python -S (bare interpreter)": [py, "-S", "-c", "pass"],
        "python (site, venv, shim)": [py, "-c", "pass"],
        "+ asyncio": [py, "-c", "import asyncio"],
        "+ gpumon imports": [py, "-c", GPUMON_IMPORTS],
        "gpumon snapshot local": [str(venv_bin / "gpumon"), "snapshot", "local"],
    }
    if args.baseline_venv:
        base = Path(args.baseline_venv) / "bin"
        steps["snapshot local (BASELINE)"] = [str(base / "gpumon"), "snapshot", "local"]
    nvitop = Path(args.nvitop_venv) / "bin" / "nvitop"
    if nvitop.exists():
        steps["nvitop -1"] = [str(nvitop), "-1"]
    for argv in steps.values():  # warm the page cache, unrecorded
        cpu_s(argv, venv_bin)
    got: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.runs):  # interleaved
        for name, argv in steps.items():
            got[name].append(cpu_s(argv, venv_bin))
    load = os.getloadavg()[0]
    print(f"CPU in ms (user+sys), {args.runs} runs interleaved, load average {load:.2f}")
    print("| step | median | least |")
    print("|---|---|---|")
    for name, runs in got.items():
        print(f"| {name} | {statistics.median(runs) * 1000:.0f} | {min(runs) * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
