"""Issue 36.1 on the dashboard, at 80x24: the ``stall`` demo's drafter writes its last step
at 30 s of scenario time and its NCCL watchdog speaks at 90 s. Before the watchdog, its row
says how long ago the last step came (never its last rate and ETA) and the NCCL spin on its
GPUs raises ``job_stalled`` as a warning on the strip, within 30 s of the last step, with
its fix: at 80 columns the headline is cut, "r restart drafter" stays (``r`` took only a
critical alert's job when the cursor is on none, so the warning offered no fix)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp

from held_demo import HeldDemo, drafter_read
from screen_text import screen_text

Wait = Callable[..., Awaitable[None]]


async def test_the_stall_is_a_warning_on_screen_before_the_watchdog(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=24.0, held=held, scenario="stall")
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: drafter_read(monitor), timeout=60, what="the drafter's log")
        held.release()  # its last step 6 s from now, read live
        job = monitor.workloads.jobs["drafter"]
        await wait(pilot, lambda: (job.step or 0) >= 680, timeout=60, what="the last step")
        await wait(pilot, lambda: "— (last step" in screen_text(app), timeout=60, what="the row")
        rate = screen_text(app)
        assert "13.0k tok/s" not in rate and "1h11m" not in rate

        def stalled() -> list[Alert]:
            return [a for a in monitor.alerts.active() if a.kind == "job_stalled"]

        await wait(pilot, lambda: bool(stalled()), timeout=60, what="job_stalled")
        (alert,) = stalled()
        # the watchdog line comes 60 s after the last step: this is the early word
        assert alert.severity is Health.WARNING and "NCCL spin" in alert.first_message
        # its last step is on the trackers' clock (Workloads.now), the alert's date the wall's
        assert job.last_update is not None
        assert alert.time - monitor.workloads.wall_of(job.last_update) < 30
        strip = app.dashboard.strip
        await wait(pilot, lambda: "stalled" in strip.plain, what="the strip")
        # at 80 columns the headline is cut, not the fix: its key and words stay
        assert "r restart drafter" in strip.plain, strip.plain
