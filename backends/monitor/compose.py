"""The composition root: the transport, source and monitor for a resolved host, the one
place that picks SSH, local or the simulator; and the monitor a replay plays into (the
sources never build a monitor: ``state`` imports them)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig, SglangConfig, VllmConfig
from gpumon.backends.monitor.sources.agent import AgentSource
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.transport.base import Transport
from gpumon.backends.transport.local import LocalTransport

if TYPE_CHECKING:
    from gpumon.backends.monitor.sources.replay import ReplaySource
    from gpumon.backends.sim.scenario import SimSettings


def demo_settings(
    scenario: str = "training-oom",
    *,
    seed: int = 0,
    speed: float = 1.0,
    demo_time: float = 0.0,
    frozen: bool = False,
    now: float | None = None,
    hold: str | None = None,
) -> SimSettings:
    """Simulator settings whose scenario clock reads ``demo_time`` now and runs at ``speed``;
    with ``hold`` (a file) it stays at ``demo_time`` until that file exists."""
    from gpumon.backends.sim.scenario import SimSettings

    now = time.time() if now is None else now
    return SimSettings(
        scenario=scenario,
        seed=seed,
        speed=speed,
        t0=now - demo_time / speed,
        frozen_at=demo_time if frozen else None,
        # absolute: the simulator's processes do not share gpumon's working directory
        hold_file=None if hold is None else os.path.abspath(hold),
        hold_at=None if hold is None else demo_time,
    )


def target_host(host: HostConfig) -> HostConfig:
    """``host`` as gpumon reaches it: the simulated machine runs on gpumon's own Python,
    and it is CT 200 on a (simulated) Proxmox host."""
    if host.kind == "demo" and host.python is None:
        host = replace(host, python=sys.executable)
    if host.kind == "demo" and host.container is None:
        from gpumon.backends.sim.scenario import CONTAINER

        host = replace(host, container=CONTAINER)
    return host


def make_transport(host: HostConfig, sim: SimSettings | None = None) -> Transport:
    """The transport for ``host`` (its ``host`` is ``target_host(host)``); ``sim`` applies
    to the built-in ``demo`` host only."""
    host = target_host(host)
    if host.kind == "demo":
        from gpumon.backends.sim.transport import SimTransport

        return SimTransport(host, sim if sim is not None else demo_settings())
    if host.kind == "local":
        return LocalTransport(host)
    from gpumon.backends.transport.ssh import SshTransport

    return SshTransport(host)


def make_monitor(
    host: HostConfig,
    sim: SimSettings | None = None,
    *,
    reconnect: bool = True,
    clock: Callable[[], float] = time.time,
    record: bool = True,
    past_s: float | None = None,
    one_shot: bool = False,
) -> HostMonitor:
    """A monitor for ``host`` fed by gpumon's agent over its transport (not started).

    ``clock`` is the monitor's notion of now (tests freeze it for stable screenshots);
    ``record=False``: no flight recordings; ``one_shot``: a one-shot command's monitor,
    which records an incident once across its runs (``HostMonitor``). ``past_s``: for the
    demo, the scenario's last ``past_s`` seconds are fed before the first live sample, as
    if watched (``gpumon bundle --demo-time 70``: the recording and the peak of an OOM
    before the start). For ``demo`` in training-oom, ``monitor.host`` has the job
    ``drafter`` (the host passed in does not): look jobs up on the monitor's host.
    Nothing here acts on jobs: an ``actions.Session`` watches the monitor for that.
    """
    transport = make_transport(host, sim)
    host = transport.host
    if host.kind == "demo":
        from gpumon.backends.sim.transport import SimTransport

        # training-oom: the simulated drafter is a job gpumon can restart (`r`, `gpumon
        # restart demo drafter`); the monitor's host carries it.
        if isinstance(transport, SimTransport):
            job = transport.drafter_job()
            if job is not None and host.job(job.name) is None:
                host = replace(host, jobs=(*host.jobs, job))
            if host.sglang is None:  # sglang: the simulated servers, one per GPU;
                # training-oom: none, and no discovery (it would look at this machine)
                config = transport.sglang_config() or SglangConfig(discover=False)
                host = replace(host, sglang=config)
            if host.vllm is None:  # vllm: its two servers; else none, and no discovery
                host = replace(host, vllm=transport.vllm_config() or VllmConfig(discover=False))
            if transport.settings.scenario == "idle":
                host = _idle_demo(host)
            transport.host = host
    source = AgentSource(transport, reconnect=reconnect)
    monitor = HostMonitor(host, source, clock=clock, record=record, one_shot=one_shot)
    if host.kind == "demo" and isinstance(transport, SimTransport):
        settings = transport.settings
        idle = settings.scenario == "idle"
        if (idle or past_s) and settings.frozen_at is None:
            from gpumon.backends.sim.past import past_samples

            # The last 10 min (or the rule's window and a margin): how long it has been
            # idle is said as a dashboard watching since then would.
            seconds = max(host.alerts.idle_held_after_s + 10.0, 600.0) if idle else 0.0
            seconds = max(seconds, past_s or 0.0)
            monitor.past = partial(
                past_samples, settings, host.name, seconds=seconds, interval=host.interval
            )
    return monitor


def _idle_demo(host: HostConfig) -> HostConfig:
    """The ``idle`` scenario's demo host: the drafter's GPUs are a job (one incident for
    them), and ``idle_held_after_s`` left at its default is the demo's compressed
    ``DEMO_IDLE_HELD_AFTER_S`` (the story plays in minutes, not hours)."""
    from gpumon.backends.alerts.rules import IDLE_HELD_AFTER_S
    from gpumon.backends.sim.scenario import DEMO_IDLE_HELD_AFTER_S, DRAFTER_GPUS

    if host.job("drafter") is None:
        host = replace(host, jobs=(*host.jobs, JobConfig(name="drafter", gpus=DRAFTER_GPUS)))
    if host.alerts.idle_held_after_s == IDLE_HELD_AFTER_S:
        host = replace(host, alerts=replace(host.alerts, idle_held_after_s=DEMO_IDLE_HELD_AFTER_S))
    return host


def replay_monitor(source: ReplaySource) -> HostMonitor:
    """The monitor a replay plays into (not started), on the recording's clock; replaying
    an incident does not record it again."""
    monitor = HostMonitor(source.host, source, clock=source.clock, record=False)
    source.bind(monitor)
    source.on_rewind = monitor.clear_state
    return monitor
