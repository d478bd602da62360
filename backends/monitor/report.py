"""Headless views of a monitor: the snapshot JSON (a public contract), the text table,
and the ``check`` verdict with its exit code.

JSON keys are stable and documented in docs/json.md; later features add keys to the same
object, never rename. A value the machine did not report is ``null``, never 0.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpumon.backends.alerts.health import facts_json
from gpumon.backends.alerts.incident import Incident, command_fix, incidents, line
from gpumon.backends.model import (
    MIG_NO_UTILIZATION,
    MIG_NOT_AVAILABLE,
    CheckCode,
    ConnState,
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    MigInstance,
    iso_time,
)
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.monitor.textfit import cells, cut, fit_lines, wrap, wrap_pairs
from gpumon.backends.parsers.processes import (
    SHARE_NOTE,
    index_ranges,
    process_columns,
    unattributed_mib,
)
from gpumon.backends.untrusted import printable

if TYPE_CHECKING:
    from gpumon.backends.monitor.perfdata import Perf


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
        "health_facts": facts_json(gpu),
        "processes": [process_json(p) for p in sample.processes_for(gpu)],
        "memory_unattributed_mib": unattributed_mib(sample, gpu),
        "minor": gpu.minor,
        "mig": mig_json(gpu, sample),
    }


def mig_json(gpu: GpuSample, sample: HostSample) -> dict[str, Any] | None:
    """A GPU's ``mig`` (docs/json.md): None when it is not in MIG mode; else its GPU
    instances, each with its own memory and processes, or why there are none."""
    instances = sample.mig_instances(gpu)
    if instances is None:
        return None
    return {
        "instances": [instance_json(i, sample) for i in instances],
        "error": None if instances else MIG_NOT_AVAILABLE,
        "utilization": MIG_NO_UTILIZATION,
    }


def instance_json(inst: MigInstance, sample: HostSample) -> dict[str, Any]:
    """One GPU instance of a GPU's ``mig.instances`` (docs/json.md)."""
    return {
        "gpu_instance_id": inst.gpu_instance_id,
        "profile": inst.profile,
        "memory_used_mib": inst.memory_used_mib,
        "memory_total_mib": inst.memory_total_mib,
        "memory_free_mib": inst.memory_free_mib,
        "sm_count": inst.sm_count,
        "utilization_pct": inst.utilization_pct,
        "devices": [
            {
                "index": d.index,
                "compute_instance_id": d.compute_instance_id,
                "uuid": d.uuid,
                "profile": d.profile,
            }
            for d in inst.devices
        ],
        "processes": [process_json(p) for p in sample.instance_processes(inst)],
    }


def process_json(p: GpuProcess) -> dict[str, Any]:
    """One process of a GPU's ``processes`` (docs/json.md)."""
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
        "sm_pct": p.sm_pct,
        "mem_bw_pct": p.mem_bw_pct,
        "ppid": p.ppid,
        "parent": p.parent,
        "source": p.source,
        "gpus": list(p.gpus) if p.gpus else None,
        "minors": list(p.minors) if p.minors else None,
    }


def snapshot_json(
    monitor: HostMonitor, now: float, incomplete: Sequence[str] = ()
) -> dict[str, Any]:
    """The ``gpumon snapshot --json`` object for one host; ``incomplete``: the sources
    that did not answer in time, in words (``"host processes: no answer in 10 s"``)."""
    sample = monitor.latest
    stale = monitor.stale_s()
    return {
        "host": monitor.name,
        "time": iso_time(sample.time if sample else now),
        "source": monitor.status.source.value if monitor.status.source else None,
        "stale_s": None if stale is None else round(stale, 3),
        "error": monitor.status.error,
        "gpus": [gpu_json(g, sample) for g in sample.gpus] if sample else [],
        "alerts": [a.to_json() for a in monitor.alerts.active()],
        "sglang": monitor.workloads.sglang_json(),
        "vllm": monitor.workloads.vllm_json(),
        "jobs": monitor.workloads.jobs_json(),
        "logs": monitor.log_flow_json(),
        "incomplete": list(incomplete),
        "incidents": [incident_json(i) for i in active_incidents(monitor)],
        "unreadable_gpus": [g.to_json() for g in sample.unreadable] if sample else [],
        "notes": [{"time": iso_time(t), "text": text} for t, text in monitor.alerts.notes()],
    }


