"""An expanded GPU row on the dashboard (``x``): its process lines show under it, the cursor
steps onto each and back, the selected one is highlighted, ``K`` asks about exactly that
process (not the GPU's biggest holder, which ``K`` on the GPU row itself still picks and
says so), the other GPU-row keys act as on the row, and the cursor is back on the GPU row
when the process is gone from the next sample or the row is collapsed. On the demo: GPU 6
holds the drafter (CT 200) and, from 32 s, the foreign jupyter (CT 201)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

from gpu_rows import click_row
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from gpumon.backends.model import GpuProcess
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_PID
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard.screen import DashboardScreen
from gpumon.tui.screens import DetailScreen, JobActionScreen
from gpumon.tui.screens.kill import KillScreen
from gpumon.tui.views.process_cells import process_key
from gpumon.tui.widgets import RowRef

Wait = Callable[..., Awaitable[None]]
GPU = 6


def _key(process: GpuProcess | None) -> object:
    """Who the process is (its memory and CPU move between two process lists)."""
    return None if process is None else process_key(process)


def shown(what: Widget | RowRef) -> str:
    """A widget's or a GPU row's lines as drawn on screen."""
    if isinstance(what, RowRef):
        return "\n".join(strip.text for strip in what.drawn())
    w, h = what.size
    return "\n".join(strip.text for strip in what.render_lines(Region(0, 0, w, h)))


def highlighted(row: RowRef, line: int, d: DashboardScreen) -> bool:
    """Whether line ``line`` of ``row`` is drawn on the cursor's background."""
    strip = row.drawn()[line]
    cursor = d.palette.cursor_style.bgcolor
    text = [seg for seg in strip if seg.text.strip()]
    return bool(text) and all(seg.style is not None and seg.style.bgcolor == cursor for seg in text)


def gpu6_host_pids(monitor: HostMonitor) -> list[int | None]:
    sample = monitor.latest
    if sample is None:
        return []
    return [p.host_pid for p in sample.processes_for(sample.gpus[GPU])]


def selected_host_pid(d: DashboardScreen) -> int | None:
    p = d.selected_process()
    return None if p is None else p.host_pid


@contextlib.asynccontextmanager
async def expanded_gpu6(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> AsyncIterator[tuple[GpumonApp, Pilot[int], DashboardScreen]]:
    """The demo's dashboard with the cursor on GPU 6, expanded, once both holders are
    listed (the demo frozen at 40 s, sampling every 0.5 s: a running clock reached the
    drafter's OOM at 60 s on a loaded machine, and GPU 6 lost both holders)."""
    monitor = demo_monitor(demo_time=40.0, interval=0.5)
    app = GpumonApp([monitor])
    async with app.run_test(size=size) as pilot:
        d = app.dashboard
        await wait(pilot, lambda: JUPYTER_PID in gpu6_host_pids(monitor), timeout=20)
        await wait(pilot, lambda: len(gpu6_host_pids(monitor)) == 2, what="both holders")
        await pilot.press(*["down"] * GPU, "x")
        await wait(pilot, lambda: len(d.row_processes(0, GPU)) == 2, what="the expanded row")
        yield app, pilot, d


async def test_the_cursor_walks_the_process_lines_and_k_names_the_selected_one(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    async with expanded_gpu6(demo_monitor, wait, (80, 24)) as (app, pilot, d):
        row = d.sections[0].rows[GPU]
        assert d.cursor == (0, GPU) and d.process_cursor is None
        view = row.view
        assert view is not None and view.expanded and view.cursor
        text = shown(row).splitlines()
        assert len(text) == view.lines == 1 + 1 + 2  # the row, its memory flag, 2 processes
        assert all(len(line) <= 80 for line in text)
        order = [p.host_pid for p in d.row_processes(0, GPU)]
        drafter = next(pid for pid in order if pid != JUPYTER_PID)
        mine, theirs = text[2 + order.index(drafter)], text[2 + order.index(JUPYTER_PID)]
        assert mine.lstrip().startswith("CT200") and "train" in mine
        assert theirs.lstrip().startswith("CT201") and "jupyter-lab" in theirs
        assert "▶" in text[0] and "▶" not in "".join(text[1:])
        await pilot.press("down")  # onto the first process line
        assert d.cursor == (0, GPU) and selected_host_pid(d) == order[0]
        await pilot.pause()
        text = shown(row).splitlines()
        view = row.view
        assert view is not None and not view.cursor and view.selected_line == 0
        assert "▶" not in text[0] and "▶" in text[2] and "▶" not in text[3]
        assert highlighted(row, 2, d) and not highlighted(row, 3, d)  # the cursor's colours
        assert d.under_cursor() == ("gpu", GPU)  # the keys of a GPU row act on GPU 6
        await pilot.press("down")
        assert selected_host_pid(d) == order[1]
        await pilot.press("down")  # past the last process line: the next GPU row
        assert d.cursor == (0, GPU + 1) and d.process_cursor is None
        await pilot.press("up")  # back onto GPU 6's last process line
        assert d.cursor == (0, GPU) and selected_host_pid(d) == order[1]

        # K on the drafter's line names the drafter: not the biggest-holder pick (which,
        # on the GPU row, is the other container's jupyter)
        while selected_host_pid(d) != drafter:
            await pilot.press("up")
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        assert dialog.plan.process.host_pid == drafter and dialog.why is None
        what = shown(dialog.query_one("#kill-what"))
        assert f"host PID {drafter}" in what and "CT200 PID" in what and "user root" in what
        assert "train" in what and f"{JUPYTER_PID}" not in what
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is d, what="cancelled")

        # on the GPU row itself K keeps picking the biggest holder, and says so
        await pilot.press(*["up"] * (1 + order.index(drafter)))
        assert d.cursor == (0, GPU) and d.process_cursor is None
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        assert dialog.plan.process.host_pid == JUPYTER_PID
        assert dialog.why is not None and "GPU 6's row" in dialog.why
        assert "another container's first" in dialog.why
        assert "GPU 6's row" in shown(dialog.query_one("#kill-what"))
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is d, what="cancelled")


