"""``gpumon fleet demo --json | --check``: the simulated fleet headless, with no config
file, no Prometheus and no network; a config gpumon refuses does not stop it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system


def gpumon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}
    env.pop("GPUMON_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_fleet_demo_json_and_check_with_no_config(tmp_path: Path) -> None:
    out = gpumon(tmp_path, "fleet", "demo", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["fleet"] == "demo" and doc["error"] is None and len(doc["nodes"]) == 50
    worst = {n["node"]: [p["rule"] for p in n["problems"]] for n in doc["nodes"][:4]}
    assert worst["gpu-node-17"] == ["xid"] and worst["gpu-node-08"] == ["idle-allocated"]
    assert {n["node"] for n in doc["nodes"] if n["severity"] == "ok"} == {
        n["node"] for n in doc["nodes"][4:]
    }
    check = gpumon(tmp_path, "fleet", "demo", "--check")
    assert check.returncode == 2, check.stderr
    assert check.stdout.startswith("FLEET demo CRITICAL - 2 critical, 2 warning of 50 nodes")
    assert "gpu-node-17: Xid 79" in check.stdout and check.stderr == ""


def test_a_refused_config_is_a_warning_for_the_demo_and_an_error_elsewhere(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config" / "gpumon" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[fleet.lab]\nprometheus = "http://127.0.0.1:9"\nrefresh = "soon"\n')
    check = gpumon(tmp_path, "fleet", "demo", "--check")
    assert check.returncode == 2 and check.stdout.startswith("FLEET demo CRITICAL")
    warning = f"gpumon: warning: {config}: fleet.lab.refresh: "
    assert check.stderr.startswith(warning), check.stderr
    assert "(line 3); not used: the demo needs no config" in check.stderr
    other = gpumon(tmp_path, "fleet", "lab", "--check")
    assert other.returncode == 3 and f"{config}: fleet.lab.refresh: " in other.stderr
    assert "(line 3)" in other.stderr
