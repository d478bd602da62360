"""The bundle's parts: the archive (mode 0600 from its creation, never over a file, the
per-file and total caps said in index.txt), the incident timeline and its choice, and the
simulated ``nvidia-smi -q -d`` in the layout of a real 590 capture."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest
from hostile import forbidden_in

from gpumon.backends.alerts.store import Alert
from gpumon.backends.bundle.archive import CUT_NOTE, BundleArchive
from gpumon.backends.bundle.collect import Budget, _within, alert_from_json, recorded_alerts
from gpumon.backends.bundle.scrub import Scrubber
from gpumon.backends.bundle.timeline import (
    NoIncident,
    audit_in_window,
    pick_incident,
    timeline_json,
    timeline_text,
)
from gpumon.backends.model import Health, iso_time
from gpumon.backends.recording import Recording
from gpumon.backends.sim import SimSettings, smi

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia" / "real-captures"
T0 = 1_800_000_000.0


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_file_is_0600_even_under_a_lax_umask_and_never_replaces_one(tmp_path: Path) -> None:
    archive = BundleArchive(Scrubber(), "title")
    archive.add("a.txt", "hello\n", "a file")
    old = os.umask(0)
    try:
        path = archive.write(tmp_path / "b.tar.gz", root="b")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert sorted(_members(path)) == ["b/a.txt", "b/index.txt"]
    with pytest.raises(FileExistsError):
        archive.write(path)
    assert _members(path)["b/a.txt"] == b"hello\n"  # untouched


def test_a_file_over_its_cap_keeps_its_tail_and_the_index_says_so(tmp_path: Path) -> None:
    archive = BundleArchive(Scrubber(), "title", file_cap=200)
    lines = "".join(f"line {i:04d}\n" for i in range(100))
    archive.add("logs/job.log", lines, "the job's log")
    files = _members(archive.write(tmp_path / "b.tar.gz"))
    kept = files["logs/job.log"].decode()
    assert len(kept.encode()) <= 200 and kept.startswith(CUT_NOTE)
    assert kept.endswith("line 0099\n") and "line 0000" not in kept
    assert re.search(
        r"logs/job\.log +the job's log \(cut to its last \d+ bytes", files["index.txt"].decode()
    )


def test_the_index_shows_the_targets_names_escaped_one_entry_a_line(tmp_path: Path) -> None:
    """A log named with an ESC, a bidi override and a newline (its reason quotes it too):
    the index shows each escaped, and every entry stays on its one line."""
    name = "/var/log/run\x1b[2J\u202egol\nnext.log"
    archive = BundleArchive(Scrubber(), "title")
    archive.add("logs/00-run.log", "a line\n", f"the last 2000 lines of {name}")
    archive.missing("logs/01-run.log", f"left out: {name}: unreadable: permission denied")
    index = _members(archive.write(tmp_path / "b.tar.gz"))["index.txt"].decode()
    assert forbidden_in(index.replace("\n", "")) == []
    shown = "/var/log/run\\x1b[2J\\u202egol\\x0anext.log"
    lines = index.splitlines()
    assert f"  logs/00-run.log  the last 2000 lines of {shown}" in lines
    assert f"  logs/01-run.log: left out: {shown}: unreadable: permission denied" in lines


def test_the_total_cap_leaves_files_out_and_lists_them(tmp_path: Path) -> None:
    archive = BundleArchive(Scrubber(), "title", total_cap=1000)
    assert archive.add("one.txt", "x" * 600, "first")
    assert not archive.add("two.txt", "y" * 600, "second")
    assert archive.add("three.txt", "z" * 300, "third")
    files = _members(archive.write(tmp_path / "b.tar.gz"))
    assert sorted(files) == ["index.txt", "one.txt", "three.txt"]
    index = files["index.txt"].decode()
    assert (
        "Not in this bundle:\n  two.txt: left out: 600 bytes would pass the bundle's cap of 1000"
        in index
    )
    assert archive.size == 900


def _alert(key: str, kind: str, at: float, **kw: object) -> Alert:
    base: dict[str, object] = dict(
        severity=Health.CRITICAL,
        host="ct200",
        gpu=6,
        job="drafter",
        message=f"{kind} now",
        last_seen=at + 5,
    )
    base.update(kw)
    return Alert(key=key, kind=kind, time=at, **base)  # type: ignore[arg-type]


def test_the_timeline_has_each_alerts_first_peak_last_and_the_actions() -> None:
    memory = _alert(
        "memory:6",
        "memory",
        T0,
        severity=Health.WARNING,
        message="GPU 6 memory 0.0% used",
        first_message="GPU 6 memory 95.2% used",
        peak_message="GPU 6 memory 99.0% used",
        peak_severity=Health.CRITICAL,
        active=False,
        acknowledged=True,
    )
    oom = _alert(
        "log:/root/drafter.log:12",
        "cuda_oom",
        T0 + 20,
        message="CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    other = _alert("memory:1", "memory", T0 - 7200, gpu=1, job=None)
    incident = pick_incident([memory, oom, other])
    assert incident.cause.key == oom.key and set(incident.keys) == {memory.key, oom.key}
    assert pick_incident([memory, oom, other], "memory:1").cause.key == "memory:1"
    with pytest.raises(NoIncident, match="no incident has the alert 'nope'"):
        pick_incident([memory], "nope")
    with pytest.raises(NoIncident):
        pick_incident([])
    audit = [
        {
            "time": iso_time(T0 + 60),
            "host": "ct200",
            "action": "restart",
            "job": "drafter",
            "user": "ana",
            "outcome": "ok",
        },
        {"time": iso_time(T0 + 60), "host": "other", "action": "restart", "outcome": "ok"},
        {"time": iso_time(T0 + 86400), "host": "ct200", "action": "kill", "outcome": "ok"},
    ]
    kept = audit_in_window(audit, incident)
    assert [e["action"] for e in kept] == ["restart"]
    data = timeline_json(incident, kept, acknowledged_by="ana")
    first = data["alerts"][0]
    assert first["first"]["message"] == "GPU 6 memory 95.2% used"
    assert (
        first["peak"]["message"] == "GPU 6 memory 99.0% used"
        and first["peak_severity"] == "critical"
    )
    assert first["last"]["message"] == "GPU 6 memory 0.0% used"
    assert first["acknowledged_by"] == "ana" and data["alerts"][1]["acknowledged_by"] is None
    text = timeline_text(data)
    assert "raised  warning memory GPU 6: GPU 6 memory 95.2% used" in text
    assert "peak (critical): GPU 6 memory 99.0% used" in text
    assert "last    memory (ended, acknowledged by ana): GPU 6 memory 0.0% used" in text
    assert "action  restart drafter by ana: ok" in text
    assert (
        text.index("raised  warning memory")
        < text.index("raised  critical cuda_oom")
        < text.index("action")
    )


def test_a_recordings_alert_lines_become_alerts_once_per_key() -> None:
    line = {
        "type": "alert",
        "key": "memory:6",
        "active": True,
        "acknowledged": False,
        "epoch": T0,
        "last_seen": T0 + 3,
        "severity": "warning",
        "kind": "memory",
        "host": "ct200",
        "gpu": 6,
        "job": None,
        "message": "95%",
        "peak_severity": "warning",
    }
    later = {
        **line,
        "epoch": T0 + 10,
        "severity": "critical",
        "message": "99%",
        "peak_severity": "critical",
    }
    recording = Recording({"type": "header"}, [], [line, later, {"type": "alert", "key": "x"}])
    alerts = recorded_alerts(recording)
    assert len(alerts) == 1 and alerts[0].time == T0 and alerts[0].severity is Health.CRITICAL
    assert alert_from_json({"key": "x"}) is None


async def test_a_step_after_the_budget_is_spent_is_listed_not_run() -> None:
    archive = BundleArchive(Scrubber(), "title")
    ran: list[str] = []

    async def step() -> str:
        ran.append("ran")
        return "x"

    assert await _within(archive, Budget(0.0), "nvidia-smi-q.txt", step()) is None
    assert ran == []

    async def fails() -> str:
        raise RuntimeError("`dmesg -T` exited 1: Operation not permitted")

    budget = Budget.of(60.0)
    assert await _within(archive, budget, "kernel.txt", fails()) is None
    assert archive.missing_files == [
        ("nvidia-smi-q.txt", "not collected: the bundle's time budget was spent"),
        ("kernel.txt", "failed: `dmesg -T` exited 1: Operation not permitted"),
    ]


def _q(*args: str) -> str:
    out = io.StringIO()
    settings = SimSettings(frozen_at=30.0)
    assert smi.run(smi.parse_args(list(args)), settings, out) == 0
    return out.getvalue()


def _real_q_keys() -> set[str]:
    """Each line of the real H200 capture's ``nvidia-smi -q`` up to its colon (the key,
    its indent and its padding): the layout the simulator must print."""
    text = (FIXTURES / "linux-x86_64__nvidia-h200__590.48.01.txt").read_text()
    start = text.index("# $ nvidia-smi -q\n")
    block = text[start : text.index("\n####", start + 20)]
    return {line.partition(": ")[0] if ": " in line else line for line in block.splitlines()}


def test_the_simulated_q_report_has_the_real_layout() -> None:
    report = _q("-q", "-d", "ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,CLOCK")
    real = _real_q_keys()
    lines = [line for line in report.splitlines() if line.strip()]
    assert lines[0] == "==============NVSMI LOG=============="
    assert sum(line.startswith("GPU 00000000:") for line in lines) == 8
    for line in lines:
        if line.startswith("GPU 0000"):
            continue
        key = line.partition(": ")[0] if ": " in line else line
        assert key in real, line
    for section in (
        "    ECC Errors",
        "    Remapped Rows",
        "    Retired Pages",
        "    Clocks Event Reasons",
        "    Max Clocks",
    ):
        assert section in lines
    only_ecc = _q("-q", "-d", "ECC", "-i", "6")
    assert (
        "    ECC Mode" in only_ecc
        and "    Clocks\n" not in only_ecc
        and only_ecc.count("GPU 0000") == 1
    )
    with pytest.raises(smi.UsageError):
        smi.parse_args(["-q", "-d", "NOPE"])
    with pytest.raises(smi.UsageError):
        smi.parse_args(["-d", "ECC", "--query-gpu=index", "--format=csv"])
