"""The hang scenario live: the hung server's log says its health check failed ~25 s into
the hang; that line is evidence under the server's own ``sglang_hung`` from the moment it
is read (a warning until ``hung_after_s``, then critical), never an alert that shows on its
own and then goes while the server still hangs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import Health
from gpumon.backends.monitor import make_monitor
from gpumon.backends.sim.scenario import HANG_AT
from gpumon.backends.workloads.sglang import HUNG_AFTER_S

from held_demo import HeldDemo
from waiting import until

pytestmark = pytest.mark.system

# the log's line comes 25 s into the hang; with the old code it went 31 s after it came
# (the log written again LOG_RECOVERY_S later read as a new run): watched past both
WATCH_S = 40.0


async def test_the_failed_health_check_stays_evidence_of_the_hang(tmp_path: Path) -> None:
    # Held 20 s into the hang until the server and its log were read: the health check
    # line comes 5 s after the release, read live.
    held = HeldDemo(tmp_path)
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, held.settings(HANG_AT + 20.0, scenario="hang"), record=False)
    monitor.start()

    def health_checks() -> list[Alert]:
        return [a for a in monitor.alerts.history() if a.facts.health_check]

    def hung(port: int) -> Alert | None:
        return next((a for a in monitor.alerts.active() if a.key == f"sglang_hung:{port}"), None)

    def servers_read() -> bool:
        trackers = monitor.workloads.sglang.values()
        return (
            monitor.first_rounds_done()
            and bool(trackers)
            and all(t.up and t.last_decode_line is not None for t in trackers)
        )

    try:
        await until(servers_read, 60, lambda: f"the servers, their logs: {monitor.waiting_for()}")
        assert health_checks() == []
        held.release()
        [line] = await until(health_checks, 60, "the failed health check")
        # the hung server's own log said it (the demo's servers are on free ports)
        port = int(line.key.rpartition("sglang-")[2].partition(".log")[0])
        tracker = monitor.workloads.sglang[port]
        # read and judged in one turn: the server's own alert is there already
        alert = hung(port)
        assert alert is not None, "the health check line came alone"
        silent = tracker.hung_s
        assert silent is not None
        if silent < HUNG_AFTER_S:  # on a loaded machine the wait may have outlasted it
            assert alert.severity is Health.WARNING
            assert alert.message.startswith(f"sglang :{port} may be hung: 37 running, ")
        assert "/health_generate timed out (its log)" in alert.message
        [incident] = [i for i in incidents(monitor.alerts.active()) if i.cause.key == alert.key]
        assert line.key in [a.key for a in incident.evidence]
        # it stays while the server hangs (and it hangs for the rest of the scenario)
        loop = asyncio.get_running_loop()
        end = loop.time() + WATCH_S
        while loop.time() < end:
            active = {a.key for a in monitor.alerts.active()}
            assert line.key in active, f"the health check went at {tracker.hung_s} s"
            assert f"sglang_hung:{port}" in active
            await asyncio.sleep(0.2)
        await until(
            lambda: (a := hung(port)) is not None and a.severity is Health.CRITICAL,
            60,
            "sglang_hung critical",
        )
        assert line.key in {a.key for a in monitor.alerts.active()}
    finally:
        await monitor.stop()
