"""The headless composers, in process: the text snapshot in 80 columns with hostile text
escaped and wide characters counted as two columns; ``check``'s performance data in the
Monitoring Plugins syntax; the fits and cuts of ``textfit``; a restart offered only for
the causes a restart fixes; the snapshot JSON's incidents."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest

from gpumon.backends.alerts.incident import RESTART_FIXES, Fix, _fixes, command_fix, incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import (
    CheckCode,
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    ProcessSource,
    iso_time,
)
from gpumon.backends.monitor import (
    HostMonitor,
    check_verdict,
    snapshot_json,
    snapshot_table,
)
from gpumon.backends.monitor.perfdata import Perf, check_perfdata, perf_text
from gpumon.backends.monitor.report import gpu_models, incident_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.monitor.textfit import cells, cut, wrap, wrap_pairs
from gpumon.backends.parsers.processes import index_ranges, process_columns
from gpumon.backends.transport import LocalTransport

from waiting import FakeClock

T0 = 1_800_000_000.0
GIB = 1024
EVIL = "\x1b[2J\x1b]0;pwned\x07python3 \u202etrain.py --cfg " + "x" * 120
WIDE = "训练任务 " * 12  # CJK: two columns each


def gpu(index: int, used: int | None = 80 * GIB, temp: float | None = 60.0) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H200",
        memory_total_mib=141 * GIB,
        memory_used_mib=used,
        temperature_c=temp,
        utilization_pct=90.0,
        power_w=500.0,
        power_limit_w=700.0,
    )


def monitor_with(
    processes: tuple[GpuProcess, ...], gpus: tuple[GpuSample, ...], clock: FakeClock | None = None
) -> HostMonitor:
    host = HostConfig(
        name="box",
        kind="local",
        kernel_log=False,
        container=200,
        jobs=(JobConfig("drafter", (0,), start="run-it"),),
    )
    clock = clock or FakeClock(T0)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), clock=clock.time, record=False)
    monitor.ingest_sample(HostSample("box", T0, None, gpus, processes))
    return monitor


def test_hostile_and_wide_text_stays_escaped_and_in_80_columns() -> None:
    procs = (
        GpuProcess(
            pid=861,
            name="python3",
            command=EVIL,
            memory_mib=40 * GIB,
            gpu_uuid="GPU-0",
            user="root",
            source=ProcessSource.CONTAINER_NVML.value,
        ),
        GpuProcess(
            pid=862,
            name="python3",
            command=WIDE,
            memory_mib=40 * GIB,
            gpu_uuid="GPU-1",
            user="\x1b[31mroot",
            source=ProcessSource.CONTAINER_NVML.value,
        ),
    )
    monitor = monitor_with(procs, (gpu(0), gpu(1)))
    text = snapshot_table(monitor)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b[2J" in text  # the rest of the command is cut at 80 columns
    whole = snapshot_table(monitor, width=None)
    assert "\\u202e" in whole and "\u202e" not in whole and "\x1b" not in whole
    assert all(cells(row) <= 80 for row in text.splitlines()), text
    rows = [row for row in text.splitlines() if re.match(r"  [01]  CT200 ", row)]
    assert len(rows) == 2 and all(row.endswith("…") for row in rows)
    assert cells(rows[1]) in (79, 80)  # the CJK command cut by columns, not characters
    assert text.count("NVIDIA H200") == 1 and "2 x NVIDIA H200" in text
    full = dataclasses.replace(gpu(2), memory_total_mib=143771, memory_used_mib=143771)
    table = snapshot_table(monitor_with((), (gpu(0), full))).splitlines()
    at = table[2].index("HEALTH")  # an H200 full: 140.4/140.4 keeps the column
    assert table[3][at:] == "ok" and table[4][at:].startswith("critical (GPU 2 memory 100")
    assert "140.4/140.4" in table[4]
    wide = snapshot_table(monitor, width=None)
    assert "x" * 120 in wide and "\x1b" not in wide


def test_the_snapshot_and_the_dashboard_say_a_process_the_same() -> None:
    """One composer, ``process_columns``: a process listed inside the watched container
    is ``CT200 861``, whichever source listed it (the old snapshot said its source,
    ``contain``), another container's ``CT201 h2419000`` (host PID: no PID here)."""
    ours = GpuProcess(
        pid=861,
        host_pid=2418861,
        name="python3",
        command="python3 -m train",
        memory_mib=GIB,
        gpu_uuid="GPU-0",
        user="root",
        source=ProcessSource.CONTAINER_NVML.value,
    )
    theirs = GpuProcess(
        pid=None,
        host_pid=2419000,
        name="jupyter-lab",
        command="jupyter-lab",
        memory_mib=6 * GIB,
        gpu_uuid="GPU-0",
        user="alice",
        container="201",
        source=ProcessSource.HOST.value,
    )
    files = GpuProcess(
        pid=900,
        name="python3",
        command="python3 x.py",
        memory_mib=None,
        gpus=(0, 1, 2, 5),
        source=ProcessSource.DEVICE_FILES.value,
    )
    said, other = process_columns(ours, 200), process_columns(theirs, 200)
    assert (said.where, said.pid, said.user) == ("CT200", "861", "root")
    assert (other.where, other.pid, other.user) == ("CT201", "h2419000", "alice")
    assert process_columns(files, 200).command.endswith("(uses GPUs 0-2,5, device files)")
    assert process_columns(ours, None).where == ""
    text = snapshot_table(monitor_with((ours, theirs), (gpu(0),)))
    assert "\n  0  CT200    861      root        1.0  n/a  n/a  python3 -m train\n" in text
    assert "\n  0  CT201    h2419000 alice       6.0  n/a  n/a  jupyter-lab" in text
    assert "contain" not in text


