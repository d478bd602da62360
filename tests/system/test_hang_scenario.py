"""``--scenario hang`` (issue 25.1, 25.6): the simulated server on port 30000 hangs at
60 s of scenario time and ``gpumon check`` names it by 150 s, in the incident's words,
with the evidence its log gives; the server in a long prefill beside it is not hung, and
``snapshot --json`` lists the alert's kind."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args], capture_output=True, text=True, timeout=90
    )


def test_check_says_the_server_hung_by_150_s() -> None:
    out = gpumon("check", "demo", "--scenario", "hang", "--demo-time", "150")
    assert out.returncode == 2, out.stdout + out.stderr
    assert re.match(
        r"CRITICAL demo: sglang :30000 hung: 37 running, \d+ queued, no token for (8\d|9\d) s; "
        r"/health_generate timed out \(its log\); last decode line at \d\d:\d\d:\d\d \(\d+ s ago\)",
        out.stdout,
    ), out.stdout
    assert ":30001" not in out.stdout  # the long prefill is not hung


def test_before_the_threshold_it_is_not_hung_and_snapshot_lists_the_kind() -> None:
    early = gpumon("check", "demo", "--scenario", "hang", "--demo-time", "90")
    assert "hung" not in early.stdout, early.stdout
    snap = gpumon("snapshot", "demo", "--scenario", "hang", "--demo-time", "150", "--json")
    data = json.loads(snap.stdout)
    hung = [a for a in data["alerts"] if a["kind"] == "sglang_hung"]
    assert [a["severity"] for a in hung] == ["critical"], data["alerts"]
    assert hung[0]["message"].startswith("sglang :30000 hung: 37 running")
    servers = {s["port"]: s for s in data["sglang"]}
    assert servers[30000]["running"] == 37 and servers[30001]["running"] == 12
