"""The demo's whole story, live: a jupyter in CT 201 takes 6 GiB of GPU 6 (host-side
attribution through the real collector on the simulated Proxmox host), the drafter OOMs,
and its crash verdict and the OOM-death alert name the processes that held the memory."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.workloads import JobState

pytestmark = pytest.mark.system


async def test_the_drafters_oom_names_the_foreign_jupyter() -> None:
    settings = demo_settings(demo_time=50.0, speed=2.0)  # the OOM comes 5 s from now
    monitor = make_monitor(resolve_host(Config(path=None), "demo"), settings, record=False)
    monitor.start()
    try:
        drafter = monitor.workloads.jobs["drafter"]
        deadline = time.monotonic() + 40
        while drafter.state is not JobState.CRASHED:
            assert time.monotonic() < deadline, "no OOM"
            await asyncio.sleep(0.2)
        assert drafter.crash_reason == "OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)"
        deadline = time.monotonic() + 20
        while not [a for a in monitor.alerts.history() if a.kind == "oom_death" and a.gpu == 6]:
            assert time.monotonic() < deadline, "no OOM-death alert"
            await asyncio.sleep(0.2)
        [death] = [a for a in monitor.alerts.history() if a.kind == "oom_death" and a.gpu == 6]
        assert "874 train.drafter in CT200" in death.message
        assert "host PID 3187442 jupyter-lab in CT201" in death.message
    finally:
        await monitor.stop()