def test_gpu_models_once_or_by_gpu() -> None:
    assert gpu_models((gpu(0), gpu(1))) == "2 x NVIDIA H200"
    mixed = (gpu(0), gpu(1), dataclasses.replace(gpu(2), name="NVIDIA A100"), gpu(3))
    assert gpu_models(mixed) == "GPU 0,1,3 NVIDIA H200, GPU 2 NVIDIA A100"
    assert gpu_models((dataclasses.replace(gpu(0), name=None),)) == "1 x n/a"
    assert index_ranges([5, 0, 1, 2]) == "0-2,5" and index_ranges([]) == ""


def test_cut_and_wrap_count_columns() -> None:
    assert cut("abcdef", 4) == "abc…" and cut("abc", 4) == "abc" and cut("abc", None) == "abc"
    assert cut("训练任务", 5) == "训练…" and cells(cut("训练任务", 5)) == 5
    lines = wrap("one two three four five six seven", 12, indent=2, lead=2)
    assert lines == ["  one two", "  three four", "  five six", "  seven"]
    assert wrap("one two three four five six", 12, max_lines=2) == ["one two", "three four …"]
    assert wrap("a b", None, lead=4) == ["    a b"]
    assert wrap_pairs(["name drafter", "state crashed", "gpus 5,6,7"], 30, 2, 4) == [
        "  name drafter  state crashed",
        "    gpus 5,6,7",
    ]
    assert wrap_pairs(["path /" + "d" * 60], 30, 2, 4) == ["  path /" + "d" * 21 + "…"]


def test_perf_text_follows_the_guidelines() -> None:
    assert (
        Perf("fullest_gpu_mem", 93.14, "%", "95", "98.5").text() == "fullest_gpu_mem=93.1%;95;98.5"
    )
    assert Perf("alerts_critical", 1).text() == "alerts_critical=1"  # trailing ';' dropped
    assert Perf("time_to_full", 29, "s", "60:", min=0).text() == "time_to_full=29s;60:;;0"
    assert Perf("a b", 1).text() == "'a b'=1" and Perf("it's", 2).text() == "'it''s'=2"
    assert Perf("x=y", 3.0).text() == "'x=y'=3"
    assert Perf("tiny", 1e-7).text() == "tiny=0.0"  # never an exponent


def test_a_value_not_reported_is_left_out_never_0() -> None:
    sample = HostSample("box", T0, None, (gpu(0, used=None, temp=None),), ())
    perf = check_perfdata(
        sample,
        [],
        memory_warning_pct=95,
        memory_critical_pct=98.5,
        time_to_full_s=None,
        ttf_horizon_s=60,
    )
    assert perf_text(perf) == "alerts_critical=0 alerts_warning=0"
    off = check_perfdata(
        HostSample("box", T0, None, (gpu(0),), ()),
        [],
        memory_warning_pct=95,
        memory_critical_pct=98.5,
        time_to_full_s=12.0,
        ttf_horizon_s=0,
    )
    assert [p.label for p in off] == [
        "fullest_gpu_mem",
        "hottest_gpu_c",
        "alerts_critical",
        "alerts_warning",
    ]


