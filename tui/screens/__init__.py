"""Screens and dialogs over the dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .alert_detail import AlertDetailScreen
    from .alerts import AlertHistoryScreen
    from .detail import DetailScreen, DetailTarget
    from .doctor import DoctorScreen
    from .help import HelpScreen, help_rows, key_text
    from .job_action import JobActionScreen
    from .swap import SwapScreen
    from .usage import UsageScreen

__all__ = [
    "AlertDetailScreen",
    "AlertHistoryScreen",
    "DetailScreen",
    "DetailTarget",
    "DoctorScreen",
    "HelpScreen",
    "JobActionScreen",
    "SwapScreen",
    "UsageScreen",
    "help_rows",
    "key_text",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AlertDetailScreen": "alert_detail",
            "AlertHistoryScreen": "alerts",
            "DetailScreen": "detail",
            "DetailTarget": "detail",
            "DoctorScreen": "doctor",
            "HelpScreen": "help",
            "JobActionScreen": "job_action",
            "SwapScreen": "swap",
            "UsageScreen": "usage",
            "help_rows": "help",
            "key_text": "help",
        },
    )
