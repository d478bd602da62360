"""The agent's host line data (issue 11, point 11): /proc/stat, /proc/meminfo and
/proc/loadavg read into ``HostStats``, its wire form, and what the host line says."""

from __future__ import annotations

import json
from pathlib import Path

from gpumon.backends.model import HostLoad
from gpumon.backends.monitor.sources.agent import host_load
from gpumon.backends.remote import protocol
from gpumon.backends.remote.hoststats import HostStatsReader, cpu_times, loadavg, meminfo
from gpumon.tui.views import Role, host_load_parts

STAT = "cpu  {user} 0 {system} {idle} {iowait} 0 0 0 0 0\ncpu0 1 2 3 4 5 0 0 0 0 0\n"
MEMINFO = (
    "MemTotal:       1056000000 kB\nMemFree:          1000 kB\n"
    "MemAvailable:    528000000 kB\nSwapTotal:        8388608 kB\nSwapFree:  4194304 kB\n"
)


def fake_proc(root: Path, user: int, idle: int) -> None:
    (root / "stat").write_text(STAT.format(user=user, system=0, idle=idle, iowait=0))
    (root / "meminfo").write_text(MEMINFO)
    (root / "loadavg").write_text("12.34 10.10 9.80 3/2000 12345\n")


def test_the_reader_gives_cpu_busy_between_readings_and_memory_load_swap(tmp_path: Path) -> None:
    fake_proc(tmp_path, user=100, idle=900)
    reader = HostStatsReader(str(tmp_path))
    first = reader.read()
    assert first.cpu_pct is None  # one reading says nothing about busy time
    assert first.mem_total_kib == 1056000000 and first.mem_available_kib == 528000000
    assert (first.swap_total_kib, first.swap_free_kib) == (8388608, 4194304)
    assert first.load == [12.34, 10.1, 9.8]
    fake_proc(tmp_path, user=400, idle=1600)  # 300 busy of 1000 jiffies
    assert reader.read().cpu_pct == 30.0


def test_unreadable_proc_files_leave_values_none(tmp_path: Path) -> None:
    stats = HostStatsReader(str(tmp_path / "missing")).read()
    assert stats.cpu_pct is None and stats.mem_total_kib is None and stats.load is None
    assert cpu_times("intr 1 2 3\n") is None and cpu_times("cpu a b c d") is None
    assert meminfo("junk\nMemTotal: lots kB\n") == {}
    assert loadavg("") is None


def test_host_stats_cross_the_wire_and_junk_becomes_none(tmp_path: Path) -> None:
    fake_proc(tmp_path, user=1, idle=9)
    sent = HostStatsReader(str(tmp_path)).read()
    raw = json.loads(protocol.encode(sent))
    assert protocol.MESSAGES[raw["type"]].from_wire(raw) == sent
    junk = protocol.HostStats.from_wire(
        {"type": "host_stats", "t": 1.0, "cpu_pct": "lots", "load": [1, "x", 2], "cpus": True}
    )
    assert junk == protocol.HostStats(t=1.0)
    record = host_load(sent)
    assert isinstance(record, HostLoad) and record.load == (12.34, 10.1, 9.8)


def test_the_host_line_parts() -> None:
    load = HostLoad(
        time=0.0,
        cpu_pct=34.0,
        cpus=64,
        mem_total_kib=1056000000,
        mem_available_kib=52800000,
        swap_total_kib=0,
        swap_free_kib=0,
        load=(12.3, 10.1, 9.8),
    )
    parts = host_load_parts(load)
    assert [(label, value) for label, value, _ in parts] == [
        ("CPU", "34% of 64"),
        ("RAM", "956.7/1007.1 GiB"),
        ("load", "12.3 10.1 9.8"),
    ]  # no swap configured: no swap part
    assert parts[1][2] == Role.WARNING  # 95 % of the target's RAM used
    unknown = host_load_parts(HostLoad(time=0.0))
    assert [(label, value) for label, value, _ in unknown] == [
        ("CPU", "n/a"),
        ("RAM", "n/a"),
        ("load", "n/a"),
    ]