def incident_json(incident: Incident) -> dict[str, Any]:
    """One incident of the snapshot's ``incidents`` (docs/json.md): the
    headline and the fix as ``check`` and the dashboard say them, the cause and the
    evidence alerts by kind, key and message (the full alerts are in ``alerts``)."""
    said = command_fix(incident)
    return {
        "headline": incident.headline,
        "severity": incident.severity.value,
        "kind": incident.cause.kind,
        "key": incident.cause.key,
        "gpu": incident.gpu,
        "job": incident.job,
        "time": iso_time(incident.time),
        "message": incident.cause.message,
        "fix": None if said is None else said.removeprefix("fix: "),
        "fixes": [f.to_json() for f in incident.fixes],
        "evidence": [
            {
                "kind": a.kind,
                "key": a.key,
                "severity": a.severity.value,
                "gpu": a.gpu,
                "active": a.active,
                "message": a.message,
            }
            for a in incident.evidence
        ],
    }


def active_incidents(monitor: HostMonitor) -> list[Incident]:
    """The host's active alerts as incidents, the most urgent first; ``fix`` only for jobs
    the config can restart (a ``start`` command)."""
    return incidents(monitor.alerts.active(), restartable=_restartable(monitor))


def known_incidents(monitor: HostMonitor) -> list[Incident]:
    """``active_incidents`` of the alert history (active or ended), the most urgent first."""
    return incidents(monitor.alerts.history(), restartable=_restartable(monitor))


def _restartable(monitor: HostMonitor) -> set[str]:
    return {job.name for job in monitor.host.jobs if job.start}


def restart_hint(monitor: HostMonitor, incident: Incident) -> str | None:
    """ "fix: gpumon restart HOST JOB" for an incident a restart fixes (the incident's best
    fix as a command, ``command_fix``), else None."""
    return command_fix(incident)


def check_verdict(
    monitor: HostMonitor, incomplete: Sequence[str] = (), *, unjudged: str | None = None
) -> tuple[CheckCode, str]:
    """Exit code and the one summary line of ``gpumon check``: the most urgent incident's
    headline first (physical GPU, job, the fix), then the host's summary, then the
    sources that did not answer in time (``incomplete``: the verdict is without them),
    then ``|`` and the performance data (``perfdata``; none when UNKNOWN: stale data is
    no measurement). ``unjudged``: why a rule could not look (too few samples for
    time-to-full): an OK is then UNKNOWN with it, as the Nagios plugin guidelines have a
    plugin that could not check the service say (OK means it could, and all is well); a
    WARNING or CRITICAL stands, with it said. A
    driver that says why no data comes ("GPU is lost") is CRITICAL with its words, data or
    not; a host that cannot be judged (unreachable, no data) is UNKNOWN with the reason."""
    code, text = _verdict(monitor)
    if unjudged is not None and code == CheckCode.OK and monitor.latest is not None:
        summary = _summary(monitor.latest)
        code, text = CheckCode.UNKNOWN, f"UNKNOWN {monitor.name}: {unjudged} ({summary})"
    elif unjudged is not None and code != CheckCode.UNKNOWN:
        text += f" [{unjudged}]"
    if incomplete and code != CheckCode.UNKNOWN:
        text += f" [incomplete: {'; '.join(incomplete)}]"
    # Nagios reads the performance data from the first "|": one in a message from the
    # target (a log line) must not start it, so it is escaped as untrusted text is.
    text = text.replace("|", "\\x7c")
    # UNKNOWN: stale or no data, nothing measured now to graph. Only `check` prints
    # performance data: a snapshot does not build perfdata's class (issue 41).
    from gpumon.backends.monitor.perfdata import perf_text

    perf = "" if code == CheckCode.UNKNOWN else perf_text(_perfdata(monitor))
    return code, f"{text} | {perf}" if perf else text


def _perfdata(monitor: HostMonitor) -> list[Perf]:
    """The check's performance data; none without a sample (nothing was measured)."""
    from gpumon.backends.monitor.perfdata import check_perfdata

    sample = monitor.latest
    if sample is None:
        return []
    engine = monitor.alerts
    ttfs = [engine.time_to_full(g.index) for g in sample.gpus]
    ttfs += [t for g in sample.gpus for t in engine.instance_times_to_full(g.index).values()]
    known = [t for t in ttfs if t is not None]
    rules = engine.rules
    return check_perfdata(
        sample,
        engine.active(),
        memory_warning_pct=rules.memory_warning_pct,
        memory_critical_pct=rules.memory_critical_pct,
        time_to_full_s=min(known) if known else None,
        ttf_horizon_s=rules.ttf_horizon_s,
    )


