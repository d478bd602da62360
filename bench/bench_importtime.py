"""What each command's start imports and what it costs: ``python -X importtime``, summarised.

For each command, ``--runs`` fresh starts of the venv's ``gpumon`` with
``PYTHONPROFILEIMPORTTIME=1`` in the side-by-side runs' environment (``env -i``, the
benches' NVML shim on PYTHONPATH: 8 simulated GPUs behind the real nvidia-ml-py). Printed
per command: the import time in all (the sum of every module's own time, median of the
runs; importtime's own overhead included, so compare within one run), the time per area
(Textual and Rich, asyncssh and cryptography, asyncio, gpumon's packages, the rest of the
standard library, the bench shim and pynvml), the modules with the most own time (the
least of the runs, the least disturbed by the machine's load) and which of the modules the
command must not load it loaded.

The dashboard (``local``) runs in tmux at 120x40 until its first frame with GPUs; importtime
writes to the process's stderr and Textual to ``sys.__stderr__``, so the wrapper gives
Textual the pane (stdout) and keeps stderr for the report.

``--check``: CI's step (``.ci/run``): ``gpumon snapshot local`` once, its import time
printed, exit 1 only when it imported a module its fast path must not (``FORBIDDEN``):
no timing is judged, only what was imported.

    python bench/bench_importtime.py [--runs 5] [--venv .venv] [--commands snapshot-local,...]
    python bench/bench_importtime.py --check
"""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpumon.backends.monitor.oneshot import OFF_PATH

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "bench" / "nvml_shim"

# What the one-shots (snapshot, check) must not import: the UI (Textual, Rich, plotext),
# the simulator (only the demo host runs it), the notifiers and the exporter (only watch
# and the dashboard deliver), asyncssh (only a host over SSH); ``snapshot local`` not
# asyncio either.
FORBIDDEN = (
    "textual",
    "rich",
    "plotext",
    "gpumon.backends.sim",
    "gpumon.backends.notify",
    "gpumon.backends.exporter",
    "prometheus_client",
    "asyncssh",
)
# What ``snapshot local`` does not use and so must not import either: asyncio (its round
# runs without an event loop); what only jobs, servers or a decoded alert fact need (the
# flight recorder's parser with pickle, a job's trackers, verdicts and baselines, the SGLang
# and vLLM servers' trackers and parsers).
SNAPSHOT_UNUSED = ("asyncio", *OFF_PATH)

# The dashboard's wrapper: Textual writes its screen to sys.__stderr__ (LinuxDriver), so
# it gets the pane (stdout), and fd 2 stays the importtime report's file.
DASHBOARD = (
    "import sys; sys.__stderr__ = sys.stderr = sys.__stdout__; "
    "from gpumon.tui.cli import main; sys.exit(main(sys.argv[1:]))"
)


@dataclass(frozen=True)
class Command:
    label: str
    argv: list[str]
    forbidden: tuple[str, ...] = ()
    dashboard: bool = False


COMMANDS = {
    c.label: c
    for c in (
        # the agent's round in gpumon's own process, no event loop (``monitor.oneshot``)
        Command("snapshot-local", ["snapshot", "local"], (*FORBIDDEN, *SNAPSHOT_UNUSED)),
        Command("check-local", ["check", "local"], FORBIDDEN),
        Command(
            "snapshot-demo",
            ["snapshot", "demo"],
            tuple(m for m in FORBIDDEN if m != "gpumon.backends.sim"),
        ),
        Command("version", ["--version"], FORBIDDEN),
        Command("dashboard-local", ["local"], dashboard=True),
    )
}

AREAS = (
    ("Textual, Rich", ("textual", "rich", "markdown_it", "mdurl", "pygments", "linkify_it")),
    ("asyncssh, cryptography", ("asyncssh", "cryptography", "cffi", "_cffi_backend")),
    ("asyncio", ("asyncio",)),
    ("gpumon tui", ("gpumon.tui",)),
    ("gpumon backends.remote", ("gpumon.backends.remote",)),
    ("gpumon backends", ("gpumon",)),
    (
        "shim, pynvml",
        ("sitecustomize", "nvml_fake", "pynvml", "ctypes", "uuid", "hashlib", "_hashlib"),
    ),
    ("site, encodings", ("site", "encodings", "_distutils_hack", "__editable__")),
)


def area(module: str) -> str:
    if module.startswith("__editable__"):  # setuptools' finder of an editable install
        return "site, encodings"
    for name, roots in AREAS:
        if any(module == r or module.startswith(r + ".") for r in roots):
            return name
    return "stdlib and the rest"


def parse(text: str) -> dict[str, int]:
    """importtime's lines: 'import time: SELF_US | CUMULATIVE_US | [indent]NAME'."""
    own: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            own[parts[2].strip()] = int(parts[0])
    return own


def env_words(venv_bin: Path, pids: str | None) -> list[str]:
    """``env -i`` and the runs' environment; ``pids``: the shim's GPU processes (None:
    the command line sets them after these words)."""
    shim = [] if pids is None else [f"NVML_SHIM_PIDS={pids}"]
    return [
        "env",
        "-i",
        f"PATH={venv_bin}:/usr/bin:/bin",
        f"HOME={os.environ.get('HOME', '/root')}",
        "LANG=C.UTF-8",
        f"PYTHONPATH={SHIM}",
        *shim,
        "PYTHONPROFILEIMPORTTIME=1",
    ]


def importtime(argv: list[str], timeout: float) -> dict[str, int]:
    """Each module's own import time (us) of the command ``argv``, from its stderr."""
    res = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    return parse(res.stderr)


