"""A MIG-sliced GPU over the real sshd, the agent and the simulator's nvidia-smi (issue 39
point 3): ``snapshot`` shows GPU 7 of the ``mig`` scenario as its three GPU instances,
each with its own memory and processes (the agent reads ``nvidia-smi -L`` and ``-q -i``
because the GPU's row says ``mig.mode.current`` Enabled), never the whole GPU's memory
as one."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from own_servers import own_incomplete

from gpumon.backends.monitor import demo_settings
from gpumon.backends.sim import write_wrapper
from gpumon.backends.sim.scenario import MIG_GPU, MIG_INSTANCES, UUIDS, mig_used_mib

from sshd_server import SshServer

pytestmark = pytest.mark.integration

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
AT = 40.0  # scenario seconds, frozen: the 1g.24gb's job is filling it


def snapshot(sshd: SshServer, tmp_path: Path, env: dict[str, str], *args: str) -> str:
    smi_dir = sshd.root / "smi"
    settings = replace(demo_settings(demo_time=AT), scenario="mig", frozen_at=AT)
    write_wrapper(smi_dir, settings)
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml(nvidia_smi=str(smi_dir / "nvidia-smi")))
    res = subprocess.run(
        [*GPUMON, "--config", str(cfg), "snapshot", "ct200", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_mig_gpu_is_its_instances_in_the_snapshot(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    snap = json.loads(snapshot(sshd, tmp_path, client_env, "--json"))
    assert own_incomplete(snap["incomplete"], []) == [], snap["incomplete"]
    gpu = snap["gpus"][MIG_GPU]
    assert gpu["uuid"] == UUIDS[MIG_GPU] and gpu["utilization_pct"] is None
    settings = replace(demo_settings(demo_time=AT), scenario="mig", frozen_at=AT)
    want = [(m.gi, m.profile, mig_used_mib(settings, AT, m), m.total_mib) for m in MIG_INSTANCES]
    got = [
        (i["gpu_instance_id"], i["profile"], i["memory_used_mib"], i["memory_total_mib"])
        for i in gpu["mig"]["instances"]
    ]
    assert got == want
    pids = [[p["host_pid"] or p["pid"] for p in i["processes"]] for i in gpu["mig"]["instances"]]
    assert pids == [[m.pid] if m.pid else [] for m in MIG_INSTANCES]
    assert gpu["mig"]["error"] is None
    assert all(g["mig"] is None for g in snap["gpus"] if g["index"] != MIG_GPU)
    text = snapshot(sshd, tmp_path, client_env)
    row = next(ln for ln in text.splitlines() if ln.startswith(f"  {MIG_GPU} "))
    assert " MIG " in row and "/95.6" not in row, text
    assert "GI 5 1g.24gb" in text and "[GI 1 2g.48gb]" in text, text
