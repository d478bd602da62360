"""Widgets of the dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .alert_strip import AlertStrip, StripView, render_strip
    from .footer import KeyFooter
    from .gpu_row import (
        GpuRows,
        RowLayout,
        RowRef,
        RowsView,
        RowView,
        bar_text,
        full_in_text,
        render_row,
        row_layout,
    )
    from .host_section import HostSection, ViewContext
    from .plot import PlotSpec, PlotWidget, build_plot, plotext, series, window_ticks
    from .view_widget import ViewWidget
    from .workload_panes import (
        JOB_COLUMNS,
        SGLANG_COLUMNS,
        WorkloadPane,
        fit_columns,
        render_pane,
    )

__all__ = [
    "JOB_COLUMNS",
    "SGLANG_COLUMNS",
    "AlertStrip",
    "GpuRows",
    "HostSection",
    "KeyFooter",
    "PlotSpec",
    "PlotWidget",
    "RowLayout",
    "RowRef",
    "RowView",
    "RowsView",
    "StripView",
    "ViewContext",
    "ViewWidget",
    "WorkloadPane",
    "bar_text",
    "build_plot",
    "fit_columns",
    "full_in_text",
    "plotext",
    "render_pane",
    "render_row",
    "render_strip",
    "row_layout",
    "series",
    "window_ticks",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AlertStrip": "alert_strip",
            "GpuRows": "gpu_row",
            "RowRef": "gpu_row",
            "RowsView": "gpu_row",
            "HostSection": "host_section",
            "KeyFooter": "footer",
            "JOB_COLUMNS": "workload_panes",
            "PlotSpec": "plot",
            "PlotWidget": "plot",
            "RowLayout": "gpu_row",
            "RowView": "gpu_row",
            "SGLANG_COLUMNS": "workload_panes",
            "StripView": "alert_strip",
            "ViewContext": "host_section",
            "ViewWidget": "view_widget",
            "WorkloadPane": "workload_panes",
            "bar_text": "gpu_row",
            "build_plot": "plot",
            "fit_columns": "workload_panes",
            "full_in_text": "gpu_row",
            "plotext": "plot",
            "render_pane": "workload_panes",
            "render_row": "gpu_row",
            "render_strip": "alert_strip",
            "row_layout": "gpu_row",
            "series": "plot",
            "window_ticks": "plot",
        },
    )
