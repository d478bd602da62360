"""How long one ``gpumon snapshot`` takes, where the time goes, and ``nvitop -1`` beside it.

Two targets: ``local`` (the agent on gpumon's own interpreter) and ``HOST``, a real sshd
on 127.0.0.1 (``tests/support/sshd_server.py``: throwaway keys; its sessions get the NVML
shim on PYTHONPATH through sshd's SetEnv, so both see the same 8 simulated GPUs).

- total: each command timed as the side-by-side runs time their one-shots
  (``bash -c "env -i PATH=VENV/bin:/usr/bin:/bin HOME=... LANG=C.UTF-8 TERM=dumb
  PYTHONPATH=SHIM NVML_SHIM_PIDS=... CMD"``, stdout and stderr to /dev/null, one
  unrecorded warm-up run, then the median of ``--runs``); nvitop from ``--nvitop-venv``,
  gpumon from this interpreter's venv.
- phases: the same command run through ``PHASES`` (this interpreter, the same
  environment): the real entry point (``gpumon.tui.cli:main``) with time stamps taken
  when a phase ends, relative to the moment the bench started the process: imports done
  (``command_line`` loaded), connect (``Transport.connect``: SSH handshake and auth),
  the Python probe, agent start (its exec, for ``local`` the early start, to its
  ``Hello``), first sample, end. Medians of ``--runs``.

Run: ``PYTHONPATH=tests/support .venv/bin/python bench/bench_oneshot.py [--runs 5]
[--baseline-venv ../main/.venv]`` (the baseline: another checkout's ``snapshot local``,
interleaved with the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sshd_server import SshServer

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "bench" / "nvml_shim"
VENV_BIN = Path(sys.executable).parent

# Runs ``gpumon ARGS`` as the ``gpumon`` script does, and prints one JSON object of time
# stamps (time.time()) on stderr's last line.
PHASES = r"""
import json, sys, time
marks = {}
def mark(name):
    marks.setdefault(name, time.time())

class Watch:  # marks the end of command_line's import (a meta-path finder that only wraps)
    def find_spec(self, name, path=None, target=None):
        if name != "gpumon.tui.cli.command_line":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            mark("imports done")
            patch()
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Watch())

def wrap(owner, attr, before=None, after=None):
    orig = getattr(owner, attr)
    if orig.__code__.co_flags & 0x80:  # CO_COROUTINE (no inspect import: it is slow)
        async def wrapped(*a, **k):
            if before: before(*a, **k)
            r = await orig(*a, **k)
            if after: after(*a, **k)
            return r
    else:
        def wrapped(*a, **k):
            if before: before(*a, **k)
            r = orig(*a, **k)
            if after: after(*a, **k)
            return r
    setattr(owner, attr, wrapped)

def patch():
    from gpumon.backends.monitor import state
    from gpumon.backends.model import ConnState
    wrap(state.HostMonitor, "ingest_sample", before=lambda *a, **k: mark("first sample"))
    wrap(state.HostMonitor, "_set_processes", before=lambda *a, **k: mark("processes"))
    def status(self, st, **k):
        if st == ConnState.CONNECTED:
            mark("hello")
    wrap(state.HostMonitor, "ingest_status", before=status)
    if "local" in sys.argv:  # its round runs in process: no transport, no asyncio to load
        return
    from gpumon.backends.monitor.sources.agent import AgentSource
    from gpumon.backends.transport import local, ssh
    wrap(ssh.SshTransport, "connect", before=lambda *a: mark("connect start"),
         after=lambda *a: mark("connected"))
    wrap(AgentSource, "_find_python", before=lambda *a: mark("probe start"),
         after=lambda *a: mark("probe done"))
    def agent_exec(self, argv):
        if "gpumon-agent" in argv:
            mark("agent exec")
    for cls in (local.LocalTransport, ssh.SshTransport):
        wrap(cls, "open_stream", before=agent_exec)

from gpumon.backends.transport import prestart
wrap(prestart, "start_agent", before=lambda: mark("early agent exec"))
from gpumon.tui.cli import main
try:
    code = main(sys.argv[1:])
finally:
    mark("end")
    print(json.dumps(marks), file=sys.stderr)
