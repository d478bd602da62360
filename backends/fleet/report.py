"""The fleet without a terminal: ``gpumon fleet NAME --json`` and ``--check``.

JSON keys (stable, in docs/fleet.md): one object per node under ``nodes``, worst first.
``--check`` is a Nagios plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (Prometheus
unreachable, a query failed, or no node at all), one summary line.
"""

from __future__ import annotations

from typing import Any

from gpumon.backends.fleet.model import NodeRow, sort_rows
from gpumon.backends.fleet.source import FleetSnapshot
from gpumon.backends.model import CheckCode, Health

SHOWN_PROBLEMS = 5  # nodes named on the --check line


def _round(v: float | None, digits: int = 1) -> float | None:
    return None if v is None else round(v, digits)


def node_json(row: NodeRow, now: float) -> dict[str, Any]:
    """One node as ``--json`` writes it (None stays null: not reported, not zero)."""
    age = row.age(now)
    return {
        "node": row.node,
        "severity": row.severity.value,
        "problems": [
            {"rule": p.rule, "severity": p.severity.value, "message": p.message}
            for p in row.problems
        ],
        "labels": dict(row.labels),
        "gpus": row.gpus,
        "memory_used_mib": _round(row.mem_used_mib, 0),
        "memory_total_mib": _round(row.mem_total_mib, 0),
        "memory_fullest_pct": None if row.mem_fullest is None else round(100 * row.mem_fullest, 1),
        "util_mean_pct": _round(row.util_mean),
        "util_max_pct": _round(row.util_max),
        "temp_max_c": _round(row.temp_max),
        "power_w": _round(row.power_w),
        "xid_last_15m": row.xid_last,
        "xid_gpus_15m": row.xid_gpus,
        "xids_15m": {str(code): gpus for code, gpus in sorted(row.xids.items())},
        "row_remap_failures": row.remap_failures,
        "idle_allocated_gpus": row.idle_allocated,
        "idle_held_gpu_hours_24h": _round(row.idle_held_gpu_hours, 3),
        "gpumon_alerts": {"critical": row.alerts_critical, "warning": row.alerts_warning},
        "exporter_down": row.exporter_down or not row.current,
        "last_sample_age_s": _round(age),
    }


def fleet_json(snap: FleetSnapshot) -> dict[str, Any]:
    """The whole fleet: where it came from, what went wrong, and the nodes worst first."""
    now = snap.taken_at
    return {
        "fleet": snap.fleet,
        "prometheus": snap.prometheus,
        "time": round(now, 3),
        "error": snap.error,
        "prometheus_unreachable": snap.unreachable,
        "warnings": list(snap.warnings),
        "nodes": [node_json(r, now) for r in sort_rows(list(snap.rows), "trouble", now)],
    }


def fleet_check(snap: FleetSnapshot) -> tuple[CheckCode, str]:
    """The Nagios verdict over the fleet and its one line (with perfdata)."""
    rows = sort_rows(list(snap.rows), "trouble", snap.taken_at)
    if snap.error is not None and (snap.unreachable or not rows):
        return CheckCode.UNKNOWN, f"FLEET {snap.fleet} UNKNOWN - {snap.error}"
    if not rows:
        where = snap.prometheus
        return CheckCode.UNKNOWN, f"FLEET {snap.fleet} UNKNOWN - no GPU node in {where}"
    crit = [r for r in rows if r.severity is Health.CRITICAL]
    warn = [r for r in rows if r.severity is Health.WARNING]
    code = Health.worst(*(r.severity for r in rows)).check_code
    if snap.error is not None and code == CheckCode.OK:
        code = CheckCode.UNKNOWN
    named = [f"{r.node}: {r.problems[0].message}" for r in (crit + warn)[:SHOWN_PROBLEMS]]
    more = len(crit) + len(warn) - len(named)
    text = f"{len(crit)} critical, {len(warn)} warning of {len(rows)} nodes"
    if named:
        text += "; " + "; ".join(named) + (f"; and {more} more" if more > 0 else "")
    if snap.error is not None:
        text += f"; {snap.error}"
    perf = f"nodes={len(rows)} critical={len(crit)} warning={len(warn)}"
    return code, f"FLEET {snap.fleet} {code.name} - {text} | {perf}"