async def test_gpu_row_keys_act_on_the_row_and_enter_keeps_the_process_selected(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    async with expanded_gpu6(demo_monitor, wait, (130, 45)) as (app, pilot, d):
        await pilot.press("down", "down")  # the second process line
        chosen = d.selected_process()
        assert chosen is not None
        selected = d.selected_job()
        assert selected is not None and selected[1].name == "drafter"  # GPU 6's job
        await pilot.press("r")
        await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="restart dialog")
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is d, what="cancelled")
        assert _key(d.selected_process()) == process_key(chosen)  # still on its line

        await pilot.press("enter")  # the detail view of GPU 6, that process selected
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        detail = cast(DetailScreen, app.screen)
        assert detail.target.gpu_index == GPU
        picked = detail.selected_process()
        assert picked is not None and process_key(picked) == process_key(chosen)
        await pilot.press("down")  # the detail view's cursor: the next GPU, not the first
        assert detail.target.gpu_index == GPU + 1 and d.cursor == (0, GPU + 1)
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is d, what="back on the dashboard")

        first, last = d.row_processes(0, GPU)
        await pilot.press("up")  # from GPU 7 onto GPU 6's last process line
        assert d.cursor == (0, GPU) and _key(d.selected_process()) == process_key(last)
        row = d.sections[0].rows[GPU]
        view = row.view
        assert view is not None
        await click_row(pilot, app, GPU, line=view.lines - 2)  # a click selects a line
        assert d.cursor == (0, GPU) and _key(d.selected_process()) == process_key(first)
        await pilot.pause(0.6)  # not a double click (that opens the detail view)
        await click_row(pilot, app, GPU)  # and on the row itself, the row
        assert d.cursor == (0, GPU) and d.process_cursor is None and app.screen is d


async def test_collapsing_or_the_process_ending_puts_the_cursor_back_on_its_gpu_row(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    async with expanded_gpu6(demo_monitor, wait, (80, 24)) as (app, pilot, d):
        row = d.sections[0].rows[GPU]
        await pilot.press("down")
        assert d.process_cursor is not None
        await pilot.press("x")  # collapse: back on the GPU row, no process lines
        assert d.cursor == (0, GPU) and d.process_cursor is None
        await pilot.pause()
        view = row.view
        assert view is not None and not view.expanded and view.cursor
        assert len(shown(row).splitlines()) == view.lines == 2  # the row and its flag

        await pilot.press("x")
        await wait(pilot, lambda: len(d.row_processes(0, GPU)) == 2, what="expanded again")
        while selected_host_pid(d) != JUPYTER_PID:
            await pilot.press("down")
        # The jupyter ends (K, y: through the simulated host's kill): the cursor must come
        # back to GPU 6's row, not stay at its index (that is the drafter's line now).
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = cast(KillScreen, app.screen)
        assert dialog.plan.process.host_pid == JUPYTER_PID
        await pilot.press("y")
        await wait(pilot, lambda: dialog.state == "done", timeout=20, what="the kill")
        assert f"PID {JUPYTER_PID} has ended" in shown(dialog.query_one("#kill-status"))
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is d, what="closed")
        await wait(
            pilot, lambda: len(d.row_processes(0, GPU)) == 1, timeout=20, what="jupyter gone"
        )
        assert d.cursor == (0, GPU) and d.process_cursor is None
        assert d.selected_process() is None  # not the drafter, which has its index now
        view = row.view
        assert view is not None and view.cursor and view.selected_line is None
        assert "▶" in shown(row).splitlines()[0]