def _verdict(monitor: HostMonitor) -> tuple[CheckCode, str]:
    name = monitor.name
    sample = monitor.latest
    # GPU health problems are alerts too; a note (a server without traffic) is no problem
    found = [i for i in active_incidents(monitor) if i.severity.alarming]
    # Who else holds memory is context for the headline, not the headline itself.
    found.sort(key=lambda i: (-i.severity.rank, i.cause.kind == "foreign_process"))
    fatal = [i for i in found if i.cause.kind == "driver_error"]
    driver = monitor.driver_failure()
    if fatal or driver is not None:  # it explains every other incident: it leads
        found = fatal + [i for i in found if i not in fatal]
        # Before its alert is raised (a short check) the alert's words all the same.
        what = _headlines(monitor, found) if fatal or driver is None else driver.message
        tail = f" ({_summary(sample)})" if sample is not None else ""
        return CheckCode.CRITICAL, f"CRITICAL {name}: {what}{tail}"
    stale = [i for i in found if i.cause.kind == "stale_data"]
    if sample is None or (monitor.is_stale() and not stale):
        why = monitor.status.error or f"no data ({monitor.status.state.value})"
        return CheckCode.UNKNOWN, f"UNKNOWN {name}: {why}"
    if monitor.status.error and monitor.status.state != ConnState.CONNECTED:
        return CheckCode.UNKNOWN, f"UNKNOWN {name}: {monitor.status.error}"
    worst = Health.worst(*(g.health for g in sample.gpus), *(i.severity for i in found))
    code = worst.check_code
    summary = _summary(sample)
    if code is CheckCode.OK:
        return code, f"OK {name}: {summary}"
    if found:
        what = _headlines(monitor, found)
    else:
        sick = [g for g in sample.gpus if g.health == worst]
        what = "; ".join(f"GPU {g.index}: {', '.join(g.problems) or worst.value}" for g in sick)
    return code, f"{code.name} {name}: {what} ({summary})"


def _headlines(monitor: HostMonitor, found: list[Incident]) -> str:
    """The first incident's line (and fix), then how much more there is."""
    top = found[0]
    what = line(top, restart_hint(monitor, top))
    extra = [f"{len(top.evidence)} evidence"] if top.evidence else []
    if len(found) > 1:
        extra.append(f"+{len(found) - 1} more incident{'s' if len(found) > 2 else ''}")
    if extra:
        what += f" ({', '.join(extra)})"
    return what


def _summary(sample: HostSample) -> str:
    known = sample.memory_fills()
    # every GPU listed counts: one that cannot be read is never left out of the number
    text = f"{len(sample.gpus) + len(sample.unreadable)} GPUs"
    if sample.unreadable:
        text += f" ({len(sample.unreadable)} unreadable)"
    if known:
        # the fullest; of equals the last listed, as GPUs were compared by (fill, index)
        _, (top, whose) = max(enumerate(known), key=lambda k: (k[1][0], k[0]))
        text += f", fullest {whose} at {top * 100:.1f}% memory"
    temps = [g.temperature_c for g in sample.gpus if g.temperature_c is not None]
    if temps:
        text += f", hottest {max(temps):.0f} C"
    return text


def fmt(value: float | int | None, spec: str = "", unit: str = "") -> str:
    """A value for humans; ``n/a`` when it was not reported (never 0)."""
    if value is None:
        return "n/a"
    return f"{value:{spec}}{unit}"


TEXT_WIDTH = 80  # columns of the text snapshot; None (``--wide``): as long as it takes
ALERT_MESSAGE_LINES = 3  # an alert's message in the text snapshot: the rest is in --json
GPU_HEADER = (
    f"{'GPU':>3}  {'MEMORY GiB':>11} {'MEM%':>6} {'UTIL':>4} {'TEMP':>4} {'POWER W':>9}  HEALTH"
)
HEALTH_AT = GPU_HEADER.index("HEALTH")  # where the GPU table's HEALTH column starts
HEALTH_LINES = 3  # a HEALTH cell's lines at most: its incidents are whole under ALERTS


