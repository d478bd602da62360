"""The vLLM pane on the dashboard (issue 38 point 3), driven with Pilot at 80x24: beside
the GPU rows and the jobs pane, a busy server and a wedged one, fed pages of the captures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.views import Role

import vllm_trackers

Wait = Callable[..., Awaitable[None]]
NOW = 1795962750.0
# The trackers' clock (Workloads.now: the monitor's monotonic judging clock, never the
# wall's), held still here; the pane judges a wedge on it as the alerts do.
TICKS = 5000.0


def frozen_clock() -> float:
    return NOW


async def test_the_vllm_pane_fits_80x24_and_says_the_wedged_engine_in_red(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, monkeypatch: pytest.MonkeyPatch
) -> None:
    monitor = demo_monitor(clock=frozen_clock)
    w = monitor.workloads
    monkeypatch.setattr(w, "http_targets", list)  # nothing of this machine's is fetched
    monkeypatch.setattr(w, "on_http", lambda *fetch: None)
    monkeypatch.setattr(w, "ticks", lambda: TICKS)
    app = GpumonApp([monitor])
    section = app.dashboard.sections[0]
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        servers = {8000: vllm_trackers.busy(8000, TICKS), 8001: vllm_trackers.wedged(8001, TICKS)}
        w.vllm.update(servers)
        app.dashboard.refresh_dashboard()
        await wait(pilot, lambda: section.vllm.display, what="the vLLM pane")
        lines = section.vllm.plain.splitlines()
        assert lines[0].startswith("vLLM") and "tok/s" in lines[0] and "KV use" in lines[0]
        assert lines[1].split()[:2] == [":8000", "up"]
        assert lines[2].split()[:3] == [":8001", "wedged", "1m05s"]
        view = section.vllm.view
        assert view is not None
        state = view.rows[1].cell("state")
        assert state is not None and state.role is Role.CRITICAL
        assert all(len(line) <= 80 for line in lines)
        assert section.jobs.display  # beside the jobs pane
        assert section.vllm.region.bottom <= 23  # above the footer at 80x24
        assert section.jobs.region.bottom <= 23
