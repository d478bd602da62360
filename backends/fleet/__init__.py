"""The fleet view's data: Prometheus (dcgm-exporter, gpumon watch) by node, and its rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .model import SORT_NAMES, NodeRow, Problem, judge, sort_rows
    from .prom import PrometheusClient, PrometheusError, PrometheusUnreachable, QueryStats
    from .queries import FleetQueries
    from .report import fleet_check, fleet_json
    from .source import FleetSnapshot, FleetSource, GpuLine

__all__ = [
    "SORT_NAMES",
    "FleetQueries",
    "FleetSnapshot",
    "FleetSource",
    "GpuLine",
    "NodeRow",
    "Problem",
    "PrometheusClient",
    "PrometheusError",
    "PrometheusUnreachable",
    "QueryStats",
    "fleet_check",
    "fleet_json",
    "judge",
    "sort_rows",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "SORT_NAMES": "model",
            "FleetQueries": "queries",
            "FleetSnapshot": "source",
            "FleetSource": "source",
            "GpuLine": "source",
            "NodeRow": "model",
            "Problem": "model",
            "PrometheusClient": "prom",
            "PrometheusError": "prom",
            "PrometheusUnreachable": "prom",
            "QueryStats": "prom",
            "fleet_check": "report",
            "fleet_json": "report",
            "judge": "model",
            "sort_rows": "model",
        },
    )
