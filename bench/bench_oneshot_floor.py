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
disturbed least), in ms. Then, measured alone: how much of ``snapshot local``'s CPU is the
standard library's ``dataclass`` decorator making the classes the command imports (each
class's ``__init__``, ``__eq__``, ``__repr__``... compiled from source by ``exec``:
``dataclasses._process_class`` timed in the process, its thread's CPU), and how many classes.

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


# ``snapshot local`` in one process with the dataclass decorator's work timed: the CPU it
# took and the classes it made, printed last on stderr ("SPENT <s> <classes>").
DATACLASSES_TIMED = """
import dataclasses, sys, time
made = dataclasses._process_class
spent = [0.0, 0]
def timed(*args, **kwargs):
    t = time.thread_time()
    try:
        return made(*args, **kwargs)
    finally:
        spent[0] += time.thread_time() - t
        spent[1] += 1
dataclasses._process_class = timed
sys.argv = ["gpumon", "snapshot", "local"]
from gpumon.tui.cli import main
try:
    main()
except SystemExit:
    pass
print("SPENT", spent[0], spent[1], file=sys.stderr)
"""


def _env(venv_bin: Path) -> dict[str, str]:
    return {
        "PATH": f"{venv_bin}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONPATH": str(SHIM),
    }


def cpu_s(argv: list[str], venv_bin: Path) -> float:
    env = _env(venv_bin)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime


def dataclass_cpu_s(py: str, venv_bin: Path) -> tuple[float, int]:
    """The CPU ``snapshot local`` spent in the dataclass decorator, and how many classes."""
    done = subprocess.run(
        [py, "-c", DATACLASSES_TIMED],
        env=_env(venv_bin),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    last = done.stderr.strip().splitlines()[-1:] or [""]
    word, spent, classes = ([*last[0].split(), "", "", ""])[:3]
    if word != "SPENT":
        raise SystemExit(f"the timed snapshot local said no figure: {done.stderr[-500:]}")
    return float(spent), int(classes)


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
    timed = [dataclass_cpu_s(py, venv_bin) for _ in range(args.runs)]
    spent = [s for s, _ in timed]
    print(
        f"of snapshot local, the dataclass decorator ({timed[0][1]} classes): median "
        f"{statistics.median(spent) * 1000:.0f} ms, least {min(spent) * 1000:.0f} ms "
        f"(load average {os.getloadavg()[0]:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
