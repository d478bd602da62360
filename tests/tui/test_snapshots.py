"""Screenshots of the dashboard, the detail view, the workload panes, the alert strip and
the alert history, compared with the accepted ones in ``__snapshots__/``. The simulator's
clock is frozen (scenario time 30 s, or 70 s: after the OOM) and so is the monitors'
clock; SGLang trackers are fed fixed scrapes; times are shown in UTC. So every run draws
the same screen. Update with ``--snapshot-update`` after looking at the new SVGs."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot

from gpumon.backends.model import HostLoad
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.sim.scenario import JUPYTER_PID
from gpumon.backends.workloads import JobState
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import alerts
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen
from gpumon.tui.views.process_table import TableLine, host_table_lines
from gpumon.tui.widgets import host_section

FROZEN_NOW = 1795962750.0

SnapCompare = Callable[..., bool]


def frozen_clock() -> float:
    return FROZEN_NOW


@pytest.fixture(autouse=True)
def _times_in_utc(utc: None) -> None:
    """Alert times and the replay clock are local times: show them in UTC."""


FIXED_LOAD = HostLoad(
    time=FROZEN_NOW,
    cpu_pct=37.5,
    cpus=64,
    mem_total_kib=528 * 1024 * 1024,
    mem_available_kib=400 * 1024 * 1024,
    swap_total_kib=8 * 1024 * 1024,
    swap_free_kib=8 * 1024 * 1024,
    load=(12.3, 10.1, 9.8),
)


@pytest.fixture(autouse=True)
def _toasts_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """An alert's toast goes after 10 s of real time: on a loaded machine the steps before
    the screenshot (the data, the log, the keys) took longer, and the frame lost it."""
    monkeypatch.setattr(alerts, "CRITICAL_TIMEOUT_S", 3600.0)
    monkeypatch.setattr(alerts, "WARNING_TIMEOUT_S", 3600.0)


@pytest.fixture(autouse=True)
def _fixed_host_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent reads this machine's /proc: the host line shows fixed values instead."""
    monkeypatch.setattr(
        HostMonitor, "ingest_host_load", lambda self, load: setattr(self, "host_load", FIXED_LOAD)
    )


@pytest.fixture(autouse=True)
def _no_process_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's CPU % needs two readings of its /proc stat: the first list has none
    ("-"), the next one (5 s on) "0%" (the simulator's /proc stands still). A machine slow
    to reach the snapshot got the second list first (``test_sglang_scenario_with_its_pane
    [160x50]`` beside a CPU hog, 1 run in 8; reproduced by waiting 12 s): the process
    tables show "-" always."""
    ingest = HostMonitor.ingest_proc_records

    def without_cpu(
        self: HostMonitor, source: str, records: Sequence[Mapping[str, Any]], at: float
    ) -> None:
        ingest(self, source, [{**r, "cpu_pct": None} for r in records], at)

    monkeypatch.setattr(HostMonitor, "ingest_proc_records", without_cpu)


def jobs_reported(monitor: HostMonitor) -> bool:
    """Every job's log has been read up to its latest progress line."""
    return all(j.last_update is not None for j in monitor.workloads.jobs.values())


def wait_for_data(
    detail: bool = False,
    ready: Callable[[HostMonitor], bool] = jobs_reported,
    before: Callable[[HostMonitor], None] | None = None,
    keys: tuple[str, ...] = (),
) -> Callable[[Pilot[int]], Awaitable[None]]:
    """A ``run_before`` that waits for the first sample, the process list (the Proxmox
    host's too: the demo is CT 200) and ``ready``,
    runs ``before(monitor)``, opens the detail view of GPU 6 if asked, presses ``keys``
    and lets the screen settle."""

    async def run_before(pilot: Pilot[int]) -> None:
        app = pilot.app
        assert isinstance(app, GpumonApp)
        monitor = app.monitors[0]
        deadline = time.monotonic() + 20
        while (
            monitor.latest is None
            or monitor.processes_time is None
            or (monitor.host.container is not None and monitor.host_processes_time is None)
            or not ready(monitor)
        ):
            assert time.monotonic() < deadline, "no data from the simulator"
            await pilot.pause(0.05)
        if before is not None:
            before(monitor)
        await pilot.pause(0.3)  # the log's last lines
        app.dashboard.refresh_dashboard()
        await pilot.pause()
        if detail:
            await pilot.press(*["down"] * 6, "enter")
            deadline = time.monotonic() + 10
            screen = app.screen
            assert isinstance(screen, DetailScreen)
            while any(p.builds == 0 for p in screen.plots.values()):
                assert time.monotonic() < deadline, "plots not drawn"
                await pilot.pause(0.05)
        if keys:
            await pilot.press(*keys)
            if "a" in keys:
                screen = app.screen
                assert isinstance(screen, AlertHistoryScreen)
                deadline = time.monotonic() + 10
                while screen.table.row_count == 0:  # the rows land a refresh after mount
                    assert time.monotonic() < deadline, "alert history stayed empty"
                    await pilot.pause(0.05)
                await pilot.pause(0.3)
        await pilot.pause(0.2)

    return run_before


@pytest.mark.parametrize("theme", ["gpumon-dark", "gpumon-light"])
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_dashboard(
    snap_compare: SnapCompare,
    demo_monitor: Callable[..., HostMonitor],
    theme: str,
    size: tuple[int, int],
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)], theme=theme)
    assert snap_compare(app, terminal_size=size, run_before=wait_for_data())