def test_check_line_ends_in_perfdata_and_without_a_sample_has_none() -> None:
    clock = FakeClock(T0)
    monitor = monitor_with((), (gpu(0, used=int(70.5 * GIB)), gpu(1, temp=71.0)), clock)
    _, line = check_verdict(monitor)
    assert line.endswith(
        "| fullest_gpu_mem=56.7%;95;98.5 hottest_gpu_c=71 alerts_critical=0 alerts_warning=0"
    ), line
    sick = dataclasses.replace(gpu(0), health=Health.WARNING, problems=("[bad | thing]",))
    code, line = check_verdict(monitor_with((), (sick,)))
    assert code is CheckCode.WARNING
    assert line.count("|") == 1 and "[bad \\x7c thing]" in line  # one pipe: the perfdata's
    host = HostConfig(name="nobody", kind="local", kernel_log=False)
    empty = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    _, line = check_verdict(empty)
    assert "|" not in line and line.startswith("UNKNOWN nobody:")
    clock.advance(3600)
    code, line = check_verdict(monitor)  # the same data an hour later: stale
    assert code is CheckCode.UNKNOWN and "|" not in line


def alert(kind: str, job: str | None = "drafter") -> Alert:
    return Alert(f"{kind}:x", Health.CRITICAL, kind, "box", 0, job, f"{kind} happened", T0, T0)


@pytest.mark.parametrize("kind", sorted(RESTART_FIXES))
def test_a_restart_is_offered_for_a_dead_or_hung_job(kind: str) -> None:
    (incident,) = incidents([alert(kind)])
    assert incident.fixes == (Fix("r", "restart drafter", "gpumon restart box drafter"),)
    assert command_fix(incident) == "fix: gpumon restart box drafter"


@pytest.mark.parametrize(
    "kind", ["memory", "time_to_full", "job_slow", "gpu_idle_held", "xid", "gpu_health"]
)
def test_no_restart_for_a_job_that_runs_or_a_gpu_fault(kind: str) -> None:
    """A memory ramp at 90 % is a job still working: watch it, do not restart it. A slow
    job is the doctor's to check, GPUs held idle are freed by stopping the job (issue 36
    point 2): neither is a restart."""
    others = {
        "job_slow": (Fix("d", "check torch and the GPUs", "gpumon doctor box"),),
        "gpu_idle_held": (Fix("s", "stop drafter (frees GPU 0)"),),
    }
    (incident,) = incidents([alert(kind)])
    assert incident.fixes == others.get(kind, ()) and incident.fix is None
    if kind not in others:
        assert command_fix(incident) is None
    assert _fixes(alert(kind), "drafter") == others.get(kind, ())


def test_the_snapshot_json_incident_has_its_headline_fix_and_evidence() -> None:
    crash = alert("job_crashed")
    drop = dataclasses.replace(alert("oom_death"), time=T0 - 1, message="GPU 0 memory fell")
    (incident,) = incidents([crash, drop], restartable={"drafter"})
    data = incident_json(incident)
    assert data["headline"] == incident.headline and data["kind"] == "job_crashed"
    assert (data["fix"], data["severity"], data["gpu"], data["job"]) == (
        "gpumon restart box drafter",
        "critical",
        0,
        "drafter",
    )
    assert data["fixes"] == [
        {"key": "r", "words": "restart drafter", "command": "gpumon restart box drafter"}
    ]
    assert data["evidence"] == [
        {
            "kind": "oom_death",
            "key": "oom_death:x",
            "severity": "critical",
            "gpu": 0,
            "active": True,
            "message": "GPU 0 memory fell",
        }
    ]
    advice = dataclasses.replace(incident, fixes=(Fix(None, "reboot the node"),))
    assert incident_json(advice)["fix"] == "reboot the node"  # advice only: its words
    assert snapshot_json(monitor_with((), (gpu(0),)), T0)["incidents"] == []


def test_the_agents_notes_are_in_the_snapshot_and_its_json() -> None:
    """The agent's notes ("kernel log not readable here": no Xid is seen from this
    container) were logged at info level and shown nowhere."""
    monitor = monitor_with((), (gpu(0),))
    assert "NOTES" not in snapshot_table(monitor) and snapshot_json(monitor, T0)["notes"] == []
    said = (
        "kernel log not readable here (Operation not permitted): Xid and host OOM-killer "
        "lines need gpumon on the Proxmox host itself"
    )
    monitor.ingest_note(said)
    monitor.ingest_note(said)  # said once
    monitor.ingest_note("nvidia-smi gives rounds faster than every 1 s: \x1b[2Jthe newest is sent")
    data = snapshot_json(monitor, T0)
    stamp = iso_time(T0)
    assert data["notes"] == [
        {"time": stamp, "text": said},
        {
            "time": stamp,
            "text": "nvidia-smi gives rounds faster than every 1 s: \x1b[2Jthe newest is sent",
        },
    ]
    text = snapshot_table(monitor)
    notes = text[text.index("\nNOTES\n") :].splitlines()
    assert notes[2].startswith(f"  {time.strftime('%H:%M:%S', time.localtime(T0))}  kernel log")
    assert all(len(line) <= 80 for line in notes)
    assert "\x1b" not in text and "\\x1b[2J" in text  # escaped, as every text from the target
