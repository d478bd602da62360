"""Alerts: rules and thresholds, the engine that raises and clears them, their store, and
the incidents they group into."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .engine import AlertEngine, check_level, log_key_prefix
    from .incident import Incident, IncidentBell, incidents
    from .kinds import ALERT_KINDS, CONDITION_KINDS, KINDS, AlertKind, Tag, alert_kind, tagged
    from .rules import fit_time_to_full

__all__ = [
    "ALERT_KINDS",
    "CONDITION_KINDS",
    "KINDS",
    "AlertEngine",
    "AlertKind",
    "Incident",
    "IncidentBell",
    "Tag",
    "alert_kind",
    "check_level",
    "fit_time_to_full",
    "incidents",
    "log_key_prefix",
    "tagged",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AlertEngine": "engine",
            "Incident": "incident",
            "IncidentBell": "incident",
            "incidents": "incident",
            "ALERT_KINDS": "kinds",
            "AlertKind": "kinds",
            "CONDITION_KINDS": "kinds",
            "KINDS": "kinds",
            "Tag": "kinds",
            "alert_kind": "kinds",
            "tagged": "kinds",
            "check_level": "engine",
            "fit_time_to_full": "rules",
            "log_key_prefix": "engine",
        },
    )
