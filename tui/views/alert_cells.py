"""Pure functions from alerts to what the dashboard says about them: the header count, the
strip's alert, one-line texts and the history table's cells."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable as _printable
from gpumon.tui.views.gpu_cells import Cell, Role, alert_count_text, health_role

SEVERITY_GLYPH = {Health.CRITICAL: "✖", Health.WARNING: "▲"}


class AlertCount(NamedTuple):
    """What the header counts: active alerts, how many of them are not yet acknowledged,
    and the role of the worst unacknowledged one (muted once all are seen)."""

    total: int
    new: int
    role: Role

    @property
    def text(self) -> str:
        """ "0 alerts", "1 alert", "2 alerts (1 new)", "2 alerts (seen)"."""
        return alert_count_text(self.total, self.new)


def alert_count(alerts: Sequence[Alert]) -> AlertCount:
    """The header's count of ``alerts`` (active ones count; acknowledged ones are "seen")."""
    active = [a for a in alerts if a.active]
    new = [a for a in active if not a.acknowledged]
    if not new:
        return AlertCount(len(active), 0, Role.MUTED)
    return AlertCount(len(active), len(new), health_role(Health.worst(*(a.severity for a in new))))


def strip_alert(alerts: Iterable[Alert]) -> tuple[Alert | None, int]:
    """The alert the strip shows, and how many other unacknowledged active alerts there are.

    The newest unacknowledged critical alert; when there is none, the newest unacknowledged
    warning (a time-to-full warning is the OOM coming: worth the line). None when nothing
    is unacknowledged.
    """
    new = [a for a in alerts if a.active and not a.acknowledged]
    if not new:
        return None, 0
    top = max(new, key=lambda a: (a.severity.rank, a.time, a.last_seen))
    return top, len(new) - 1


def clock_time(epoch: float) -> str:
    """Local wall-clock time of ``epoch``: "14:32:07"."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def alert_time(epoch: float, now: float) -> str:
    """ "14:32:07" within the last day, else "11-28 14:32"."""
    if abs(now - epoch) < 86400:
        return clock_time(epoch)
    return time.strftime("%m-%d %H:%M", time.localtime(epoch))


def alert_where(alert: Alert) -> str:
    """ "demo GPU 6 drafter": host, GPU and job when known."""
    parts = [_printable(alert.host)]
    if alert.gpu is not None:
        parts.append(f"GPU {alert.gpu}")
    if alert.job:
        parts.append(_printable(alert.job))
    return " ".join(parts)


def alert_message(alert: Alert) -> str:
    """The message on one line, control characters made visible."""
    return _printable(" ".join(alert.message.split()))


def alert_state(alert: Alert) -> Cell:
    """ "active", "active, ack" (a silenced condition), "ack" (ended by acknowledging) or
    "ended"."""
    if alert.active:
        if alert.acknowledged:
            return Cell("active ✓ack", Role.MUTED)
        return Cell("active", health_role(alert.severity))
    return Cell("✓ack" if alert.acknowledged else "ended", Role.MUTED)


def history_cells(alert: Alert, now: float) -> tuple[Cell, ...]:
    """The history table's cells: severity, time, host, GPU, job, state, message."""
    role = health_role(alert.severity) if alert.active and not alert.acknowledged else Role.MUTED
    glyph = SEVERITY_GLYPH.get(alert.severity, " ")
    return (
        Cell(f"{glyph} {alert.severity.value}", role),
        Cell(alert_time(alert.time, now), Role.NORMAL),
        Cell(_printable(alert.host), Role.NORMAL),
        Cell("" if alert.gpu is None else str(alert.gpu), Role.NORMAL),
        Cell(_printable(alert.job) if alert.job else "", Role.NORMAL),
        alert_state(alert),
        Cell(alert_message(alert), Role.NORMAL if alert.active else Role.MUTED),
    )


KIND_TITLES = {
    "memory": "GPU memory",
    "time_to_full": "Memory filling up",
    "cuda_oom": "CUDA out of memory",
    "oom_death": "Likely OOM death",
    "kv_cache_full": "KV cache full",
    "xid": "Xid error",
    "host_oom_kill": "OOM killer",
    "cgroup_oom_kill": "Container OOM kill",
    "gpu_health": "GPU health",
    "job_crashed": "Job crashed",
    "sglang_error": "SGLang error",
}


def alert_title(alert: Alert) -> str:
    """A notification's title: "CRITICAL: CUDA out of memory"."""
    kind = KIND_TITLES.get(alert.kind, _printable(alert.kind))
    return f"{alert.severity.value.upper()}: {kind}"
