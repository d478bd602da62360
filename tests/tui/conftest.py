"""Fixtures for the dashboard tests: monitors on the simulated CT200 (optionally with a
frozen clock), a private state dir, a way to wait for the app to catch up, and SGLang
trackers fed with the simulator's metrics at fixed times (for stable screenshots)."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual import actions
from textual.pilot import Pilot
from textual.screen import Screen

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.sim import UPTIME_AT_T0, SimSettings, metrics_text
from gpumon.backends.workloads import SglangTracker

from held_demo import HeldDemo
from waiting import until

MonitorFactory = Callable[..., HostMonitor]
SGLANG_PORTS = tuple(range(30000, 30008))


@pytest.fixture(autouse=True)
def _own_state_home(state_home: Path) -> Path:
    """Every test remembers its theme in its own tmp dir (``state_home``, tests/conftest.py)."""
    return state_home


@pytest.fixture
def demo_monitor() -> Iterator[MonitorFactory]:
    """``demo_monitor(frozen=True, fault=None, clock=None, demo_time=30, speed=1,
    scenario="training-oom", held=None)`` -> a monitor on the simulated machine, not
    started (the app starts and stops it). ``speed`` runs the scenario clock faster
    (``--demo-speed``), so a test reaches the OOM sooner; ``held`` (a ``HeldDemo``) holds
    it at ``demo_time`` until the test releases it."""

    def make(
        *,
        frozen: bool = True,
        fault: str | None = None,
        clock: Callable[[], float] | None = None,
        demo_time: float = 30.0,
        speed: float = 1.0,
        interval: float | None = None,
        scenario: str = "training-oom",
        held: HeldDemo | None = None,
    ) -> HostMonitor:
        host = resolve_host(Config(path=None), "demo")
        if interval is not None:
            host = dataclasses.replace(host, interval=interval)
        if held is not None:
            sim = held.settings(demo_time, speed, scenario)
        else:
            sim = demo_settings(scenario, demo_time=demo_time, speed=speed, frozen=frozen)
        if fault:
            sim = dataclasses.replace(sim, fault=fault)
        return make_monitor(host, sim, clock=clock or time.time)

    yield make


@pytest.fixture
def key_actions() -> Callable[[Screen[Any]], set[str]]:
    """``key_actions(screen)``: see ``actions_with_keys``."""
    return actions_with_keys


def actions_with_keys(screen: Screen[Any]) -> set[str]:
    """The actions whose keys ``screen`` shows or greys out (not those it hides or lacks),
    by name: ``app.quit`` is "quit", the detail view's ``dashboard('restart_job')`` is
    "restart_job", ``cursor(1)`` is "cursor"."""
    names = set()
    for active in screen.active_bindings.values():
        _, name, params = actions.parse(active.binding.action)
        if name == "dashboard" and params:
            _, name, _ = actions.parse(str(params[0]))
        names.add(name)
    return names


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unreachable_monitor() -> Callable[[], HostMonitor]:
    """A monitor for an SSH host on 127.0.0.1 at a port where nothing listens."""

    def make() -> HostMonitor:
        host = resolve_host(Config(path=None), f"root@127.0.0.1:{free_port()}")
        return make_monitor(host)

    return make


async def wait_until(
    pilot: Pilot[object] | Pilot[int],
    condition: Callable[[], object],
    timeout: float = 15.0,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Let the app run until ``condition()`` holds; fail the test after ``timeout`` (the
    shared ``until``, pausing with the pilot)."""
    await until(condition, timeout, what, pause=pilot.pause)


@pytest.fixture
def wait() -> Callable[..., Awaitable[None]]:
    """``await wait(pilot, condition, timeout=15, what="...")``."""
    return wait_until


@pytest.fixture
def children() -> Callable[[str], list[int]]:
    """``children(pattern)``: PIDs of this process's children whose command line has it."""
    return child_pids


def child_pids(pattern: str) -> list[int]:
    """PIDs of this test process's children whose command line contains ``pattern``."""
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and pattern in cmdline:
            out.append(int(entry.name))
    return out


def fixed_sglang(
    monitor: HostMonitor, monkeypatch: pytest.MonkeyPatch, *, now: float, scenario_t: float = 30.0
) -> None:
    """Replace ``monitor``'s SGLang trackers with eight on ports 30000-30007 that saw the
    simulator's ``/metrics`` once a second for the 30 s up to ``scenario_t``, the last one
    at ``now``; the live scrapes are ignored from here on. A frozen clock gives the live
    trackers no rates (every scrape at the same instant): these have them, always the same."""
    monkeypatch.setattr(monitor.workloads, "on_http", lambda *fetch: None)
    settings = SimSettings(scenario="sglang")
    trackers = {}
    for index, port in enumerate(SGLANG_PORTS):
        tracker = SglangTracker(port)
        for k in range(31):
            t = scenario_t - 30 + k
            tracker.observe_text(metrics_text(settings, index, t, -UPTIME_AT_T0), now - 30 + k)
        trackers[port] = tracker
    monitor.workloads.sglang.clear()
    monitor.workloads.sglang.update(trackers)


@pytest.fixture
def sglang_fixed() -> Callable[..., None]:
    """``sglang_fixed(monitor, monkeypatch, now=...)``: see ``fixed_sglang``."""
    return fixed_sglang