sys.exit(code)
"""


def tool_env(venv_bin: Path, pids: str, extra: dict[str, str]) -> str:
    """The side-by-side script's ``tool_env dumb``, plus ``extra`` (gpumon's config)."""
    words = [
        "env",
        "-i",
        f"PATH={venv_bin}:/usr/bin:/bin",
        f"HOME={os.environ.get('HOME', '/root')}",
        "LANG=C.UTF-8",
        "TERM=dumb",
        f"PYTHONPATH={SHIM}",
        f"NVML_SHIM_PIDS={pids}",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    return shlex.join(words)


def one_shots(commands: dict[str, tuple[str, str]], runs: int) -> dict[str, list[float]]:
    """Wall seconds of each ``(env, cmd)`` as the side-by-side runs measure their
    one-shots, the commands interleaved run by run (one unrecorded warm-up round)."""
    out: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs + 1):
        for name, (env, cmd) in commands.items():
            start = time.time()
            subprocess.run(
                ["bash", "-c", f"{env} {cmd}"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            if i:
                out[name].append(time.time() - start)
    return out


def phases(env: str, args: list[str], runs: int) -> dict[str, list[float]]:
    """Per phase, seconds from the process start to the phase's end, one list per run."""
    got: dict[str, list[float]] = {}
    cmd = shlex.join([sys.executable, "-c", PHASES, *args])
    for i in range(runs + 1):
        start = time.time()
        res = subprocess.run(
            ["bash", "-c", f"{env} {cmd}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        marks = json.loads(res.stderr.strip().splitlines()[-1])
        if i:
            for name, at in marks.items():
                got.setdefault(name, []).append(at - start)
    return got


def show_phases(title: str, got: dict[str, list[float]]) -> None:
    med = {name: statistics.median(v) for name, v in got.items()}
    print(f"  {title}: phases (median s from process start; + = since the phase before)")
    last = 0.0
    for name, at in sorted(med.items(), key=lambda kv: kv[1]):
        print(f"    {name:<18} {at:6.3f}   +{(at - last) * 1000:5.0f} ms")
        last = at
    pairs = (
        ("connect", "connect start", "connected"),
        ("python probe", "probe start", "probe done"),
        ("agent exec -> Hello", "agent exec", "hello"),
        ("early exec -> Hello", "early agent exec", "hello"),
        ("Hello -> 1st sample", "hello", "first sample"),
    )
    spans = [
        f"{label} {(med[b] - med[a]) * 1000:.0f} ms"
        for label, a, b in pairs
        if a in med and b in med
    ]
    print("    spans: " + "; ".join(spans))


def summary(name: str, times: list[float]) -> float:
    med = statistics.median(times)
    print(f"  {name:<32} median {med:.3f} s  ({' '.join(f'{t:.3f}' for t in sorted(times))})")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nvitop-venv", default="/tmp/anchors-venv", help="a venv with nvitop")
    ap.add_argument("--baseline-venv", help="another checkout's venv: its snapshot local too")
    args = ap.parse_args()
    sleepers = [subprocess.Popen(["sleep", "10000"]) for _ in range(8)]
    pids = ",".join(str(p.pid) for p in sleepers)
    with tempfile.TemporaryDirectory() as tmp:
        server = SshServer(Path(tmp) / "sshd")
        server.setup()
        conf = server.root / "sshd_config"
        conf.write_text(
            conf.read_text().replace(
                "SetEnv PATH=", f"SetEnv PYTHONPATH={SHIM} NVML_SHIM_PIDS={pids} PATH="
            )
        )
        config = Path(tmp) / "gpumon.toml"
        # The target's venv named, as a real config names CT200's /root/venv (this machine's
        # login shell puts pyenv's shims first on PATH: a slow ``python3``).
        config.write_text(server.config_toml("box", python=str(VENV_BIN / "python")))
        server.start()
        extra = {"GPUMON_CONFIG": str(config), "GPUMON_SSH_CONFIG": ""}
        ours = tool_env(VENV_BIN, pids, extra)
        nvitop_env = tool_env(Path(args.nvitop_venv) / "bin", pids, {})
        try:
            print(
                f"one-shots (side-by-side.sh's method, median of {args.runs}, interleaved; "
                f"load average {os.getloadavg()[0]:.2f} at the start):"
            )
            commands = {
                "nvitop -1": (nvitop_env, "nvitop -1"),
                "gpumon snapshot local": (ours, "gpumon snapshot local"),
                "gpumon snapshot box (ssh)": (ours, "gpumon snapshot box"),
            }
            if args.baseline_venv:
                base = tool_env(Path(args.baseline_venv) / "bin", pids, extra)
                commands["BASELINE snapshot local"] = (base, "gpumon snapshot local")
            got = one_shots(commands, args.runs)
            med = {name: summary(name, times) for name, times in got.items()}
            nvitop = med["nvitop -1"]
            local, remote = med["gpumon snapshot local"], med["gpumon snapshot box (ssh)"]
            print(
                f"  ratio to nvitop -1: local {local / nvitop:.2f}x, "
                f"ssh {remote / nvitop:.2f}x (target for local: <= 1x)"
            )
            if "BASELINE snapshot local" in med:
                print(f"  baseline local {med['BASELINE snapshot local'] / nvitop:.2f}x")
            print(f"  load average {os.getloadavg()[0]:.2f} at the end")
            show_phases("snapshot local", phases(ours, ["snapshot", "local"], args.runs))
            show_phases("snapshot box (ssh)", phases(ours, ["snapshot", "box"], args.runs))
        finally:
            server.kill()
            for p in sleepers:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