def test_detail_view(snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock)])
    assert snap_compare(app, terminal_size=(80, 24), run_before=wait_for_data(detail=True))


def test_lost_gpu_and_contrast_theme(
    snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]
) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock, fault="gpu_lost:4")], theme="gpumon-contrast")
    assert snap_compare(app, terminal_size=(80, 24), run_before=wait_for_data())


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_sglang_scenario_with_its_pane(
    snap_compare: SnapCompare,
    demo_monitor: Callable[..., HostMonitor],
    sglang_fixed: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    size: tuple[int, int],
) -> None:
    """8 GPU rows owned by their servers, the aggregate line and all 8 server lines."""
    monitor = demo_monitor(clock=frozen_clock, scenario="sglang")
    app = GpumonApp([monitor])

    def fix(m: HostMonitor) -> None:
        sglang_fixed(m, monkeypatch, now=FROZEN_NOW)

    # The servers' command lines name the ports this demo got (30000-30007 only where no
    # other demo holds them): the process table says the fixed trackers' ports instead.
    def fixed_ports(*args: Any, **kwargs: Any) -> list[TableLine]:
        lines = host_table_lines(*args, **kwargs)
        return [
            replace(x, text=re.sub(r"--port \d+", f"--port {30000 + int(x.text[:3])}", x.text))
            if x.process is not None
            else x
            for x in lines
        ]

    monkeypatch.setattr(host_section, "host_table_lines", fixed_ports)
    assert snap_compare(app, terminal_size=size, run_before=wait_for_data(before=fix))


def crashed(monitor: HostMonitor) -> bool:
    """The drafter crashed, and CT 201's jupyter (which outlives it) is seen on GPU 6: the
    OOM's headline names it."""
    job = monitor.workloads.jobs.get("drafter")
    held = any(a.kind == "foreign_process" for a in monitor.alerts.active())
    return job is not None and job.state is JobState.CRASHED and held


def test_training_oom_after_the_oom(
    snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]
) -> None:
    """The drafter crashed of OOM on GPU 6: its row in the jobs pane, its GPUs in red, the
    strip with the CUDA OOM, the jupyter's 6 GiB still on GPU 6 and ``K stop``."""
    app = GpumonApp([demo_monitor(clock=frozen_clock, demo_time=70.0)])
    assert snap_compare(app, terminal_size=(80, 24), run_before=wait_for_data(ready=crashed))


def test_alert_history(snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]) -> None:
    app = GpumonApp([demo_monitor(clock=frozen_clock, demo_time=70.0)])
    run_before = wait_for_data(ready=crashed, keys=("a",))
    assert snap_compare(app, terminal_size=(100, 24), run_before=run_before)


def test_alert_detail(snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]) -> None:
    """Enter on the OOM's row of the history at 80x24: the incident in full (issue 26.3)."""
    app = GpumonApp([demo_monitor(clock=frozen_clock, demo_time=70.0)])
    history = wait_for_data(ready=crashed, keys=("a",))

    async def run_before(pilot: Pilot[int]) -> None:
        await history(pilot)
        await pilot.press("enter")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def jupyter_listed(monitor: HostMonitor) -> bool:
    """The jobs' logs are read and the Proxmox host's list has CT 201's jupyter."""
    return jobs_reported(monitor) and any(p.host_pid == JUPYTER_PID for p in monitor.processes)


def test_expanded_gpu_row_with_a_process_selected(
    snap_compare: SnapCompare, demo_monitor: Callable[..., HostMonitor]
) -> None:
    """GPU 6 expanded (``x``) at 40 s: its memory flag, then the drafter's line and the
    foreign jupyter's, the cursor on the second one (highlighted, ``▶``)."""
    app = GpumonApp([demo_monitor(clock=frozen_clock, demo_time=40.0)])
    keys = (*["down"] * 6, "x", "down", "down")
    settle = wait_for_data(ready=jupyter_listed, keys=keys)

    async def run_before(pilot: Pilot[int]) -> None:
        await settle(pilot)
        app.clear_notifications()  # the foreign_process toast: gone at a time of its own
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
