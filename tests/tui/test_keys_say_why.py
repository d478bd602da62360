"""A key that cannot act on what is under the cursor says why in a toast, never nothing
(issue 36 point 8): Enter on a job's row, K on a GPU with no process, r / w / K hidden by
--read-only, d / w on a host that is not connected. Before, a greyed-out or hidden key did
nothing at all when pressed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from gpumon.backends.actions import audit
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_PID
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen
from gpumon.tui.screens.kill import KillScreen

import notices

Wait = Callable[..., Awaitable[None]]


async def rows_up(pilot: object, wait: Wait, app: GpumonApp) -> None:
    section = app.dashboard.sections[0]
    await wait(pilot, lambda: len(section.rows) == 8 and section.jobs.plain, what="GPU rows")


async def test_enter_on_a_jobs_row_and_k_on_a_gpu_without_a_process_say_why(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(demo_time=70.0)  # after the OOM: GPUs 5 and 7 hold nothing
    app = GpumonApp([monitor], bell=False)
    said = notices.said(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await rows_up(pilot, wait, app)
        await pilot.press("G")  # the last row: the drafter's, in the jobs pane
        assert app.dashboard.cursor_model.under_cursor() == ("job", "drafter")
        assert app.dashboard.check_action("open_detail", ()) is None  # greyed out
        await pilot.press("enter")
        await wait(pilot, lambda: any(m.startswith("Enter (detail)") for m in said), what="why")
        assert not isinstance(app.screen, DetailScreen)
        assert (
            "Enter (detail): the cursor is on job drafter's row: move to one of its GPUs (5, 6, 7)"
        ) in said
        await pilot.press("g", *["down"] * 5, "enter")  # GPU 5's detail view
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        assert cast(DetailScreen, app.screen).selected_process() is None
        await pilot.press("K")
        why = "K (kill): GPU 5 runs no compute process: nothing to terminate"
        await wait(pilot, lambda: why in said, what=f"{why!r} in {said}")
        assert not isinstance(app.screen, KillScreen)


async def test_k_from_a_jobs_row_acts_on_the_incidents_holder_the_strip_offers(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """The strip says "K stop jupyter-lab" wherever the cursor is; from the jobs pane K was
    greyed out (it needed a GPU under the cursor) and did nothing."""
    monitor = demo_monitor(demo_time=70.0)
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await rows_up(pilot, wait, app)
        await wait(pilot, lambda: "K stop jupyter-lab" in app.dashboard.strip.plain, what="K stop")
        await pilot.press("G")
        assert app.dashboard.cursor_model.under_cursor() == ("job", "drafter")
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        assert cast(KillScreen, app.screen).plan.process.host_pid == JUPYTER_PID
        await pilot.press("escape")  # Cancel: nothing is signalled


async def test_keys_hidden_by_read_only_say_so_and_are_audited(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(demo_time=70.0)], bell=False, read_only=True)
    said = notices.said(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await rows_up(pilot, wait, app)
        await wait(pilot, lambda: app.dashboard.check_action("doctor", ()), what="connected")
        assert app.dashboard.check_action("restart_job", ()) is False  # hidden
        await pilot.press(*["down"] * 6)  # GPU 6: the drafter's, CT 201's jupyter on it
        await pilot.press("r", "w", "K")
        await wait(pilot, lambda: len(said) >= 3, what="three refusals")
        for what in ("restart", "swap-torch", "kill"):
            assert f"{what} refused: gpumon runs with --read-only" in said, said
        refused = [e for e in audit.read_entries() if e["outcome"] == "refused"]
        assert [e["action"] for e in refused] == ["restart", "swap-torch", "kill"]


async def test_keys_on_a_host_that_is_not_connected_say_so(
    unreachable_monitor: Callable[[], HostMonitor], wait: Wait
) -> None:
    monitor = unreachable_monitor()
    app = GpumonApp([monitor], bell=False)
    said = notices.said(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait(pilot, lambda: monitor.status.error is not None, what="the refusal")
        assert app.dashboard.check_action("doctor", ()) is None  # greyed out
        await pilot.press("d", "w")
        for key in ("d (doctor)", "w (torch)"):
            await wait(pilot, lambda k=key: any(m.startswith(k) for m in said), what=key)
        assert all("is not connected" in m for m in said if m[1:3] == " ("), said
