"""``gpumon snapshot local`` runs the agent's round in gpumon's own process
(``monitor.oneshot``, issue 41): no agent process, no event loop, and what it prints is
what the agent's process path prints, line by line, on the same GPUs (the fake NVML of
tests/support/fake_nvml, or the stand-in nvidia-smi where there is no NVML). Run for
real: each path in a fresh interpreter, as the ``gpumon`` command runs, in a PID
namespace of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

SUPPORT = Path(__file__).parents[1] / "support"
FAKE_NVML = SUPPORT / "fake_nvml"
NO_NVML = SUPPORT / "no_nvml"
FAKE_SMI = SUPPORT / "fake_smi.py"

# Runs ``gpumon ARGS`` (argv[1:]) as the console script does; with ``process`` as argv[1]
# the in-process round is refused (``local_snapshot`` answers None), so the agent runs in
# its own process as before. Every child started is recorded, and the last line on
# stderr says them and whether asyncio was imported.
RUN = """
import json, subprocess, sys
started = []
class Spy(subprocess.Popen):
    def __init__(self, args, *rest, **kw):
        started.append([str(a) for a in args])
        super().__init__(args, *rest, **kw)
subprocess.Popen = Spy
args = sys.argv[1:]
if args[0] == "process":
    import gpumon.backends.monitor.oneshot as oneshot
    oneshot.local_snapshot = lambda host: None
    args = args[1:]
from gpumon.tui.cli import main
code = main(args)
sys.stdout.flush()
print(json.dumps({"started": started, "asyncio": "asyncio" in sys.modules}), file=sys.stderr)
sys.exit(code)
"""
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")
# Each run in a PID namespace of its own with its /proc (as the LXC stand-ins are made:
# tests/support/proxmox_host.py): the agent's discovery scans /proc for SGLang and vLLM
# servers, and another test's stand-in server on this machine must not be found. Inside,
# a ``sleep`` is the process the fake GPUs say holds their memory (its /proc is read as
# a real one's), and ``BESIDE`` (a command line; empty: none) runs beside it.
IN_NAMESPACE = (
    'sleep 600 & export FAKE_NVML_PROCESS_PID=$!; if [ -n "$BESIDE" ]; then $BESIDE & fi; "$@"'
)


def _namespaces() -> str | None:
    """Why a PID namespace cannot be made here, or None."""
    if shutil.which("unshare") is None:
        return "no unshare"
    if os.geteuid() != 0:
        return "not root: unshare --pid needs it"
    return None


def _run(
    env: dict[str, str], *args: str, process: bool = False, beside: str = ""
) -> tuple[int, str, dict[str, object]]:
    if (why := _namespaces()) is not None:
        pytest.skip(why)
    gpumon = [sys.executable, "-c", RUN, *(["process"] if process else []), *args]
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", IN_NAMESPACE, "sh"]
    res = subprocess.run(
        [*argv, *gpumon],
        env=env | {"BESIDE": beside},
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = json.loads(res.stderr.strip().splitlines()[-1])
    return res.returncode, res.stdout, said


def _agents(said: dict[str, object]) -> list[list[str]]:
    started = said["started"]
    assert isinstance(started, list)
    return [argv for argv in started if "gpumon-agent" in argv]


def _env(tmp_path: Path, kind: str) -> dict[str, str]:
    config = tmp_path / "gpumon.toml"
    config.write_text("")
    env = {**os.environ, "GPUMON_CONFIG": str(config)}
    if kind == "nvidia-smi":  # no NVML: the agent reads the stand-in nvidia-smi
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SMI}" "$@"\n')
        smi.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        env |= {"PYTHONPATH": str(NO_NVML), "FAKE_SMI_GPUS": "2"}
        return env
    env |= {"PYTHONPATH": str(FAKE_NVML), "FAKE_NVML_GPUS": "2"}
    if kind == "nvml-faults":  # alerts from the GPUs' health
        env["FAKE_NVML_HEALTH"] = "pcie_x4,hw_slowdown,ecc_uncorrected,row_pending"
    if kind == "mig":
        env["FAKE_NVML_MIG"] = "1"
    return env


def _unstamped(value: object) -> object:
    """``value`` (a snapshot's JSON) with the figures that differ run by run (the data's
    age, a process's RSS) replaced by their names, each checked to be a number."""
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, inner in value.items():
        if key in ("stale_s", "rss_mib") and inner is not None:
            assert isinstance(inner, float), (key, inner)
            inner = key
        out[key] = _unstamped(inner)
    return out


@pytest.mark.parametrize("kind", ["nvml", "nvml-faults", "mig", "nvidia-smi"])
@pytest.mark.parametrize("form", ["text", "json"])
def test_snapshot_local_in_process_prints_what_the_agent_process_prints(
    tmp_path: Path, kind: str, form: str
) -> None:
    env = _env(tmp_path, kind)
    args = ["snapshot", "local", *(["--json"] if form == "json" else [])]
    code, here, said = _run(env, *args)
    assert _agents(said) == [] and said["asyncio"] is False, said  # in process, no loop
    old_code, there, old_said = _run(env, *args, process=True)
    assert len(_agents(old_said)) == 1, old_said  # the agent's own process, as before
    assert (code, old_code) == (0, 0), here + there
    if form == "json":
        # the data's age differs by the runs' timing (both fresh), the holder's RSS by
        # its run (each namespace starts its own); everything read must not
        here = json.dumps(_unstamped(json.loads(here)), indent=1, sort_keys=True)
        there = json.dumps(_unstamped(json.loads(there)), indent=1, sort_keys=True)
    here, there = STAMP.sub("TIME", here), STAMP.sub("TIME", there)
    assert here.splitlines() == there.splitlines()
    assert "GPU" in here  # a sample was compared, not two empty answers


def test_a_part_of_the_round_that_raises_leaves_the_answer_to_the_agents_process(
    tmp_path: Path,
) -> None:
    """The process calls raise what nobody expected (``FAKE_NVML_PROC_FAULT``): in the
    round as in the agent's thread it is said as the thread's death (an ``agent_error``
    alert), never a traceback of gpumon's; the round is then not the answer, and the
    agent's own process (which retries the part) gives it."""
    env = _env(tmp_path, "nvml") | {"FAKE_NVML_PROC_FAULT": "1"}
    code, out, said = _run(env, "snapshot", "local", "--json")
    assert code == 0, out
    assert len(_agents(said)) == 1, said
    kinds = [alert["kind"] for alert in json.loads(out)["alerts"]]
    assert "agent_error" in kinds, out


def test_a_server_found_leaves_the_answer_to_the_agents_process(tmp_path: Path) -> None:
    """Discovery finds an SGLang server (a process with its command line; nothing listens
    on its port): its rate takes two scrapes, which one round cannot give, so the agent's
    own process answers, the server in it (down: its port refuses)."""
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    idle = tmp_path / "idle.py"
    idle.write_text("import time\ntime.sleep(600)\n")
    server = f"{sys.executable} {idle} sglang.launch_server --port {port}"
    code, out, said = _run(_env(tmp_path, "nvml"), "snapshot", "local", "--json", beside=server)
    assert code == 0, out
    assert len(_agents(said)) == 1, said
    assert [s["port"] for s in json.loads(out)["sglang"]] == [port], out
