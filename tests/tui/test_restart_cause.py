"""A restart that does not walk back into its cause (issue 36 points 3 and 9), on the
demo's dashboard: CT 201's jupyter-lab took 6 GiB of GPU 6 and the drafter died of CUDA
OOM there; the jupyter, another container's process, keeps its memory.

- ``r`` says so before the plan ("the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0
  GiB — K stop jupyter-lab first, or restart anyway (y)") and offers ``K``; ``K`` opens the
  kill dialog on the jupyter, and once it is gone the warning goes and the restart waits
  for what the drafter was seen to need (what it held on GPU 6 and the 2 GiB it tried);
- ``y`` restarts anyway: the wait for free GPUs does not wait for the jupyter; after the
  restart the incident's headline is still the OOM, with "restarted by ... (new PID ...)"
  in its detail.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Button

from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_PID
from gpumon.backends.workloads import JobState
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import AlertHistoryScreen, JobActionScreen
from gpumon.tui.screens.alert_detail import AlertDetailScreen
from gpumon.tui.screens.kill import KillScreen
from gpumon.tui.views.alert_detail import detail_plain

from held_demo import HeldDemo, drafter_read

Wait = Callable[..., Awaitable[None]]
CAUSE = "the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB"
WAY_OUT = "— K stop jupyter-lab first, or restart anyway (y)"
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)


def said(screen: JobActionScreen, part: str) -> str:
    """What a part of the dialog shows on screen now, on one line."""
    static = screen.part(part)
    if not static.display:
        return ""
    w, h = static.size
    return " ".join(" ".join(s.text for s in static.render_lines(Region(0, 0, w, h))).split())


async def crashed_beside_the_jupyter(pilot: Pilot[int], wait: Wait, monitor: HostMonitor) -> None:
    drafter = monitor.workloads.jobs["drafter"]
    await wait(pilot, lambda: drafter.state is JobState.CRASHED, timeout=40, what="the crash")
    await wait(
        pilot,
        lambda: any(p.host_pid == JUPYTER_PID for p in monitor.processes),
        what="the jupyter still listed after the crash",
    )


async def open_restart(pilot: Pilot[int], wait: Wait, app: GpumonApp) -> JobActionScreen:
    await pilot.press("r")  # the cursor is on GPU 0: r takes the incident's job
    await wait(pilot, lambda: isinstance(app.screen, JobActionScreen), what="the dialog")
    screen = cast(JobActionScreen, app.screen)
    await wait(pilot, lambda: screen.plan is not None, timeout=20, what="the plan")
    await pilot.pause()
    return screen


async def test_r_warns_that_the_cause_is_still_there_and_k_stops_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    # Held at 30 s (before the jupyter, 32 s) until the drafter's log was read: the OOM at
    # 60 s comes live, 7.5 s after the release at 4x, and gpumon saw the drafter fill GPU 6.
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=30.0, speed=4.0, interval=0.5, held=held)
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait(pilot, lambda: drafter_read(monitor), timeout=30, what="the drafter's log")
        held.release()
        await crashed_beside_the_jupyter(pilot, wait, monitor)
        screen = await open_restart(pilot, wait, app)
        plan = screen.plan
        assert plan is not None
        # before the plan: the cause, and the way out
        assert said(screen, "cause") == f"{CAUSE} {WAY_OUT}"
        assert screen.part("cause").region.y < screen.part("plan").region.y
        assert str(screen.query_one("#confirm", Button).label) == "Restart anyway (y)"
        stop = screen.query_one("#stop-holder", Button)
        assert stop.display and str(stop.label) == "Stop jupyter-lab (K)"
        # the free-GPU check counts what the drafter was seen to need on GPU 6: what it held
        # there at its OOM (its OOM line says it, whichever samples came) and the 2 GiB it
        # tried, more than the jupyter leaves
        need = plan.needs[6]
        assert need > 97250 - 6144, plan.needs
        assert re.search(r"have what it needs free \(GPU 5: [\d.]+ GiB, GPU 6: 9\d\.\d GiB", (
            said(screen, "plan")
        )), said(screen, "plan")  # fmt: skip

        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        kill = cast(KillScreen, app.screen)
        assert kill.plan.process.host_pid == JUPYTER_PID
        await pilot.press("y")
        await wait(pilot, lambda: kill.state == "done", timeout=20, what="the kill")
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is screen, what="back to the restart")
        await wait(pilot, lambda: not said(screen, "cause"), timeout=20, what="the warning gone")
        assert str(screen.query_one("#confirm", Button).label) == "Restart (y)"
        assert not screen.query_one("#stop-holder").display

        await pilot.press("y")
        run = screen.run
        assert run is not None and not run.plan.despite and run.plan.needs[6] == need
        await wait(pilot, lambda: run.outcome is not None, timeout=40, what="the outcome")
        assert run.outcome is not None and run.outcome.ok, run.outcome
        free = [m for step, m in run.history if m.startswith("GPUs free")]
        assert free and "restarting anyway" not in free[0]


async def test_restart_anyway_goes_on_and_the_incident_keeps_its_cause(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=70.0, interval=0.5)  # 10 s after the OOM
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await crashed_beside_the_jupyter(pilot, wait, monitor)
        screen = await open_restart(pilot, wait, app)
        await wait(pilot, lambda: CAUSE in said(screen, "cause"), what="the warning")
        await pilot.press("y")  # restart anyway
        run = screen.run
        assert run is not None and run.plan.despite
        await wait(pilot, lambda: run.outcome is not None, timeout=40, what="the outcome")
        assert run.outcome is not None and run.outcome.ok, run.outcome
        free = [m for step, m in run.history if m.startswith("GPUs free")]
        assert free and free[0].endswith(f"(restarting anyway: {CAUSE})")
        assert any(p.host_pid == JUPYTER_PID for p in monitor.processes)  # still there
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, JobActionScreen), what="closed")
        # the record is dated on the alerts' (wall) clock, not on the trackers' own
        [record] = [a for a in monitor.alerts.history() if a.kind == "job_restarted"]
        assert abs(record.time - monitor.clock()) < 60, record

        # the record keeps its story: the OOM leads, the restart is in its detail
        await pilot.press("a")
        history = app.screen
        assert isinstance(history, AlertHistoryScreen)
        await wait(
            pilot,
            lambda: any(HEADLINE in str(c) for c in history.table.get_row_at(0)),
            what="the OOM's headline first in the history",
        )
        await pilot.press("enter")
        await wait(pilot, lambda: isinstance(app.screen, AlertDetailScreen), what="the detail")
        detail = cast(AlertDetailScreen, app.screen)
        text = detail_plain(detail.rows)
        pid = run.outcome.pid
        restarted = rf"restarted by {re.escape(getpass.getuser())} at \d\d:\d\d:\d\d "
        assert re.search(rf"{restarted}\(new PID {pid}\)", text), text
        assert text.splitlines()[0].strip() == HEADLINE
