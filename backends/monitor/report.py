"""Headless views of a monitor: the snapshot JSON (a public contract), the text table,
and the ``check`` verdict with its exit code.

JSON keys are stable and documented in the README; later features add keys to the same
object, never rename. A value the machine did not report is ``null``, never 0.
"""

from __future__ import annotations

import enum
from typing import Any

from gpumon.backends.model import ConnState, GpuProcess, GpuSample, Health, HostSample, iso_time
from gpumon.backends.monitor.processes import container_label, unattributed_mib
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.untrusted import printable


class CheckCode(enum.IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


def gpu_json(gpu: GpuSample, sample: HostSample) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "bus_id": gpu.bus_id,
        "memory_used_mib": gpu.memory_used_mib,
        "memory_total_mib": gpu.memory_total_mib,
        "utilization_pct": gpu.utilization_pct,
        "temperature_c": gpu.temperature_c,
        "power_w": gpu.power_w,
        "power_limit_w": gpu.power_limit_w,
        "health": gpu.health.value,
        "problems": list(gpu.problems),
        "processes": [process_json(p) for p in sample.processes_for(gpu)],
        "memory_unattributed_mib": unattributed_mib(gpu, sample.processes_for(gpu)),
    }


def process_json(p: GpuProcess) -> dict[str, Any]:
    """One process of a GPU's ``processes`` (README: the JSON reference)."""
    return {
        "pid": p.pid,
        "host_pid": p.host_pid,
        "container": p.container,
        "user": p.user,
        "host_user": p.host_user,
        "name": p.name,
        "command": p.command,
        "cpu_pct": p.cpu_pct,
        "rss_mib": p.rss_mib,
        "started": None if p.started is None else iso_time(p.started),
        "memory_mib": p.memory_mib,
        "source": p.source,
        "gpus": list(p.gpus) if p.gpus else None,
    }


def snapshot_json(monitor: HostMonitor, now: float) -> dict[str, Any]:
    """The ``gpumon snapshot --json`` object for one host."""
    sample = monitor.latest
    stale = monitor.stale_s(now)
    return {
        "host": monitor.name,
        "time": iso_time(sample.time if sample else now),
        "source": monitor.status.source.value if monitor.status.source else None,
        "stale_s": None if stale is None else round(stale, 3),
        "error": monitor.status.error,
        "gpus": [gpu_json(g, sample) for g in sample.gpus] if sample else [],
        "alerts": [a.to_json() for a in monitor.alerts.active()],
        "sglang": monitor.workloads.sglang_json(),
        "jobs": monitor.workloads.jobs_json(),
        "logs": monitor.log_flow_json(),
    }


def check_verdict(monitor: HostMonitor, now: float) -> tuple[CheckCode, str]:
    """Exit code and the one summary line of ``gpumon check``."""
    name = monitor.name
    sample = monitor.latest
    if sample is None or monitor.is_stale(now):
        why = monitor.status.error or f"no data ({monitor.status.state.value})"
        return CheckCode.UNKNOWN, f"UNKNOWN {name}: {why}"
    if monitor.status.error and monitor.status.state != ConnState.CONNECTED:
        return CheckCode.UNKNOWN, f"UNKNOWN {name}: {monitor.status.error}"
    alerts = monitor.alerts.active()  # GPU health problems are alerts too
    worst = Health.worst(*(g.health for g in sample.gpus), *(a.severity for a in alerts))
    code = {Health.OK: CheckCode.OK, Health.WARNING: CheckCode.WARNING}.get(
        worst, CheckCode.CRITICAL
    )
    summary = _summary(sample)
    if worst == Health.OK:
        return code, f"OK {name}: {summary}"
    # Who else holds memory is context for the headline, not the headline itself.
    top = sorted(
        (a for a in alerts if a.severity == worst), key=lambda a: a.kind == "foreign_process"
    )
    if top:
        what = top[0].message + (f" (+{len(alerts) - 1} more alerts)" if len(alerts) > 1 else "")
    else:
        sick = [g for g in sample.gpus if g.health == worst]
        what = "; ".join(f"GPU {g.index}: {', '.join(g.problems) or worst.value}" for g in sick)
    return code, f"{code.name} {name}: {what} ({summary})"


def _summary(sample: HostSample) -> str:
    fractions = [(g.memory_used_fraction, g.index) for g in sample.gpus]
    known = [(f, i) for f, i in fractions if f is not None]
    text = f"{len(sample.gpus)} GPUs"
    if known:
        top, idx = max(known)
        text += f", fullest GPU {idx} at {top * 100:.1f}% memory"
    temps = [g.temperature_c for g in sample.gpus if g.temperature_c is not None]
    if temps:
        text += f", hottest {max(temps):.0f} C"
    return text


def fmt(value: float | int | None, spec: str = "", unit: str = "") -> str:
    """A value for humans; ``n/a`` when it was not reported (never 0)."""
    if value is None:
        return "n/a"
    return f"{value:{spec}}{unit}"


def snapshot_table(monitor: HostMonitor, now: float) -> str:
    """The plain-text ``gpumon snapshot`` view."""
    sample = monitor.latest
    status = monitor.status
    stale = monitor.stale_s(now)
    head = (
        f"{monitor.name}  {status.transport}  source {status.source or 'n/a'}  "
        f"{iso_time(sample.time) if sample else 'no data'}"
    )
    if stale is not None and monitor.is_stale(now):
        head += f"  STALE {stale:.0f}s"
    lines = [head]
    if status.error:
        lines.append(f"error: {status.error}")
    if sample is None:
        return "\n".join(lines)
    lines.append(
        f"{'GPU':>3}  {'NAME':<44}  {'MEMORY MiB':>17} {'MEM%':>6}  {'UTIL':>5}  {'TEMP':>5}"
        f"  {'POWER W':>11}  HEALTH"
    )
    for g in sample.gpus:
        frac = g.memory_used_fraction
        mem = f"{fmt(g.memory_used_mib)}/{fmt(g.memory_total_mib)}"
        power = f"{fmt(g.power_w, '.0f')}/{fmt(g.power_limit_w, '.0f')}"
        health = g.health.value + (f" ({'; '.join(g.problems)})" if g.problems else "")
        lines.append(
            f"{g.index:>3}  {(g.name or 'n/a')[:44]:<44}  {mem:>17} "
            f"{fmt(None if frac is None else frac * 100, '.1f', '%'):>6}  "
            f"{fmt(g.utilization_pct, '.0f', '%'):>5}  {fmt(g.temperature_c, '.0f', 'C'):>5}"
            f"  {power:>11}  {health}"
        )
    procs = [(g.index, p) for g in sample.gpus for p in sample.processes_for(g)]
    if procs:
        lines.append("")
        lines.append(
            f"{'GPU':>3}  {'WHERE':<7} {'PID':>8} {'HOST PID':>9} {'USER':<8} "
            f"{'MEMORY MiB':>10}  PROCESS"
        )
        for idx, p in procs:
            name = printable(p.command or p.name or "[not visible from here]")
            where = container_label(p.container) if p.source == "host" else p.source
            lines.append(
                f"{idx:>3}  {where[:7]:<7} {fmt(p.pid):>8} {fmt(p.host_pid):>9} "
                f"{printable(p.user or '-')[:8]:<8} {fmt(p.memory_mib):>10}  {name}"
            )
    return "\n".join(lines)
