"""The dashboard: its keys and actions, cursor, alerts and replay behaviour."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .actions import HOST_ACTIONS, ActionCommands, ActionsMixin
    from .alerts import AlertsMixin
    from .commands import GpumonCommands
    from .cursor import CursorMixin
    from .keys import dashboard_keys
    from .layout import HostNeeds, plan_layout
    from .notices import ConnectionWatch
    from .replay import ReplayMixin, replay_status

__all__ = [
    "HOST_ACTIONS",
    "ActionCommands",
    "ActionsMixin",
    "AlertsMixin",
    "ConnectionWatch",
    "CursorMixin",
    "GpumonCommands",
    "HostNeeds",
    "ReplayMixin",
    "dashboard_keys",
    "plan_layout",
    "replay_status",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "ActionCommands": "actions",
        "ActionsMixin": "actions",
        "AlertsMixin": "alerts",
        "ConnectionWatch": "notices",
        "CursorMixin": "cursor",
        "GpumonCommands": "commands",
        "HOST_ACTIONS": "actions",
        "HostNeeds": "layout",
        "ReplayMixin": "replay",
        "dashboard_keys": "keys",
        "plan_layout": "layout",
        "replay_status": "replay",
    },
)
