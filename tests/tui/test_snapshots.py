"""Screenshots of the dashboard and the detail view, compared with the accepted ones in
``__snapshots__/``. The simulator's clock is frozen (scenario time 30 s) and so is the
monitors' clock, so every run draws the same screen. Update with ``--snapshot-update``
after looking at the new SVGs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens.detail import DetailScreen

FROZEN_NOW = 1795962750.0

SnapCompare = Callable[..., bool]


def frozen_clock() -> float:
    return FROZEN_NOW


def wait_for_data(detail: bool = False) -> Callable[[Pilot[int]], object]:
    """A ``run_before`` that waits for the first sample (and the process list), opens the
    detail view of GPU 6 if asked, and lets the screen settle."""

    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        monitor = app.monitors[0]
        deadline = time.monotonic() + 20
        while monitor.latest is None or monitor.processes_time is None:
            assert time.monotonic() < deadline, "no data from the simulator"
            await pilot.pause(0.05)
        app.refresh_dashboard()
        await pilot.pause()
        if detail:
            await pilot.press(*["down"] * 6, "enter")
            deadline = time.monotonic() + 10
            screen = app.screen
            assert isinstance(screen, DetailScreen)
            while any(p.builds == 0 for p in screen.plots.values()):
                assert time.monotonic() < deadline, "plots not drawn"
                await pilot.pause(0.05)
        await pilot.pause(0.2)

    return run_before


@pytest.mark.parametrize("theme", ["gpumon-dark", "gpumon-light"])
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_dashboard(
    snap_compare: SnapCompare,
    demo_monitor: Callable[..., HostMonitor],
    theme: str,
    size: tuple[int, int],
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)], theme=theme)
    assert snap_compare(app, terminal_size=size, run_before=wait_for_data())


def test_detail_view(snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    assert snap_compare(app, terminal_size=(80, 24), run_before=wait_for_data(detail=True))


def test_lost_gpu_and_contrast_theme(
    snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock, fault="gpu_lost:4")], theme="gpumon-contrast")
    assert snap_compare(app, terminal_size=(80, 24), run_before=wait_for_data())
