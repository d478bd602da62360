"""The demo's whole story, live: a jupyter in CT 201 takes 6 GiB of GPU 6 (host-side
attribution through the real collector on the simulated Proxmox host), the drafter OOMs,
and its crash verdict and the OOM-death alert name the processes that held the memory."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.monitor import make_monitor
from gpumon.backends.workloads import JobState

from held_demo import HeldDemo, drafter_read
from waiting import until

pytestmark = pytest.mark.system


async def test_the_drafters_oom_names_the_foreign_jupyter(tmp_path: Path) -> None:
    # Held at 50 s (the jupyter holds its 6 GiB since 32 s) until every source answered
    # once, the Proxmox host's process list too, and the drafter's log was read: the OOM
    # comes 5 s after the release at 2x, live.
    held = HeldDemo(tmp_path)
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, held.settings(50.0, 2.0), record=False)
    monitor.start()
    try:
        await until(
            lambda: drafter_read(monitor) and not monitor.waiting_for(),
            60,
            lambda: f"the first rounds: waiting for {monitor.waiting_for()}",
        )
        held.release()
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