def snapshot_table(
    monitor: HostMonitor,
    incomplete: Sequence[str] = (),
    width: int | None = TEXT_WIDTH,
) -> str:
    """The plain-text ``gpumon snapshot`` view in ``width`` columns (None: no limit, the
    commands and messages whole): the header with the GPU model, the GPU table, the
    processes as the dashboard says them (``process_columns``), ALERTS, JOBS, SGLANG and
    LOGS. ``incomplete`` is one line under the header (the sources that did not answer in
    time). Long commands are cut with ``…``, long messages wrapped."""
    sample = monitor.latest
    status = monitor.status
    stale = monitor.stale_s()
    head = f"{monitor.name}  {status.transport}  {iso_time(sample.time) if sample else 'no data'}"
    if stale is not None and monitor.is_stale():
        head += f"  STALE {stale:.0f}s"
    lines = [head]
    about = f"source {status.source or 'n/a'}"
    if sample is not None and sample.gpus:
        about += f"  {gpu_models(sample.gpus)}"
    lines += wrap(about, width, indent=2)
    if status.error:
        lines += wrap(f"error: {printable(status.error)}", width, indent=2)
    if incomplete:
        lines += wrap(f"incomplete: {'; '.join(incomplete)}", width, indent=2)
    if sample is None:
        return "\n".join(fit_lines(lines, width))
    found = active_incidents(monitor)
    jobs = monitor.workloads.jobs_json()
    lines += _gpu_lines(sample, found, jobs, width)
    lines += _process_lines(sample, monitor.host.container, width)
    lines += _alert_lines(monitor, found, width)
    lines += _note_lines(monitor, width)
    for title, objects in (
        ("JOBS", jobs),
        ("SGLANG", monitor.workloads.sglang_json()),
        ("VLLM", monitor.workloads.vllm_json()),
        ("LOGS", monitor.log_flow_json()),
    ):
        if objects:
            lines += ["", title]
            for o in objects:
                lines += wrap_pairs(_object_pairs(o), width, lead=2, indent=4)
    return "\n".join(fit_lines(lines, width))


def gpu_models(gpus: Sequence[GpuSample]) -> str:
    """The GPUs' model once, not on every row: "8 x NVIDIA H200", or by GPU where they
    differ ("GPU 0-3 NVIDIA A100, GPU 4-7 NVIDIA H100"); "n/a" for a name not reported."""
    by_name: dict[str, list[int]] = {}
    for g in gpus:
        by_name.setdefault(printable(g.name or "n/a"), []).append(g.index)
    if len(by_name) == 1:
        name = next(iter(by_name))
        return f"{len(gpus)} x {name}"
    return ", ".join(f"GPU {index_ranges(idx)} {name}" for name, idx in by_name.items())


def _gpu_lines(
    sample: HostSample, found: list[Incident], jobs: list[dict[str, Any]], width: int | None
) -> list[str]:
    """The GPU table; a HEALTH cell too long for the line goes on under its column."""
    out = [GPU_HEADER]
    room = None if width is None else width - HEALTH_AT
    for g in sample.gpus:  # 143.8/143.8: an H200's 11 columns
        instances = sample.mig_instances(g)
        frac = g.memory_used_fraction
        mem = f"{_gib(g.memory_used_mib)}/{_gib(g.memory_total_mib)}"
        pct = fmt(None if frac is None else frac * 100, ".1f", "%")
        if instances is not None:  # the slices' memory, never the whole GPU's as one
            mem, pct = "MIG", "-"
        power = f"{fmt(g.power_w, '.0f')}/{fmt(g.power_limit_w, '.0f')}"
        row = (
            f"{g.index:>3}  {mem:>11} {pct:>6} "
            f"{fmt(g.utilization_pct, '.0f', '%'):>4} {fmt(g.temperature_c, '.0f', 'C'):>4} "
            f"{power:>9}  "
        )
        said = gpu_health_text(g, found, jobs)
        if instances == ():
            said += f" ({MIG_NOT_AVAILABLE})"
        health = wrap(said, room, max_lines=HEALTH_LINES)
        out.append(row.ljust(HEALTH_AT) + health[0])
        out += [" " * HEALTH_AT + rest for rest in health[1:]]
        for inst in instances or ():
            frac = inst.memory_used_fraction
            mem = f"{_gib(inst.memory_used_mib)}/{_gib(inst.memory_total_mib)}"
            pct = fmt(None if frac is None else frac * 100, ".1f", "%")
            row = f"{'':>3}  {mem:>11} {pct:>6} {'n/a':>4}"
            out.append(row.ljust(HEALTH_AT) + inst.name)
    return out


def _process_lines(sample: HostSample, watched: int | None, width: int | None) -> list[str]:
    """The processes, in the dashboard's words (``process_columns``: ``CT200 861 root``),
    the command cut with ``…`` to the line."""
    procs = [(g.index, p) for g in sample.gpus for p in sample.processes_for(g)]
    if not procs:
        return []
    out = [
        "",
        f"{'GPU':>3}  {'WHERE':<8} {'PID':<8} {'USER':<8} {'GiB':>6} {'SM~':>4} {'BW~':>4}"
        "  COMMAND",
    ]
    for idx, p in procs:
        said = process_columns(p, watched)
        row = (
            f"{idx:>3}  {cut(said.where, 8):<8} {cut(said.pid, 8):<8} "
            f"{cut(said.user, 8):<8} {_gib(p.memory_mib):>6} {said.sm:>4} {said.bw:>4}  "
        )
        on = [i.name for i in sample.mig if i.holds(p) and i.gpu_uuid == p.gpu_uuid]
        command = f"[{on[0]}] {said.command}" if on else said.command
        out.append(row + cut(command, None if width is None else width - len(row)))
    if any(p.sm_pct is not None for _, p in procs):
        out.append(f"  {SHARE_NOTE}")
    return out


