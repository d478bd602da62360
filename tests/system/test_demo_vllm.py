"""``--scenario vllm`` as a user runs it (issue 38 point 7): two simulated vLLM 0.34.0
servers on GPUs 6 and 7 beside six SGLang servers; the one on GPU 6 wedges at 90 s of
scenario time behind a ``/health`` that answers 200. ``check`` says it by 150 s and not at
30 s. The servers' ports are this run's (free ports, not vLLM's 8000), read from their
processes' commands in ``snapshot --json`` (``--port N``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.system


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args], capture_output=True, text=True, timeout=90
    )


def _port_on(data: dict[str, Any], gpu: int) -> int:
    [proc] = data["gpus"][gpu]["processes"]
    assert proc["command"].startswith("VLLM::EngineCore (vllm serve "), proc
    found = re.search(r"--port (\d+)", proc["command"])
    assert found, proc
    return int(found[1])


def test_check_says_the_vllm_server_wedged_by_150_s() -> None:
    out = gpumon("check", "demo", "--scenario", "vllm", "--demo-time", "150")
    assert out.returncode == 2, out.stdout + out.stderr
    wedged = re.match(
        r"CRITICAL demo: vllm :(\d+) wedged: 41 running, (\d+) waiting, no token for (\d+) s; "
        r"/health answered 200; last stats line \d+ s ago: .*Avg generation throughput: 0\.0 "
        r"tokens/s.*; GPU 6 at 100 % utilisation",
        out.stdout,
    )
    assert wedged, out.stdout
    assert int(wedged[2]) > 2 and int(wedged[3]) >= 60, out.stdout  # the queue grew
    assert re.findall(r":(\d+) wedged", out.stdout) == [wedged[1]], out.stdout

    snap = gpumon("snapshot", "demo", "--scenario", "vllm", "--demo-time", "150", "--json")
    data = json.loads(snap.stdout)
    alerts = [a for a in data["alerts"] if a["kind"] == "vllm_wedged"]
    port = _port_on(data, 6)
    # its fix: the engine core's stacks, by the PID the GPU's process list gives it
    [engine_core] = data["gpus"][6]["processes"]
    stacks = f"its stacks: py-spy dump --native --pid {engine_core['pid']}"
    assert f" — fix: {stacks} (8 GPUs" in out.stdout, out.stdout
    [incident] = [i for i in data["incidents"] if i["kind"] == "vllm_wedged"]
    assert incident["fix"] == stacks, incident
    # then its restart: K on its API server, the parent of its engine core that the
    # agent's discovery found in CT 200's /proc (sim.host_proc.write_ct_proc_tree), and
    # its start again by its command line; before, discovery was off and the PID unknown
    api = alerts[0]["facts"]["server_pid"]
    assert api is not None and api != engine_core["pid"], alerts[0]["facts"]
    assert [(f["key"], f["words"]) for f in incident["fixes"][1:]] == [
        ("K", f"stop its API server (PID {api})"),
        (
            None,
            "start it again: /root/venv/bin/python3 /root/venv/bin/vllm serve "
            f"meta-llama/Llama-3.1-8B-Instruct --port {port}",
        ),
    ], incident["fixes"]
    assert alerts[0]["facts"]["engine_pids"] == [engine_core["pid"]]
    assert [(a["severity"], a["gpu"]) for a in alerts] == [("critical", 6)], data["alerts"]
    assert alerts[0]["message"].startswith(f"vllm :{port} wedged: 41 running")
    servers = {s["port"]: s for s in data["vllm"]}
    assert set(servers) == {port, _port_on(data, 7)}
    assert servers[port]["gen_tokens_per_s"] == 0.0 and servers[port]["running"] == 41
    other = servers[_port_on(data, 7)]
    assert other["up"] and other["gen_tokens_per_s"] > 1000, other
    assert len(data["sglang"]) == 6


def test_before_the_wedge_it_is_ok() -> None:
    out = gpumon("check", "demo", "--scenario", "vllm", "--demo-time", "30")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK demo:"), out.stdout
