"""Workloads on a host: SGLang servers and jobs, tracked from metrics and logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .memory import JobMemory
    from .sglang import LATENCY_EVERY_S
    from .trackers import (
        REVIVE_AFTER_S,
        JobState,
        JobTracker,
        SglangTotals,
        SglangTracker,
        StepBack,
        sglang_totals,
        step_back_text,
    )
    from .watch import Workloads

__all__ = [
    "LATENCY_EVERY_S",
    "REVIVE_AFTER_S",
    "JobMemory",
    "JobState",
    "JobTracker",
    "SglangTotals",
    "SglangTracker",
    "StepBack",
    "Workloads",
    "sglang_totals",
    "step_back_text",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "JobMemory": "memory",
            "JobState": "trackers",
            "JobTracker": "trackers",
            "LATENCY_EVERY_S": "sglang",
            "REVIVE_AFTER_S": "trackers",
            "SglangTotals": "trackers",
            "SglangTracker": "trackers",
            "StepBack": "trackers",
            "Workloads": "watch",
            "sglang_totals": "trackers",
            "step_back_text": "trackers",
        },
    )
