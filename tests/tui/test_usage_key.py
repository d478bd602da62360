"""``u`` (issue 39 point 2): the accounting of the host under the cursor, the table
``gpumon usage HOST`` prints, with the config's price; ``b`` groups by user, job and GPU
in turn, ``s`` changes the span; Esc goes back. The database is the state directory's,
filled here as a watch would have filled it (the arithmetic: tests/unit/test_usage.py)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.usage import UsageSettings
from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource, Source
from gpumon.backends.paths import usage_db
from gpumon.backends.usage import Tally, UsageStore
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import UsageScreen

Wait = Callable[..., Awaitable[None]]


def recorded(host: str) -> None:
    """An hour of two GPUs on ``host``: GPU 0 at work for CT200's trainer, GPU 1 held idle
    by CT201's jupyter; 400 W and 100 W."""
    now = time.time()
    tally = Tally(AlertRules(), watched=200)
    procs = (
        GpuProcess(861, "python3", 8000, gpu_uuid="GPU-a", user="root", command="python3 train.py"),
        GpuProcess(
            None, "jupyter-lab", 6000, gpu_uuid="GPU-b", host_pid=3187442, container="201",
            user="alice", command="jupyter-lab", source=ProcessSource.HOST.value,
        ),
    )  # fmt: skip
    gpus = (
        GpuSample(0, uuid="GPU-a", memory_used_mib=8000, utilization_pct=90.0, power_w=400.0),
        GpuSample(1, uuid="GPU-b", memory_used_mib=6000, utilization_pct=0.0, power_w=100.0),
    )
    for t in range(3601):
        sample = HostSample(host, now - 3600 + t, Source.AGENT_NVML, gpus, procs)
        tally.add(sample, procs, {}, 5.0)
    store = UsageStore(usage_db())
    store.write(host, tally.take(), tally.estimated, now)
    store.close()


async def test_u_shows_the_usage_of_the_host_under_the_cursor(
    demo_monitor: Callable[..., Any], wait: Wait
) -> None:
    recorded("demo")
    app = GpumonApp([demo_monitor()], usage=UsageSettings(price_per_kwh=0.2, currency="EUR"))
    async with app.run_test(size=(120, 40)) as pilot:
        sections = app.dashboard.sections
        await wait(pilot, lambda: all(len(s.rows) == 8 for s in sections), what="GPU rows")
        await pilot.press("u")
        await wait(pilot, lambda: isinstance(app.screen, UsageScreen), what="the usage screen")
        screen = cast(UsageScreen, app.screen)
        await wait(pilot, lambda: screen.lines, what="the table")
        table = [line.split() for line in screen.lines]
        assert screen.lines[0].startswith("usage of demo since ")
        assert ["CT200", "1.00", "0.00", "0.40", "~0.08", "EUR"] in table
        assert ["CT201", "0.00", "1.00", "0.10", "~0.02", "EUR"] in table
        assert "held idle most: CT201 / alice / jupyter-lab 1.00 GPU-h" in screen.lines
        await pilot.press("b")  # by user
        await wait(pilot, lambda: "by user" in screen.lines[0], what="by user")
        assert ["alice", "0.00", "1.00", "0.10", "~0.02", "EUR"] in [
            line.split() for line in screen.lines
        ]
        await pilot.press("s")  # the last 7 days
        await wait(pilot, lambda: "(7 d)" in screen.lines[0], what="7 days")
        await pilot.press("escape")
        await wait(pilot, lambda: app.screen is app.dashboard, what="the dashboard")
