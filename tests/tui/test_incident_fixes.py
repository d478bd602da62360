"""What fixes an incident, on the demo's dashboard (issue 26.1, 26.2, 26.9, 27.2).

- training-oom: CT 201's jupyter-lab holds 6 GiB of GPU 6 when the drafter runs out: the
  strip and the alert list say it is the cause and offer ``K stop jupyter-lab`` before
  ``r restart drafter``; the jupyter keeps its 6 GiB after the crash (another container's
  process), the GPU row still flags it, and ``K`` from any GPU row without another
  container's process opens the kill dialog on the jupyter, not on that row's process.
- sglang: the simulated kernel log's Xid (on GPU 3's bus, not this machine's /dev/kmsg)
  is tied to GPU 3, says NVIDIA's action, and ``n`` lands on GPU 3's row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_PID, XID_GPU
from gpumon.backends.workloads import JobState
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import AlertHistoryScreen
from gpumon.tui.screens.kill import KillScreen

from held_demo import HeldDemo, drafter_read

Wait = Callable[..., Awaitable[None]]
HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)
FIXES = "K stop jupyter-lab, r restart drafter"


async def test_the_holder_is_the_cause_and_k_stops_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    # Held at 30 s, before CT 201's jupyter comes (32 s), until the drafter's log was read:
    # the jupyter's alert knows the drafter's GPU (one incident), and the drafter dies at
    # 60 s, live, 7.5 s after the release at 4x.
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=30.0, speed=4.0, interval=0.5, held=held)
    app = GpumonApp([monitor], bell=False)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(160, 40)) as pilot:
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        await wait(pilot, lambda: drafter_read(monitor), what="the drafter's log read")
        held.release()
        await wait(
            pilot,
            lambda: monitor.workloads.jobs["drafter"].state is JobState.CRASHED,
            timeout=30,
            what="the drafter's crash",
        )
        await wait(
            pilot,
            lambda: f"{HEADLINE} — {FIXES}" in app.dashboard.strip.plain,
            timeout=20,
            what=f"the holder and its fix in the strip: {app.dashboard.strip.plain!r}",
        )
        # The jupyter is another container's: the drafter's death leaves its 6 GiB.
        await wait(
            pilot,
            lambda: any(p.host_pid == JUPYTER_PID for p in monitor.processes),
            what="the jupyter still listed",
        )
        gpu6 = section.rows[6].render().plain
        assert "held by CT 201 jupyter" in gpu6, gpu6
        await pilot.press("a")
        history = app.screen
        assert isinstance(history, AlertHistoryScreen)
        first = [str(c) for c in history.table.get_row_at(0)]
        assert first[6] == f"{HEADLINE} — {FIXES}"
        await pilot.press("escape")
        # K from GPU 0's row (the target's own process only): the incident's holder.
        assert app.dashboard.cursor == (0, 0)
        await pilot.press("K")
        await wait(pilot, lambda: isinstance(app.screen, KillScreen), what="the kill dialog")
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        assert dialog.plan.process.host_pid == JUPYTER_PID
        await pilot.press("escape")  # Cancel: nothing is signalled
        await pilot.pause()
        assert any(p.host_pid == JUPYTER_PID for p in monitor.processes)


async def test_the_demos_xid_is_tied_to_its_gpu_and_n_lands_there(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    # the simulated kernel log gets its Xid 63 at 90 s: held at 86 s until every source
    # answered once (the agent follows the kernel log from its end before its logs' first
    # round), then 2 s later at twice the speed
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(scenario="sglang", demo_time=86.0, speed=2.0, held=held)
    app = GpumonApp([monitor], bell=False)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(160, 40)) as pilot:
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        await wait(
            pilot,
            lambda: not monitor.waiting_for(),
            timeout=30,
            what=lambda: f"the first rounds: waiting for {monitor.waiting_for()}",
        )
        held.release()

        def xids() -> list[tuple[int | None, str]]:
            return [(a.gpu, a.message) for a in monitor.alerts.active() if a.kind == "xid"]

        await wait(pilot, lambda: bool(xids()), timeout=20, what="the Xid")
        [(gpu, message)] = xids()
        assert gpu == XID_GPU and message.startswith(f"Xid 63 on GPU {XID_GPU} (running ")
        await wait(
            pilot,
            lambda: "Xid 63 on GPU 3" in app.dashboard.strip.plain,
            what="the Xid in the strip",
        )
        strip = app.dashboard.strip.plain
        assert "row remapping recorded — reset the GPU (nvidia-smi -r -i 3) when idle" in strip
        assert app.dashboard.cursor == (0, 0)
        await pilot.press("n")
        await pilot.pause()
        assert app.dashboard.cursor == (0, XID_GPU)