def _gib(mib: float | None) -> str:
    """GiB with one decimal, as on the dashboard; n/a when not reported (never 0)."""
    return "n/a" if mib is None else f"{mib / 1024:.1f}"


def gpu_health_text(gpu: GpuSample, found: list[Incident], jobs: list[dict[str, Any]]) -> str:
    """The HEALTH cell: the worst of the GPU's own health, the active alerts on it and the
    state of the job on it (a crashed job's GPUs are not ``ok``), with the reason."""
    levels = [gpu.health]
    reasons = list(gpu.problems)
    told: set[object] = set()  # jobs an incident's headline already names
    for incident in found:
        on_it = [a for a in incident.alerts if a.active and a.gpu == gpu.index]
        if on_it:
            levels.append(Health.worst(*(a.severity for a in on_it)))
            reasons.append(incident.headline)
            told.add(incident.job)
    for job in jobs:
        crashed = job.get("state") == "crashed" and job.get("name") not in told
        if crashed and gpu.index in (job.get("gpus") or ()):
            levels.append(Health.CRITICAL)
            why = job.get("crash_reason")
            reasons.append(f"job {job.get('name')} crashed" + (f": {why}" if why else ""))
    worst = Health.worst(*levels)
    unique = list(dict.fromkeys(printable(r) for r in reasons))
    return worst.value + (f" ({'; '.join(unique)})" if unique else "")


def _alert_lines(monitor: HostMonitor, found: list[Incident], width: int | None) -> list[str]:
    """The ALERTS section: each incident's headline and its fix (on the next line when
    both do not fit), then its active alerts as the JSON has them: severity, kind, GPU,
    job, time, then the message (wrapped, at most ``ALERT_MESSAGE_LINES`` lines)."""
    if not found:
        return ["", "ALERTS  none"]
    out = ["", "ALERTS"]
    for incident in found:
        hint = restart_hint(monitor, incident)
        lead = f"  {incident.severity.value.upper()}  "
        whole = lead + printable(line(incident, hint))
        if width is None or cells(whole) <= width:
            out.append(whole)
        else:
            out += wrap(lead + printable(incident.headline), width, indent=len(lead))
            if hint and incident.fix is not None:
                out += wrap(hint, width, indent=len(lead), lead=len(lead))
        for a in incident.alerts:
            if not a.active:
                continue
            data = a.to_json()
            gpu = "-" if a.gpu is None else str(a.gpu)
            meta = (
                f"    {data['severity']:<8} {data['kind']:<15} GPU {gpu:<2} "
                f"{cut(printable(a.job or '-'), 12):<12} {data['time']}"
            )
            message = printable(a.message)
            if a is incident.cause and incident.said.verbatim:
                out.append(meta)  # the headline above says it all
                continue
            if width is None:
                out.append(f"{meta}  {message}")
                continue
            out.append(meta)
            out += wrap(message, width, indent=6, max_lines=ALERT_MESSAGE_LINES, lead=6)
    return out


def _note_lines(monitor: HostMonitor, width: int | None) -> list[str]:
    """The NOTES section: what gpumon could not see or did about it, said once each by the
    agent or the monitor ("kernel log not readable here ...: Xid and host OOM-killer lines
    need gpumon on the Proxmox host itself"), oldest first; nothing when none."""
    notes = monitor.alerts.notes()
    if not notes:
        return []
    out = ["", "NOTES"]
    for t, text in notes:
        stamp = time.strftime("%H:%M:%S", time.localtime(t))
        out += wrap(f"  {stamp}  {printable(text)}", width, indent=12)
    return out


def _object_pairs(data: dict[str, Any]) -> list[str]:
    """A snapshot JSON object as ``key value`` pairs, in the JSON's order: ``n/a`` for
    null, lists comma-separated."""
    parts = []
    for key, value in data.items():
        if value is None:
            text = "n/a"
        elif isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, list | tuple):
            text = ",".join(str(v) for v in value) or "-"
        else:
            text = str(value)
        parts.append(f"{key} {printable(text)}")
    return parts
