"""One host's section: its header, the column titles and a row per GPU.

The section reads its monitor's state (it never talks to the machine) and turns it into
views; widgets redraw only when their view changed. While paused it keeps showing the
sample it had, so rows stand still while the monitor goes on collecting.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from gpumon.backends.model import ConnState, GpuSample, HostSample
from gpumon.backends.monitor import HostMonitor

from ..cells import (
    Cell,
    HeaderInput,
    Role,
    alert_summary,
    gpu_cells,
    header_error,
    header_parts,
    process_summary,
)
from ..palette import Palette
from .gpu_row import MEM_W, NAME_W, PCT_W, POWER_W, PREFIX_W, TEMP_W, UTIL_W, GpuRow, RowView
from .gpu_row import row_layout as _row_layout
from .host_header import HeaderView, HostHeader
from .sparkline import bin_series, column_span


@dataclass(frozen=True, slots=True)
class ViewContext:
    """What every section needs to know to draw itself this time."""

    now: float
    paused: bool
    palette: Palette
    spark_memory: bool  # sparkline of memory (True) or utilisation (False)
    row_height: int  # 1-3 lines per GPU
    cursor: int | None  # position of the cursor row in this host, if it is here


class ColumnTitles(Widget):
    DEFAULT_CSS = """
    ColumnTitles { height: 1; width: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: tuple[bool, Palette] | None = None

    def show(self, spark_memory: bool, palette: Palette) -> None:
        if self.view != (spark_memory, palette):
            self.view = (spark_memory, palette)
            self.refresh()

    def render(self) -> Text:
        if self.view is None:
            return Text()
        return column_titles(self.size.width, self.view[0], self.view[1])


def column_titles(width: int, spark_memory: bool, palette: Palette) -> Text:
    layout = _row_layout(width)
    text = " GPU ".ljust(PREFIX_W) + "name".ljust(NAME_W) + " " + "memory".ljust(layout.bar) + " "
    text += "used".rjust(MEM_W) + " " + "mem%".rjust(PCT_W) + " " + "util".rjust(UTIL_W)
    text += "temp".rjust(TEMP_W) + "power".rjust(POWER_W)
    if layout.extras:
        text += " " + "P".rjust(3) + " " + "SM clk".rjust(7)
    if layout.spark:
        label = "mem history" if spark_memory else "util history"
        text += " " + label[: layout.spark]
    return Text(text[:width], Style(color=palette.na, bold=True), no_wrap=True)


class HostSection(Vertical):
    """Header, column titles and rows of one host; ``refresh_view`` brings it up to date."""

    DEFAULT_CSS = """
    HostSection { height: auto; }
    HostSection > .waiting { height: 1; }
    """

    def __init__(self, monitor: HostMonitor, index: int) -> None:
        super().__init__(id=f"host-{index}", classes="host")
        self.monitor = monitor
        self.index = index
        self.shown: HostSample | None = None  # what the rows show (frozen while paused)
        self.header = HostHeader()
        self.titles = ColumnTitles()
        self.waiting = Static("", classes="waiting")
        self.rows: list[GpuRow] = []
        self._spark_cache: dict[int, tuple[object, tuple[float | None, ...]]] = {}
        self._stale = False

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.titles
        yield self.waiting

    @property
    def gpus(self) -> tuple[GpuSample, ...]:
        return self.shown.gpus if self.shown is not None else ()

    def refresh_view(self, ctx: ViewContext, *, rows: bool = True) -> None:
        """Bring header and rows up to date with the monitor (rows stay while paused).
        ``rows=False``: the header only, unless the rows' stale mark has to change."""
        m = self.monitor
        if rows and not ctx.paused and m.latest is not self.shown:
            self.shown = m.latest
        shown = self.shown
        # Not being refreshed is stale too: while reconnecting the values are only a memory.
        stale = shown is not None and (m.is_stale(ctx.now) or m.status.state != ConnState.CONNECTED)
        alerts, alert_role = alert_summary(m.alerts.active())
        self.header.show(
            HeaderView(
                tuple(
                    header_parts(
                        HeaderInput(
                            name=m.name,
                            status=m.status,
                            shown_time=shown.time if shown else None,
                            now=ctx.now,
                            stale=stale,
                            interval=m.interval,
                            alerts=alerts,
                            alert_role=alert_role,
                            paused=ctx.paused,
                        )
                    )
                ),
                header_error(m.status),
                ctx.palette,
            )
        )
        if not rows and stale == self._stale and self.rows:
            return
        self._stale = stale
        if shown is None:
            self.titles.display = False
            self.waiting.display = True
            self.waiting.update(Text(f"  waiting for the first sample from {m.name}…", "italic"))
            return
        self.titles.display = True
        self.waiting.display = False
        self.titles.show(ctx.spark_memory, ctx.palette)
        self._sync_rows(len(shown.gpus))
        count = _row_layout(self.size.width or self.app.size.width).spark
        in_container = m.host.container is not None
        for pos, (row, gpu) in enumerate(zip(self.rows, shown.gpus, strict=True)):
            spark = self._spark(gpu, shown, ctx.spark_memory, count)
            total = gpu.memory_total_mib
            row.show(
                RowView(
                    cells=gpu_cells(gpu),
                    spark=spark,
                    spark_max=(float(total or 0) if ctx.spark_memory else 100.0),
                    spark_is_memory=ctx.spark_memory,
                    stale=stale,
                    cursor=pos == ctx.cursor,
                    height=ctx.row_height,
                    processes=(
                        process_summary(shown, gpu, in_container)
                        if ctx.row_height >= 3
                        else _NO_PROCESSES
                    ),
                    palette=ctx.palette,
                )
            )

    def _sync_rows(self, n: int) -> None:
        """One GpuRow per GPU (GPUs can appear or vanish between samples)."""
        while len(self.rows) < n:
            row = GpuRow(id=f"gpu-{self.index}-{len(self.rows)}")
            self.rows.append(row)
            self.mount(row)
        while len(self.rows) > n:
            self.rows.pop().remove()

    def _spark(
        self, gpu: GpuSample, shown: HostSample, memory: bool, count: int
    ) -> tuple[float | None, ...]:
        hist = self.monitor.histories.get(gpu.index)
        if hist is None or count <= 0:
            return ()
        span = column_span(self.monitor.interval)
        key = (memory, shown.time, len(hist), hist.times[-1] if hist.times else None, span, count)
        cached = self._spark_cache.get(gpu.index)
        if cached is not None and cached[0] == key:
            return cached[1]
        series = hist.memory_used_mib if memory else hist.utilization_pct
        values = tuple(
            bin_series(hist.times, series, end=shown.time, span=span, count=count, mean=not memory)
        )
        self._spark_cache[gpu.index] = (key, values)
        return values

    def row_region_y(self, pos: int) -> int:
        """Offset of row ``pos`` within this section (for scrolling the cursor into view)."""
        return self.rows[pos].virtual_region.y if pos < len(self.rows) else 0


_NO_PROCESSES = Cell("", Role.MUTED)
