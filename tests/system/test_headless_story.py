"""The headless commands tell the dashboard's story, as a user runs them on the demo
(issue 26.4, 26.9): the text snapshot fits 80 columns and says who runs where as the
dashboard does; its JSON carries each incident's headline, fix and evidence; ``check``
ends in Nagios performance data, offers a restart only where a restart fixes the cause,
and says a config error as UNKNOWN on stdout; a reader that closes the pipe early ends
every command quietly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

# CT 201's jupyter-lab holds 6 GiB of GPU 6 from 32 s and outlives the drafter: the cause
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)
# Stopping the holder is the dashboard's K; then the restart, the headless command.
FIX = "fix: stop jupyter-lab (the dashboard's K), then gpumon restart demo drafter"
MODEL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
# One value of the performance data, as the Monitoring Plugins guidelines write it:
# 'label'=value[UOM];[warn];[crit];[min];[max], trailing empty fields dropped.
PERF = re.compile(
    r"(?P<label>'(?:[^']|'')+'|[^\s'=]+)=(?P<value>-?[0-9.]+)(?P<uom>s|ms|us|%|B|KB|MB|TB|c)?"
    r"(?:;(?P<warn>[^;\s]*)(?:;(?P<crit>[^;\s]*)(?:;(?P<min>-?[0-9.]*)(?:;(?P<max>-?[0-9.]*))?)?)?)?"
)


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUMON, *args], capture_output=True, text=True, timeout=60)


def perfdata(line: str) -> dict[str, re.Match[str]]:
    """The values after ``|``, by label; every pair must match the guidelines' syntax."""
    assert line.count("|") == 1, line
    pairs = line.split("|", 1)[1].split()
    out = {}
    for pair in pairs:
        m = PERF.fullmatch(pair)
        assert m is not None, f"not performance data: {pair!r}"
        out[m["label"]] = m
    return out


def test_the_text_snapshot_fits_80_columns_and_wide_keeps_whole_lines() -> None:
    for args in (("--demo-time", "90"), ("--scenario", "hang", "--demo-time", "150")):
        out = gpumon("snapshot", "demo", *args)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert max(len(row) for row in lines) <= 80, [r for r in lines if len(r) > 80]
        assert out.stdout.count(MODEL) == 1, out.stdout  # the model once, in the header
        assert lines[1].startswith("source agent/nvidia-smi  8 x " + MODEL)
    commands = [row for row in lines if re.match(r"  0  CT200 +\d+ +root ", row)]
    assert commands and commands[0].endswith("…"), commands  # the sglang command, cut
    wide = gpumon("snapshot", "demo", "--demo-time", "90", "--wide")
    assert "/root/venv/bin/python3 -m train.target --rank 0" in wide.stdout
    assert f"  CRITICAL  {HEADLINE} — {FIX}\n" in wide.stdout
    assert max(len(row) for row in wide.stdout.splitlines()) > 80
    assert "--wide" in gpumon("snapshot", "--help").stdout


def test_the_snapshot_says_the_container_as_the_dashboard_does() -> None:
    """``CT200 861 root …``, the dashboard's words (``process_columns``), not the source
    name ``contain`` beside the host PID."""
    out = gpumon("snapshot", "demo")
    rows = [row for row in out.stdout.splitlines() if re.match(r"  \d  \S", row)]
    procs = [row for row in rows if "python3" in row]
    assert len(procs) == 8, out.stdout
    # its SM and bandwidth shares (`SM~`, `BW~`: the demo's pmon) sit before the command
    assert re.match(
        r"  0  CT200    861      root       82\.5 +(\d+%|n/a) +(\d+%|n/a)"
        r"  /root/venv/bin/python3 -m",
        procs[0],
    ), procs[0]
    assert "contain" not in out.stdout


