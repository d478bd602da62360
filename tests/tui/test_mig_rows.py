"""The dashboard shows a MIG GPU as its instances (issue 39 point 3): on the simulated
machine's ``mig`` scenario GPU 7's row has no memory bar and says ``MIG`` where a GPU's
memory goes, and under it one line per GPU instance with its profile, its own memory and
its processes (``util n/a``: no driver reports utilisation per instance); the detail
view's values say ``MIG`` too."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import MIG_GPU
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen

Wait = Callable[..., Awaitable[None]]


async def test_the_mig_gpu_row_is_its_instances(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(scenario="mig", demo_time=40.0)])
    async with app.run_test(size=(120, 50)) as pilot:
        section = app.dashboard.sections[0]
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        await wait(pilot, lambda: "GI 5" in section.rows[MIG_GPU].plain, what="MIG lines")
        lines = section.rows[MIG_GPU].plain.splitlines()
        head = lines[0]
        assert " MIG " in head and "/95.6GiB" not in head, head
        slices = [ln.strip() for ln in lines[1:] if ln.strip().startswith("GI ")]
        assert len(slices) == 3, lines
        assert re.match(
            r"GI 1 2g\.48gb  40\.0/46\.8GiB 85%  util n/a: "
            r"1510 vllm\.entrypoints\.openai\.api_server 40\.0GiB",
            slices[0],
        )
        assert re.match(
            r"GI 5 1g\.24gb  1\d\.\d/23\.4GiB \d\d%  util n/a: 1511 finetune\.py", slices[1]
        )
        assert slices[2] == "GI 6 1g.24gb  0.0/23.4GiB 0%  util n/a: no processes"
        other = section.rows[0].plain
        assert "GI " not in other and "/95.6GiB" in other  # a GPU off MIG is as before
        # every line of the section is drawn: the layout counts the instance lines (it is
        # planned again on the refresh after the lines came: CI at load 15 read it between)
        rows = section.gpu_rows
        await wait(
            pilot,
            lambda: rows.view is not None and rows.size.height >= rows.view.lines,
            what="the GPU rows' height to hold the instance lines",
        )


async def test_the_detail_view_lists_the_instances_and_says_mig_for_the_memory(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor(scenario="mig", demo_time=40.0)])
    async with app.run_test(size=(120, 40)) as pilot:
        section = app.dashboard.sections[0]
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        await wait(pilot, lambda: "GI 5" in section.rows[MIG_GPU].plain, what="MIG lines")
        await pilot.press(str(MIG_GPU), "enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail view")
        screen = app.screen
        assert isinstance(screen, DetailScreen)

        def table() -> str:
            return str(screen.processes.render())

        await wait(pilot, lambda: "GI 6 1g.24gb" in table(), what="the instances")
        assert "GI 1 2g.48gb  40.0/46.8GiB 85%  util n/a" in table()
        title = str(screen.title_line.render())
        assert "MIG" in title and "/95.6GiB" not in title, title