# ``--check``'s premise is a plain host: no SGLang or vLLM server on it, whose discovery
# would rightly import their trackers. Another process on the machine (a test's stand-in
# server, a user's own) must not fail CI's step, so the check runs in a PID namespace of
# its own, where /proc shows only it and its 8 sleepers (the shim's GPU processes).
ISOLATED = (
    'p=; for i in 1 2 3 4 5 6 7 8; do sleep 10000 & p="$p${p:+,}$!"; done; '
    'exec "$@" NVML_SHIM_PIDS="$p" TERM=dumb "$GPUMON" $ARGS'
)
UNSHARE = (
    ["unshare", "--pid", "--fork", "--mount-proc"],
    ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"],
)


def namespace() -> list[str] | None:
    """The ``unshare`` words that give a command a PID namespace and /proc of its own
    here (as root, else as a user namespace's root); None where neither works."""
    for words in UNSHARE:
        try:
            ok = subprocess.run([*words, "true"], capture_output=True, check=False, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return words
    return None


def run_isolated(cmd: Command, venv_bin: Path, ns: list[str], timeout: float) -> dict[str, int]:
    """``run_one`` in the PID namespace ``ns`` gives, its sleepers started there."""
    script = ISOLATED.replace("$GPUMON", shlex.quote(str(venv_bin / "gpumon")))
    script = script.replace("$ARGS", shlex.join(cmd.argv))
    return importtime([*ns, "sh", "-c", script, "sh", *env_words(venv_bin, None)], timeout)


def run_one(cmd: Command, venv_bin: Path, pids: str, timeout: float) -> dict[str, int]:
    if cmd.dashboard:
        return run_dashboard(cmd, venv_bin, pids, timeout)
    gpumon = [*env_words(venv_bin, pids), "TERM=dumb", str(venv_bin / "gpumon"), *cmd.argv]
    return importtime(gpumon, timeout)


def run_dashboard(cmd: Command, venv_bin: Path, pids: str, timeout: float) -> dict[str, int]:
    sock = f"gpumon-importtime-{os.getpid()}"
    with tempfile.NamedTemporaryFile("r", suffix=".importtime") as report:
        words = [*env_words(venv_bin, pids), "TERM=tmux-256color"]
        words += [str(venv_bin / "python"), "-c", DASHBOARD, *cmd.argv]
        line = f"exec {shlex.join(words)} 2>{shlex.quote(report.name)}"
        tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", line], check=True)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:  # the first frame with the GPUs' rows
                screen = subprocess.run(
                    [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=False
                ).stdout
                if "MiB" in screen or "GiB" in screen:
                    break
                time.sleep(0.2)
            time.sleep(1.0)  # what the first samples import after the first frame
        finally:
            subprocess.run([*tmux, "kill-server"], check=False, stderr=subprocess.DEVNULL)
        return parse(Path(report.name).read_text())


def summarise(cmd: Command, runs: list[dict[str, int]], top: int) -> list[str]:
    totals = [sum(r.values()) / 1000 for r in runs]
    loaded = set().union(*runs)
    least = {m: min(r.get(m, 10**9) for r in runs) for m in loaded}
    by_area: collections.Counter[str] = collections.Counter()
    for m, us in least.items():
        by_area[area(m)] += us
    bad = sorted({f for f in cmd.forbidden for m in loaded if m == f or m.startswith(f + ".")})
    print(
        f"\n== gpumon {shlex.join(cmd.argv)}: {len(loaded)} modules, import time median "
        f"{statistics.median(totals):.1f} ms ({' '.join(f'{t:.0f}' for t in sorted(totals))}),"
        f" load average {os.getloadavg()[0]:.2f}"
    )
    print("  own time per area (ms; each module's least of the runs)")
    for name, us in by_area.most_common():
        print(f"    {name:<26} {us / 1000:7.1f}")
    if top:
        print(f"  top {top} modules by own time (ms)")
        for m, us in sorted(least.items(), key=lambda kv: -kv[1])[:top]:
            print(f"    {us / 1000:7.1f}  {m}")
    if cmd.forbidden:
        print(f"  forbidden here ({', '.join(cmd.forbidden)}): {', '.join(bad) or 'none loaded'}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--venv", default=str(Path(sys.executable).parent.parent))
    ap.add_argument("--commands", default=",".join(COMMANDS), help=", ".join(COMMANDS))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--check", action="store_true", help="CI: snapshot local's imports")
    args = ap.parse_args()
    venv_bin = Path(args.venv) / "bin"
    names = ["snapshot-local"] if args.check else args.commands.split(",")
    runs = 1 if args.check else args.runs
    ns = namespace() if args.check else None
    if args.check:
        where = "in a PID namespace of its own" if ns else "NOT isolated (no unshare here)"
        print(f"gpumon snapshot local runs {where}: other processes' servers are not seen")
    sleepers = [subprocess.Popen(["sleep", "10000"]) for _ in range(8)]
    pids = ",".join(str(p.pid) for p in sleepers)
    bad: list[str] = []
    try:
        for name in names:
            cmd = COMMANDS[name]
            if ns is not None:
                got = [run_isolated(cmd, venv_bin, ns, args.timeout) for _ in range(runs)]
            else:
                got = [run_one(cmd, venv_bin, pids, args.timeout) for _ in range(runs)]
            if not any(got):
                print(f"gpumon {shlex.join(cmd.argv)}: no importtime report", file=sys.stderr)
                return 1
            bad += summarise(cmd, got, 0 if args.check else args.top)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    if args.check and bad:
        print(f"FAIL: the fast path imported {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
