"""Accounting: GPU time used and held idle, and energy, per host, GPU and owner, in SQLite."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .account import Owner, Tally, gap_for
    from .recorder import UsageRecorder
    from .report import UsageReport, parse_since, usage_report
    from .store import DIMENSIONS, UsageStore, UsageWriter

__all__ = [
    "DIMENSIONS",
    "Owner",
    "Tally",
    "UsageRecorder",
    "UsageReport",
    "UsageStore",
    "UsageWriter",
    "gap_for",
    "parse_since",
    "usage_report",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "DIMENSIONS": "store",
            "Owner": "account",
            "Tally": "account",
            "UsageRecorder": "recorder",
            "UsageReport": "report",
            "UsageStore": "store",
            "UsageWriter": "store",
            "gap_for": "account",
            "parse_since": "report",
            "usage_report": "report",
        },
    )
