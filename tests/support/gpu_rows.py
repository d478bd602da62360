"""Clicks on one GPU row of the dashboard (all of a host's rows are one ``GpuRows``)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from gpumon.tui.app import GpumonApp


async def click_row(
    pilot: Pilot[Any], app: GpumonApp, row: int, *, host: int = 0, line: int = 0
) -> None:
    """A click on ``line`` of GPU row ``row`` of ``host`` (its first line by default)."""
    rows = app.dashboard.sections[host].gpu_rows
    assert rows.view is not None, "no GPU rows drawn yet"
    await pilot.click(rows, offset=(2, rows.view.top(row) + line))
