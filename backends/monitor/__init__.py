"""Watching a host: the monitor's state, where its data comes from, and the reports built on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .compose import demo_settings, make_monitor, make_transport, replay_monitor, target_host
    from .report import check_verdict, snapshot_json, snapshot_table
    from .sources import (
        SPEEDS,
        AgentSource,
        Capabilities,
        DirectSmiSource,
        ReplaySource,
        Sink,
        Source,
        backoff_delay,
    )
    from .state import HostMonitor, ticks_for

__all__ = [
    "SPEEDS",
    "AgentSource",
    "Capabilities",
    "DirectSmiSource",
    "HostMonitor",
    "ReplaySource",
    "Sink",
    "Source",
    "backoff_delay",
    "check_verdict",
    "demo_settings",
    "make_monitor",
    "make_transport",
    "replay_monitor",
    "snapshot_json",
    "snapshot_table",
    "target_host",
    "ticks_for",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AgentSource": "sources.agent",
            "Capabilities": "sources.base",
            "DirectSmiSource": "sources.direct",
            "HostMonitor": "state",
            "ReplaySource": "sources.replay",
            "SPEEDS": "sources.replay",
            "Sink": "sources.base",
            "Source": "sources.base",
            "backoff_delay": "sources.connection",
            "check_verdict": "report",
            "demo_settings": "compose",
            "make_monitor": "compose",
            "make_transport": "compose",
            "replay_monitor": "compose",
            "snapshot_json": "report",
            "snapshot_table": "report",
            "target_host": "compose",
            "ticks_for": "state",
        },
    )