def test_the_snapshot_json_has_each_incident_with_its_headline_fix_and_evidence() -> None:
    out = gpumon("snapshot", "demo", "--demo-time", "90", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["alerts"] and data["gpus"]  # the keys that were there stay
    # the OOM came in the log's backlog: the incident is the drafter still down since
    (oom,) = [i for i in data["incidents"] if i["kind"] == "job_crashed"]
    assert oom["headline"] == HEADLINE
    # The best fix is advice only (K, no command): its words; the restart comes second.
    assert oom["fix"] == "stop jupyter-lab (the dashboard's K), then gpumon restart demo drafter"
    assert oom["fixes"] == [
        {"key": "K", "words": "stop jupyter-lab", "command": None},
        {"key": "r", "words": "restart drafter", "command": "gpumon restart demo drafter"},
    ]
    assert (oom["severity"], oom["gpu"], oom["job"]) == ("critical", 6, "drafter")
    assert "Tried to allocate 2.00 GiB" in oom["message"]
    assert all({"kind", "key", "message"} <= set(e) for e in oom["evidence"])
    # Before the OOM the memory fills: an incident, and no restart offered for it; the
    # holder already on the GPU is the only fix.
    near = json.loads(gpumon("snapshot", "demo", "--demo-time", "50", "--json").stdout)
    (ramp,) = near["incidents"]
    assert ramp["kind"] in ("memory", "time_to_full") and ramp["job"] == "drafter"
    assert ramp["fix"] == "stop jupyter-lab (the dashboard's K)"
    assert ramp["fixes"] == [{"key": "K", "words": "stop jupyter-lab", "command": None}]


def test_check_ends_in_performance_data_and_a_ramp_is_no_restart() -> None:
    ramp = gpumon("check", "demo", "--demo-time", "25")
    assert ramp.returncode == 1, ramp.stdout + ramp.stderr
    assert len(ramp.stdout.splitlines()) == 1 and "restart" not in ramp.stdout
    perf = perfdata(ramp.stdout)
    assert list(perf) == [
        "fullest_gpu_mem",
        "hottest_gpu_c",
        "alerts_critical",
        "alerts_warning",
        "time_to_full",
    ]
    mem = perf["fullest_gpu_mem"]
    fullest = re.search(r"fullest GPU \d at ([\d.]+)% memory", ramp.stdout)
    # the same number ("93" in the data where the line says "93.0%": one decimal at most)
    assert fullest and float(mem["value"]) == float(fullest[1]) and mem["uom"] == "%"
    assert (mem["warn"], mem["crit"]) == ("95", "98.5")  # the memory rules' thresholds
    hottest = re.search(r"hottest (\d+) C", ramp.stdout)
    assert hottest and perf["hottest_gpu_c"]["value"] == hottest[1]
    assert perf["hottest_gpu_c"]["uom"] is None  # no unit for degrees in the guidelines
    # The warnings: the ramp's, and CT 201's jupyter on GPU 6 where the one-shot saw it (it
    # comes at demo time 32 s and the demo's clock runs from the one-shot's start: on a
    # loaded machine the start-up and the 5 s window pass 32 s). The line names it then.
    jupyter = "held by CT 201 jupyter-lab" in ramp.stdout
    warnings = str(1 + jupyter)
    assert (perf["alerts_critical"]["value"], perf["alerts_warning"]["value"]) == ("0", warnings)
    ttf = perf["time_to_full"]
    said = re.search(r"memory full in ~(\d+) s", ramp.stdout)
    assert said and ttf["value"] == said[1] and ttf["uom"] == "s" and ttf["warn"] == "60:"
    # After the OOM the GPU is empty: no time to full, left out (never 0).
    after = gpumon("check", "demo", "--demo-time", "70", "--window", "1")
    assert after.returncode == 2
    assert after.stdout.startswith(f"CRITICAL demo: {HEADLINE} — {FIX}")
    perf = perfdata(after.stdout)
    assert "time_to_full" not in perf and perf["alerts_critical"]["value"] == "1"


def test_a_config_error_is_unknown_on_stdout(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[hosts.box]\nbogus = 1\n")
    out = gpumon("check", "box", "--config", str(config))
    assert out.returncode == 3
    assert out.stdout.startswith(f"UNKNOWN: {config}: hosts.box.bogus: unknown key")
    assert len(out.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ("snapshot", "demo", "--json"),
        ("snapshot", "demo"),
        ("check", "demo", "--window", "0"),
        ("doctor", "demo", "--json"),
    ],
    ids=["snapshot-json", "snapshot-text", "check", "doctor"],
)
def test_a_reader_that_closes_the_pipe_early_ends_it_quietly(args: tuple[str, ...]) -> None:
    """``gpumon snapshot demo --json | head``: no BrokenPipeError traceback, the exit
    status a shell reports for ``git log | head``'s git (141: SIGPIPE)."""
    proc = subprocess.Popen(
        [*GPUMON, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte is written
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""
