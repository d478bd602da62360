"""Watching a host: the monitor's state, where its data comes from, and the reports built on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .compose import demo_settings, make_monitor, make_transport
    from .report import CheckCode, check_verdict, snapshot_json, snapshot_table
    from .state import HostMonitor, backoff_delay

__all__ = [
    "CheckCode",
    "HostMonitor",
    "backoff_delay",
    "check_verdict",
    "demo_settings",
    "make_monitor",
    "make_transport",
    "snapshot_json",
    "snapshot_table",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "CheckCode": "report",
        "HostMonitor": "state",
        "backoff_delay": "state",
        "check_verdict": "report",
        "demo_settings": "compose",
        "make_monitor": "compose",
        "make_transport": "compose",
        "snapshot_json": "report",
        "snapshot_table": "report",
    },
)
