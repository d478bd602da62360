"""The detail view (issue 11, point 10): it opens on a window that fits the history it has,
remembers the window chosen (for the next opening and the next run), and the memory plot
shows the capacity and the warning threshold, zoomed in so a ramp of a few GiB shows."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen
from gpumon.tui.screens.detail import fitting_window
from gpumon.tui.views import rgb

Wait = Callable[..., Awaitable[None]]


def test_the_window_that_fits_the_history() -> None:
    assert fitting_window(0.0) == 60.0
    assert fitting_window(59.0) == 60.0
    assert fitting_window(61.0) == 600.0
    assert fitting_window(2 * 3600.0) == 3600.0


async def open_detail(pilot: Pilot[int], wait: Wait, app: GpumonApp, gpu: int) -> DetailScreen:
    await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
    await pilot.press(str(gpu), "enter")
    await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
    screen = app.screen
    assert isinstance(screen, DetailScreen)
    await wait(pilot, lambda: screen.plots["memory"].spec is not None, what="the plots")
    await pilot.pause()
    return screen


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_detail_view_opens_on_a_fitting_window_and_remembers_the_chosen_one(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int], state_home: Path
) -> None:
    app = GpumonApp([demo_monitor(demo_time=30.0)])
    async with app.run_test(size=size) as pilot:
        screen = await open_detail(pilot, wait, app, 6)
        assert screen.window == 60.0  # seconds of history: the 1 min window, not 10 min
        assert "window 1 min" in str(screen.title_line.render())
        await pilot.press("3")
        assert screen.window == 3600.0
        await pilot.press("escape")
        screen = await open_detail(pilot, wait, app, 5)
        assert screen.window == 3600.0  # the chosen window, on the next opening
    state = json.loads((state_home / "gpumon" / "state.json").read_text())
    assert state["detail_window"] == 3600.0
    again = GpumonApp([demo_monitor(demo_time=30.0)])
    async with again.run_test(size=size) as pilot:
        screen = await open_detail(pilot, wait, again, 6)
        assert screen.window == 3600.0  # and on the next run


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_memory_plot_shows_capacity_and_the_warning_line_zoomed_in(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    monitor = demo_monitor(demo_time=50.0)  # GPU 6 ramps towards full (OOM at 60 s)
    app = GpumonApp([monitor])
    async with app.run_test(size=size) as pilot:
        screen = await open_detail(pilot, wait, app, 6)
        spec = screen.plots["memory"].spec
        assert spec is not None
        total = 97887 / 1024  # 95.6 GiB
        warning = total * 0.95  # memory_warning_pct 95 (the 2 GiB free rule is higher)
        pal = app.palette
        assert spec.levels == ((total, rgb(pal.critical)), (warning, rgb(pal.warning)))
        used = [y for y in spec.ys if y is not None]
        assert used and min(used) > 80  # GPU 6 is near full here...
        assert 0 < spec.y_min < min(used)  # ...so the axis starts above 0: the ramp shows
        text = screen.plots["memory"].render().plain
        assert "96" in text and "91" in text  # capacity and threshold are the y ticks


async def test_a_gpu_with_little_memory_used_plots_from_zero(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(demo_time=70.0)])  # the drafter's GPUs empty after the OOM
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_detail(pilot, wait, app, 6)
        spec = screen.plots["memory"].spec
        assert spec is not None and spec.y_min == 0.0
