"""The runtime (``backends/runtime.py``, issue 35 point 4): the dashboard and ``gpumon
watch`` wire a monitor to the hub and the session alike, every part listens to a monitor
once however often it is asked for (before or after the monitor started), closing a
monitor unwires it from each, and a one-shot never makes the simulator's settings for a
real host. In process: the monitors' source feeds nothing by itself (the test raises the
alerts)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from gpumon.backends.config import HostConfig
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.runtime import Runtime
from gpumon.backends.sim import SimSettings

from quiet_source import Quiet


async def never(seconds: float) -> None:
    await asyncio.Event().wait()  # the watchdog's sleep: the test judges nothing by time


def quiet_monitor(name: str = "box") -> HostMonitor:
    host = HostConfig(name=name, kind="local", kernel_log=False)
    return HostMonitor(host, Quiet(), sleep=never, record=False)


def settings(**kw: Any) -> NotifySettings:
    hook = NotifierConfig(name="hook", kind="webhook", url="http://127.0.0.1:9/hook")
    return NotifySettings(notifiers={"hook": hook}, **kw)


def wiring(runtime: Runtime, monitor: HostMonitor) -> dict[str, object]:
    """How the runtime's session and hub listen to ``monitor``."""
    hub, session = runtime.hub, runtime.session
    assert hub is not None
    return {
        "monitor listeners": len(monitor.listeners),
        "alert listeners": len(monitor.alerts._listeners),
        "job watches": sum(w.monitor is monitor for w in session.watches),
        "in the hub": hub.monitors.count(monitor),
        "run listeners": len(session.runs.finished),
        "the hub asks the session": hub.tracker.restarting == session.restarting,
    }


async def test_the_dashboard_and_the_watch_wire_a_monitor_to_hub_and_session_alike(
    tmp_path: Path,
) -> None:
    dashboard = Runtime.for_dashboard([], notify=settings(dashboard_delivery="always"))
    watch = Runtime.for_watch([], settings(metrics_port=0), outbox=tmp_path / "outbox.sqlite3")
    seen = []
    for runtime in (dashboard, watch):
        monitor = runtime.adopt(quiet_monitor())
        runtime.session  # noqa: B018 (the dashboard asks for it when it makes its screen)
        runtime.start_monitors()
        seen.append(wiring(runtime, monitor))
        await runtime.stop()
    assert (
        seen[0]
        == seen[1]
        == {
            "monitor listeners": 2,  # the hub's and the accounting's
            "alert listeners": 0,  # no auto-restart job
            "job watches": 1,
            "in the hub": 1,
            "run listeners": 2,  # the job watch's and the hub's (what gpumon did)
            "the hub asks the session": True,
        }
    )


def ooms_exported(runtime: Runtime) -> list[str]:
    assert runtime.metrics is not None
    text = generate_latest(runtime.metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("gpumon_oom_events_total{")]


async def test_each_part_listens_to_a_monitor_once_however_often_it_is_asked(
    tmp_path: Path,
) -> None:
    runtime = Runtime()
    monitor = runtime.adopt(quiet_monitor())
    runtime.start_monitor(monitor)  # no part asked for yet: nothing listens
    assert (len(monitor.listeners), len(monitor.alerts._listeners)) == (0, 0)
    # asked for after the start, some twice; the monitor started twice more
    runtime.session  # noqa: B018
    runtime.deliver(settings(), outbox=tmp_path / "outbox.sqlite3")
    runtime.export(0)
    runtime.account(tmp_path / "usage.sqlite3")
    runtime.account(tmp_path / "usage.sqlite3")
    runtime.session  # noqa: B018
    runtime.start_monitor(monitor)
    runtime.start_monitors()
    assert wiring(runtime, monitor) == {
        "monitor listeners": 2,  # the hub's and the accounting's
        "alert listeners": 1,  # the OOM counter's
        "job watches": 1,
        "in the hub": 1,
        "run listeners": 2,
        "the hub asks the session": True,
    }
    monitor.alerts.raise_alert("cuda_oom", Health.CRITICAL, "CUDA OOM on GPU 6", gpu=6, key="o")
    [counted] = ooms_exported(runtime)
    assert counted.endswith(" 1.0")  # one OOM, counted once
    await runtime.close_monitor(monitor)  # unwired from every part
    assert (len(monitor.listeners), len(monitor.alerts._listeners)) == (0, 0)
    assert runtime.session.watches == [] and runtime.monitors == []
    assert runtime.hub is not None and runtime.hub.monitors == []
    await runtime.stop()


async def test_a_start_after_the_stop_starts_nothing(tmp_path: Path) -> None:
    runtime = Runtime()
    runtime.deliver(settings(), outbox=tmp_path / "outbox.sqlite3")
    monitor = runtime.adopt(quiet_monitor())
    await runtime.stop()  # the app quit before its start task ran
    await runtime.start()
    assert monitor.status.state.value == "stopped"
    assert runtime.hub is not None and runtime.hub.monitors == []


def test_the_simulators_settings_are_made_for_the_demo_host_alone() -> None:
    made: list[SimSettings] = []

    def make() -> SimSettings:
        made.append(SimSettings(scenario="idle"))
        return made[-1]

    runtime = Runtime(sim=make)
    assert runtime.sim_for(HostConfig(name="box", kind="local")) is None
    assert runtime.sim_for(HostConfig(name="box", kind="ssh", ssh_host="box")) is None
    assert made == []  # a one-shot on a real host never imports the simulator
    demo = HostConfig(name="demo", kind="demo")
    assert runtime.sim_for(demo) is runtime.sim_for(demo) is made[0]
    assert len(made) == 1


def test_the_runtime_makes_hosts_read_only_and_sets_their_interval() -> None:
    host = HostConfig(name="box", kind="local")
    assert Runtime().host(host) == host
    assert Runtime(read_only=True, interval=0.5).host(host) == HostConfig(
        name="box", kind="local", read_only=True, interval=0.5
    )
