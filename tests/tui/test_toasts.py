"""Toasts never cover what the on-call person needs (issue 11, point 8): the alert strip
with its "+1 more" and its key to the fix, a dialog's buttons, the detail view's plots and
process list. At 80x24 (where the OOM toast covered the strip) and 120x40."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._toast import Toast

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import alerts as dashboard_alerts
from gpumon.tui.screens import DetailScreen, JobActionScreen, SwapScreen

from held_demo import HeldDemo

Wait = Callable[..., Awaitable[None]]
SIZES = [(80, 24), (120, 40)]
SIZE_IDS = ["80x24", "120x40"]
# The tests' own toasts stay until the test has seen where they sit: Textual's 5 s lifetime
# ran out before a busy machine (load 15, CI ci8) drew the swap dialog's first toast.
ON_SHOW_S = 600.0
LONG = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 " * 2


def toasts(app: GpumonApp) -> list[Region]:
    return [t.region for t in app.screen.query(Toast) if t.region.area]


def clear_of(app: GpumonApp, *widgets: Widget) -> None:
    """No toast on show covers any cell of ``widgets``: what the screen draws on top at
    each cell a toast would reach is the widget (or one inside it), never the toast."""
    shown = toasts(app)
    assert shown, "no toast on show"
    screen = app.screen
    for widget in widgets:
        for toast in shown:
            common = toast.intersection(widget.region)
            for y in range(common.y, common.bottom):
                for x in range(common.x, common.right):
                    top, _ = screen.get_widget_at(x, y)
                    assert not isinstance(top, Toast), (widget, toast, (x, y))


async def with_toast(pilot: Pilot[int], wait: Wait, app: GpumonApp) -> None:
    """Until a toast is on show and has kept its place for a moment (a toast replaced by
    the next alert's is laid out over a frame or two)."""
    seen: list[list[Region]] = []

    async def settled() -> bool:
        seen.append(toasts(app))
        await pilot.pause(0.3)
        return bool(seen[-1]) and toasts(app) == seen[-1]

    for _ in range(50):
        if await settled():
            return
    pytest.fail(f"no toast settled: {seen[-3:]}")


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
async def test_the_oom_toast_sits_above_the_strip_and_the_footer(
    demo_monitor: Callable[..., HostMonitor],
    wait: Wait,
    size: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The toast stays for the test: on a loaded machine the strip's wait alone can outlast
    # its few seconds, and where it sits is what this test is about, not how long.
    monkeypatch.setattr(dashboard_alerts, "CRITICAL_TIMEOUT_S", 600.0)
    # The drafter dies at 60 s of scenario time, held at 48 s until its log was read (an
    # OOM found in the log's backlog is never toasted): 6 s after the release at 2x.
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=48.0, speed=2.0, held=held)
    app = GpumonApp([monitor])
    async with app.run_test(size=size, notifications=True) as pilot:
        d = app.dashboard
        jobs = d.sections[0].jobs
        await wait(pilot, lambda: "tok/s" in jobs.plain, what="the drafter's rate")
        held.release()
        await wait(pilot, lambda: d.strip.display and "r restart" in d.strip.plain, what="strip")
        await with_toast(pilot, wait, app)
        clear_of(app, d.strip, d.query_one(Footer))


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
async def test_toasts_on_the_detail_view_miss_its_plots_and_processes(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    app = GpumonApp([demo_monitor(demo_time=30.0)])
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
        await pilot.press("enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        app.notify(LONG, title="CRITICAL demo GPU 6", severity="error", timeout=ON_SHOW_S)
        await with_toast(pilot, wait, app)
        clear_of(app, *screen.plots.values(), screen.processes)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
async def test_toasts_over_a_dialog_miss_its_buttons_title_and_first_lines(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    app = GpumonApp([demo_monitor(demo_time=70.0)])
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait(pilot, lambda: app.dashboard.check_action("restart_job", ()) is True)
        await wait(pilot, lambda: app.dashboard.restart_target() is not None, what="the OOM")
        await pilot.press("r")
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
        screen = app.screen
        assert isinstance(screen, JobActionScreen)
        await wait(pilot, lambda: screen.plan is not None or bool(screen.problem), what="plan")
        app.notify(LONG, title="CRITICAL demo GPU 6", severity="error", timeout=ON_SHOW_S)
        app.notify("second", title="another", timeout=ON_SHOW_S)
        await with_toast(pilot, wait, app)
        clear_of(app, screen.query_one("#restart-buttons"))
        # issue 26.3: toasts docked at the top covered the title and the plan's start
        clear_of_top(app, screen.query_one("#restart-box"), 4)


def clear_of_top(app: GpumonApp, box: Widget, lines: int) -> None:
    """No toast on show covers the top ``lines`` rows of ``box`` (its title on its border
    and the first lines under it)."""
    shown = toasts(app)
    assert shown, "no toast on show"
    top = Region(box.region.x, box.region.y, box.region.width, lines)
    for toast in shown:
        assert not toast.overlaps(top), (toast, top)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
async def test_toasts_over_the_full_screen_swap_dialog_miss_its_buttons(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    app = GpumonApp([demo_monitor(demo_time=30.0)])
    async with app.run_test(size=size, notifications=True) as pilot:
        await wait(pilot, lambda: app.dashboard.check_action("swap_torch", ()) is True)
        await pilot.press("w")
        await wait(pilot, lambda: isinstance(app.screen, SwapScreen), what="the swap dialog")
        screen = app.screen
        app.notify(LONG, title="CRITICAL demo GPU 6", severity="error", timeout=ON_SHOW_S)
        await with_toast(pilot, wait, app)
        clear_of(app, screen.query_one("#swap-buttons"))
        clear_of_top(app, screen.query_one("#swap-box"), 4)
