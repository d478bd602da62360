"""The host line (issue 11, point 11): the target's CPU, RAM, load and swap, from the
real agent's ``HostStats``, in the empty rows at 120x40 and 200x60; 80x24 keeps one line
per GPU and no host line."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp

Wait = Callable[..., Awaitable[None]]


@pytest.mark.parametrize("size", [(120, 40), (200, 60)], ids=["120x40", "200x60"])
async def test_the_host_line_shows_the_targets_load_where_there_is_room(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    monitor = demo_monitor(demo_time=30.0, frozen=False)
    app = GpumonApp([monitor])
    async with app.run_test(size=size) as pilot:
        section = app.dashboard.sections[0]
        line = section.host_line
        await wait(pilot, lambda: monitor.host_load is not None, what="the agent's host stats")
        await wait(pilot, lambda: line.display and "%" in str(line.render()), what="CPU %")
        text = str(line.render())
        assert text.startswith(" host ") and " RAM " in text and " load " in text
        assert "GiB" in text
        assert line.region.y == section.header.region.bottom  # right under the header
        assert len(section.rows) == 8 and all(r.region.height >= 1 for r in section.rows)


async def test_80x24_keeps_one_line_per_gpu_and_no_host_line(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(demo_time=30.0, frozen=False)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: monitor.host_load is not None, what="the agent's host stats")
        await pilot.pause(0.3)
        section = app.dashboard.sections[0]
        assert not section.host_line.display
        assert app.dashboard.row_height == 1
