"""The dashboard: its screen, action table (keys, palette, help), cursor, alerts and replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .action_table import ACTIONS, DashboardAction, actions_on, bindings
    from .commands import GpumonCommands
    from .notices import ConnectionWatch
    from .replay import replay_status
    from .screen import INTERVALS, DashboardDetailScreen, DashboardScreen

__all__ = [
    "ACTIONS",
    "INTERVALS",
    "ConnectionWatch",
    "DashboardAction",
    "DashboardDetailScreen",
    "DashboardScreen",
    "GpumonCommands",
    "actions_on",
    "bindings",
    "replay_status",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "ACTIONS": "action_table",
            "ConnectionWatch": "notices",
            "DashboardAction": "action_table",
            "DashboardDetailScreen": "screen",
            "DashboardScreen": "screen",
            "GpumonCommands": "commands",
            "INTERVALS": "screen",
            "actions_on": "action_table",
            "bindings": "action_table",
            "replay_status": "replay",
        },
    )
