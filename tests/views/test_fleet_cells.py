"""Fleet rows as cells: what each column says, not-reported as n/a, and what fits."""

from __future__ import annotations

from dataclasses import replace

from gpumon.backends.fleet import NodeRow, judge
from gpumon.tui.fleet.cells import (
    COLUMNS,
    PROBLEM_MIN,
    columns_for,
    fit,
    memory_role,
    row_cells,
)
from gpumon.tui.fleet.table import header_text
from gpumon.tui.views.gpu_cells import Role

NOW = 1_800_000_000.0


def test_a_full_row() -> None:
    row = NodeRow(
        "gpu-01",
        gpus=8,
        mem_used_mib=400 * 1024,
        mem_total_mib=765 * 1024,
        mem_fullest=0.991,
        util_mean=45.4,
        util_max=97,
        temp_max=91,
        power_w=3235.2,
        xid_gpus=1,
        xid_last=79,
        remap_failures=0,
        alerts_warning=2,
        idle_held_gpu_hours=2.46,
        last_seen=NOW - 75,
    )
    row = replace(row, problems=judge(row, NOW))
    cells = row_cells(row, NOW)
    text = {k: c.text for k, c in cells.items()}
    assert text == {
        "state": "!",
        "node": "gpu-01",
        "gpus": "8",
        "memory": "400/765",
        "fullest": "99",
        "util": "45/97",
        "temp": "91",
        "power": "3235",
        "xid": "79",
        "remap": "-",
        "alerts": "2",
        "idle": "2.5",  # GPU-hours held idle in the last day (gpumon watch's accounting)
        "age": "1m15s",
        "problem": "Xid 79 on 1 GPU in the last 15 min: fallen off the bus — reboot the node (+1)",
    }
    assert cells["fullest"].role == Role.CRITICAL and cells["temp"].role == Role.CRITICAL
    assert cells["xid"].role == Role.CRITICAL and cells["alerts"].role == Role.WARNING


def test_the_xid_cell_is_coloured_by_the_xid_table_not_by_the_row() -> None:
    def xid_cell(code: int) -> tuple[str, Role]:
        row = NodeRow("n", last_seen=NOW, xid_gpus=1, xid_last=code, remap_failures=1)
        cell = row_cells(replace(row, problems=judge(row, NOW)), NOW)["xid"]
        return cell.text, cell.role

    assert xid_cell(13) == ("13", Role.WARNING)  # the row is critical (remap), the Xid not
    assert xid_cell(79) == ("79", Role.CRITICAL)
    assert xid_cell(43) == ("43", Role.MUTED)  # informational
    assert xid_cell(45) == ("45", Role.WARNING)  # the only Xid: the solo 45


def test_nothing_reported_is_na_not_zero() -> None:
    cells = row_cells(NodeRow("n", current=False), NOW)
    for key in ("gpus", "memory", "fullest", "util", "temp", "power", "xid", "remap", "age"):
        assert (cells[key].text, cells[key].role) == ("n/a", Role.NA), key


def test_memory_colours_follow_the_dashboard_thresholds() -> None:
    assert [memory_role(f) for f in (None, 0.5, 0.95, 0.985)] == [
        Role.NA,
        Role.OK,
        Role.WARNING,
        Role.CRITICAL,
    ]


def test_80_columns_keep_the_problem_and_drop_the_sparkline() -> None:
    assert "spark" not in [c.key for c in columns_for(80)]
    # the table's 78 columns beside its scrollbar: POWER gives way so the problem keeps
    # PROBLEM_MIN and names the alert ("CUDA out of memory (1 …", issue 36 point 5)
    narrow = columns_for(78)
    assert "power" not in [c.key for c in narrow]
    assert 78 - sum(c.width + 1 for c in narrow if c.width) >= PROBLEM_MIN
    assert [c.key for c in columns_for(140)] == [c.key for c in COLUMNS]
    head = header_text(80)
    assert len(head) == 80 and head.split()[:3] == ["NODE", "GPU", "MEM"]
    assert "PROBLEM" in head
    assert fit("a-very-long-node-name", 8, False) == "a-very-…" and fit("7", 3, True) == "  7"
