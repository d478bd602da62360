"""The detail view's process table (issue 39 point 1): SM and memory-bandwidth % (n/a
where not reported, sorted after every number), sorted by any column, and as a tree of
launchers and their workers."""

from __future__ import annotations

from gpumon.backends.model import GpuProcess, GpuSample, HostSample
from gpumon.tui.views.layout import HostNeeds, plan_layout
from gpumon.tui.views.process_table import (
    SORTS,
    display_order,
    host_table_lines,
    next_sort,
    process_tree,
    table_lines,
)

LAUNCHER = "torchrun --nproc-per-node 2 train.py"


def _worker(pid: int, sm: int | None, mem: int, cpu: float, rank: int) -> GpuProcess:
    return GpuProcess(
        pid, "python3", mem, "GPU-0", user="alice", command=f"python3 train.py --rank {rank}",
        cpu_pct=cpu, rss_mib=2048.0 + rank, sm_pct=sm, mem_bw_pct=None if sm is None else sm // 2,
        ppid=100, parent=LAUNCHER,
    )  # fmt: skip


RANK0 = _worker(101, 12, 30000, 99.0, 0)
RANK1 = _worker(102, 87, 20000, 45.0, 1)
JUPYTER = GpuProcess(
    200, "jupyter", 6144, "GPU-0", user="bob", command="/usr/bin/python3 jupyter-lab", ppid=1
)  # SM n/a: a process the driver's samples did not name


def _texts(procs: list[GpuProcess], **kw: object) -> list[str]:
    return [line.text for line in table_lines(procs, None, width=140, wide=True, **kw)]  # type: ignore[arg-type]


def test_the_table_says_sm_and_bandwidth_and_n_a_where_not_reported() -> None:
    lines = _texts([RANK0, RANK1, JUPYTER])
    assert lines[0].split()[:3] == ["WHERE", "PID", "HOST"] and "SM~▼" in lines[0]
    assert "BW~" in lines[0] and "CPU" in lines[0] and "RSS" in lines[0]
    first = lines[1].split()
    assert first[:8] == ["102", "-", "alice", "45%", "2.0G", "19.5G", "87%", "43%"]
    assert lines[1].endswith("python3 train.py --rank 1")
    assert lines[3].split()[3:8] == ["-", "-", "6.0G", "n/a", "n/a"]  # jupyter: never 0 %


def test_sorted_by_each_column_the_unreported_last() -> None:
    procs = [JUPYTER, RANK0, RANK1]
    pids = {name: [p.pid for p in display_order(procs, name, False)] for name in SORTS}
    assert pids["sm"] == [102, 101, 200] and pids["bw"] == [102, 101, 200]
    assert pids["memory"] == [101, 102, 200]
    assert pids["cpu"] == [101, 102, 200]  # jupyter's CPU not known: last
    assert pids["rss"] == [102, 101, 200]
    assert pids["pid"] == [101, 102, 200]
    assert pids["user"] == [101, 102, 200]
    assert pids["command"] == [200, 101, 102]  # "/usr/..." < "python3 ..."
    assert next_sort("sm") == "bw" and next_sort("command") == "sm"
    header = _texts(procs, sort="cpu")[0]
    assert "CPU▼" in header and "SM~▼" not in header


def test_workers_under_their_launcher() -> None:
    tree = process_tree([RANK1, JUPYTER, RANK0])
    assert [(r.depth, r.process and r.process.pid, r.ppid) for r in tree] == [
        (0, None, 100), (1, 102, None), (1, 101, None), (0, 200, None),
    ]  # fmt: skip
    lines = _texts([RANK1, JUPYTER, RANK0], tree=True)
    assert lines[1].split()[:2] == ["parent", "100"] and lines[1].endswith(LAUNCHER)
    assert lines[1].index(LAUNCHER) == lines[0].index("COMMAND")
    assert lines[2].endswith("    python3 train.py --rank 1")  # indented under it
    assert display_order([RANK1, JUPYTER, RANK0], "sm", True) == [RANK1, RANK0, JUPYTER]


def test_a_worker_whose_parent_holds_a_gpu_is_under_it() -> None:
    parent = GpuProcess(100, "python3", 1000, "GPU-0", command=LAUNCHER, sm_pct=1)
    tree = process_tree([parent, RANK0])
    assert [(r.depth, r.process) for r in tree] == [(0, parent), (1, RANK0)]


def test_a_lone_process_with_a_parent_is_no_tree() -> None:
    assert [(r.depth, r.process) for r in process_tree([JUPYTER])] == [(0, JUPYTER)]


def test_a_narrow_table_keeps_the_shares_and_cuts_the_command() -> None:
    lines = [line.text for line in table_lines([RANK1], None, width=60, wide=False)]
    assert "CPU" not in lines[0] and "SM~▼" in lines[0]
    assert len(lines[1]) == 60 and lines[1].endswith("…")
    assert lines[1].split()[:5] == ["102", "alice", "19.5G", "87%", "43%"]


def test_the_main_screen_table_only_where_there_is_room() -> None:
    """From 40 lines, before taller GPU rows; 80x24 keeps its rows; up to 12 lines."""
    assert plan_layout(24, [HostNeeds(8, jobs=1, processes=9)]).max_processes == (0,)
    tall = plan_layout(40, [HostNeeds(8, jobs=1, processes=9)], strip=True)
    assert tall.max_processes == (9,) and tall.host_line
    many = plan_layout(60, [HostNeeds(8, processes=40)])
    assert many.max_processes == (12,) and many.row_height == 3
    assert plan_layout(60, [HostNeeds(8)]).max_processes == (0,)
    crowded = plan_layout(40, [HostNeeds(8, servers=8, processes=9)] * 2)
    assert crowded.max_processes == (0, 0)  # the servers' lines come first


def test_the_hosts_busiest_processes_with_their_gpu() -> None:
    gpu0, gpu1 = GpuSample(0, uuid="GPU-0"), GpuSample(1, uuid="GPU-1")
    other = GpuProcess(300, "python3", 1000, "GPU-1", command="python3 eval.py", sm_pct=50)
    sample = HostSample("box", 0.0, None, (gpu0, gpu1), processes=(RANK0, JUPYTER, RANK1, other))
    lines = [x.text for x in host_table_lines(sample, None, width=120, count=3)]
    assert lines[0] == "processes  4 on 2 GPUs, the 3 busiest shown (Enter: a GPU's in full)"
    assert lines[1].split()[:3] == ["GPU", "WHERE", "PID"]
    assert [line.split()[:2] for line in lines[2:]] == [["0", "102"], ["1", "300"], ["0", "101"]]
