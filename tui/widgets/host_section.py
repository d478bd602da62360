"""One host's section: its header, the column titles, a row per GPU, the SGLang pane, the
vLLM pane and the jobs pane.

The section reads its monitor's state (it never talks to the machine) and turns it into
views; widgets redraw only when their view changed. While paused it keeps showing the
sample (and the workload numbers) it had, so everything stands still while the monitor
goes on collecting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from gpumon.backends.alerts.kinds import Tag, tagged
from gpumon.backends.model import ConnState, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.views import (
    Palette,
    alert_count,
    gpu_owners,
    host_load_text,
    jobs_view,
    limit_servers,
    sglang_view,
)
from gpumon.tui.views.gpu_cells import (
    Cell,
    HeaderInput,
    Role,
    duration,
    gpu_cells,
    header_error,
    header_parts,
    mig_cells,
    process_summary,
    reported_details,
)
from gpumon.tui.views.layout import HostNeeds
from gpumon.tui.views.process_cells import ProcessKey, memory_flag, process_key, process_lines
from gpumon.tui.views.process_table import host_table_lines
from gpumon.tui.views.sparkline import BinnedSeries, column_span
from gpumon.tui.views.workload_views import PaneView, vllm_view
from gpumon.tui.widgets.gpu_row import (
    MEM_W,
    NAME_W,
    OWNER_W,
    PCT_W,
    POWER_W,
    PREFIX_W,
    TEMP_W,
    UTIL_W,
    GpuRows,
    RowRef,
    RowsView,
    RowView,
)
from gpumon.tui.widgets.gpu_row import row_layout as _row_layout
from gpumon.tui.widgets.host_header import HeaderView, HostHeader
from gpumon.tui.widgets.view_widget import TextWidget, ViewWidget
from gpumon.tui.widgets.workload_panes import JobsPane, SglangPane, VllmPane


@dataclass(frozen=True, slots=True)
class ViewContext:
    """What every section needs to know to draw itself this time."""

    now: float
    paused: bool
    palette: Palette
    spark_memory: bool  # sparkline of memory (True) or utilisation (False)
    row_height: int  # 1-3 lines per GPU
    cursor: int | None  # position of the cursor's GPU row in this host, if it is there
    job_cursor: int | None = None  # the cursor's row in this host's jobs pane
    max_servers: int | None = None  # SGLang server lines that fit (None: all)
    max_processes: int = 0  # lines of the process table below the GPU rows (0: none)
    replay: str | None = None  # the replay's state, shown instead of the connection state
    host_line: bool = False  # room for the target's CPU / RAM / load / swap line
    expanded: frozenset[int] = frozenset()  # GPU indexes whose process lines are shown
    process_cursor: ProcessKey | None = None  # the process line under the cursor's GPU row


@dataclass(frozen=True, slots=True)
class TitlesView:
    spark_memory: bool  # the sparkline column shows memory (else utilisation)
    palette: Palette
    owners: bool = False  # some GPU has an owner (narrow: it takes the name column)
    column_s: float = 0.0  # seconds of history per sparkline column (0: no time scale)


class ColumnTitles(ViewWidget[TitlesView]):
    DEFAULT_CSS = """
    ColumnTitles { height: 1; width: 1fr; }
    """

    def render_view(self, view: TitlesView, width: int) -> Text:
        return column_titles(
            width, view.spark_memory, view.palette, view.owners, column_s=view.column_s
        )


def column_titles(
    width: int, spark_memory: bool, palette: Palette, owners: bool = False, *, column_s: float = 0
) -> Text:
    """The column titles; ``owners``: some GPU has an owner (narrow: in the name column);
    ``column_s``: seconds per sparkline column, for its time scale ("mem, last 48s")."""
    layout = _row_layout(width)
    name = "owner" if owners and not layout.extras else "name"
    text = " GPU ".ljust(PREFIX_W) + name.ljust(NAME_W) + " " + "memory".ljust(layout.bar) + " "
    text += "used".rjust(MEM_W) + " " + "mem%".rjust(PCT_W) + " " + "util".rjust(UTIL_W)
    text += "temp".rjust(TEMP_W) + "power".rjust(POWER_W)
    if layout.extras:
        text += " " + "P".rjust(3) + " " + "SM clk".rjust(7) + " " + "owner".ljust(OWNER_W)
    if layout.spark:
        what = "mem" if spark_memory else "util"
        span = duration(column_s * layout.spark) if column_s > 0 else ""
        labels = [f"{what} history"]
        if span:  # the time scale: how far back the sparkline's left edge is
            labels = [f"{what} history, last {span}", f"{what}, last {span}", f"{what} {span}"]
        fits = [label for label in labels if len(label) <= layout.spark]
        text += " " + (fits[0] if fits else what)[: layout.spark]
    return Text(text[:width], Style(color=palette.na, bold=True), no_wrap=True)


class HostSection(Vertical):
    """Header, column titles, GPU rows and workload panes of one host; ``refresh_view``
    brings it up to date."""

    DEFAULT_CSS = """
    HostSection { height: auto; }
    HostSection > .waiting { height: auto; }
    HostSection > .host-line { height: 1; }
    """

    def __init__(self, monitor: HostMonitor, index: int) -> None:
        super().__init__(id=f"host-{index}", classes="host")
        self.monitor = monitor
        self.index = index
        self.shown: HostSample | None = None  # what the rows show (frozen while paused)
        self.header = HostHeader()
        self.host_line = TextWidget(classes="host-line")
        self.host_line.display = False
        self.titles = ColumnTitles()
        self.waiting = Static("", classes="waiting", markup=False)
        self.gpu_rows = GpuRows(id=f"gpu-rows-{index}")
        self.sglang = SglangPane(id=f"sglang-{index}")
        self.vllm = VllmPane(id=f"vllm-{index}")
        self.jobs = JobsPane(id=f"jobs-{index}")
        self.process_table = Static("", classes="process-table", markup=False)
        self.process_table.display = False
        self._spark_cache: dict[int, tuple[object, tuple[float | None, ...]]] = {}
        self._binned: dict[tuple[int, bool], BinnedSeries] = {}  # by GPU and series
        self._full_in: dict[int, float] = {}  # time to full of the shown sample's GPUs
        # their memory levels as the alerts had them when the sample was taken
        self._memory: dict[int, Health | None] = {}
        # SGLang (all servers), vLLM, jobs
        self._panes: tuple[PaneView | None, ...] = (None, None, None)
        self._stale = False
        # what the process table was last built from: a sample whose processes and
        # values are those of the last one rebuilds nothing (Static.update re-wraps
        # and re-lays out its whole text)
        self._table_key: object = None

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.host_line
        yield self.titles
        yield self.waiting
        yield self.gpu_rows
        yield self.process_table
        yield self.sglang
        yield self.vllm
        yield self.jobs

    @property
    def gpus(self) -> tuple[GpuSample, ...]:
        return self.shown.gpus if self.shown is not None else ()

    @property
    def rows(self) -> list[RowRef]:
        """The GPU rows on show, top first."""
        view = self.gpu_rows.view
        return [self.gpu_rows.row(k) for k in range(len(view.rows))] if view is not None else []

    @property
    def job_names(self) -> list[str]:
        """The jobs pane's rows, in order (the cursor walks them after the GPU rows)."""
        return list(self.monitor.workloads.jobs)

    def needs(self) -> HostNeeds:
        """What this section would like to show, for the layout plan."""
        w = self.monitor.workloads
        views = self.gpu_rows.view.rows if self.gpu_rows.view is not None else ()
        sick = sum(1 for v in views if v.cells.problems.text)
        listed = sum(v.listed_lines for v in views)  # expanded rows' process lines
        slices = sum(len(v.mig) for v in views)  # a MIG GPU's instance lines
        extra = sick + listed + slices + (1 if self.monitor.status.error else 0)
        shown = self.shown
        procs = sum(len(shown.processes_for(g)) for g in shown.gpus) if shown is not None else 0
        return HostNeeds(len(self.gpus) or 8, extra, len(w.sglang), len(w.jobs), len(w.vllm), procs)

    def refresh_view(self, ctx: ViewContext, *, rows: bool = True) -> None:
        """Bring header, rows and panes up to date with the monitor (they stay while
        paused). ``rows=False``: the header only, unless the stale mark has to change."""
        m = self.monitor
        if rows and not ctx.paused and m.latest is not self.shown:
            self.shown = m.latest
            self._full_in = self._times_to_full(self.shown)
            self._memory = self._memory_levels(self.shown)
        shown = self.shown
        # Not being refreshed is stale too: while reconnecting the values are only a memory.
        # A replay that ended is not: its last sample is what the recording holds.
        down = m.status.state != ConnState.CONNECTED and ctx.replay is None
        stale = shown is not None and (m.is_stale() or down)
        self._refresh_header(ctx, stale)
        shown_rows = self.gpu_rows.view
        if not rows and stale == self._stale and shown_rows is not None and shown_rows.rows:
            return
        self._stale = stale
        self._refresh_rows(ctx, stale)
        self._refresh_process_table(ctx, stale)
        self._refresh_panes(ctx, stale)

    def _refresh_process_table(self, ctx: ViewContext, stale: bool) -> None:
        """The host's busiest processes below its GPU rows, where the screen has room
        (``plan_layout``: from 40 lines); hidden otherwise."""
        shown = self.shown
        self.process_table.display = bool(ctx.max_processes) and shown is not None
        if shown is None or not ctx.max_processes:
            return
        width = self.size.width or self.app.size.width
        pal = ctx.palette
        watched = self.monitor.host.container
        procs = tuple((g.index, tuple(shown.processes_for(g))) for g in shown.gpus)
        key = (procs, watched, width, ctx.max_processes, stale, pal)
        if key == self._table_key:
            return
        self._table_key = key
        found = host_table_lines(shown, watched, width=width, count=ctx.max_processes)
        lines = [Text(x.text, Style(bold=True, color=pal.na)) for x in found[:2]]
        lines += [Text(x.text, pal.text(x.role, stale=stale)) for x in found[2:]]
        self.process_table.update(Text("\n").join(lines))

    def _refresh_header(self, ctx: ViewContext, stale: bool) -> None:
        """The header (connection, data age, alert count) and, with room, the host line."""
        m, shown = self.monitor, self.shown
        active = m.alerts.active()
        count = alert_count(active)
        stale_alert = next((a.severity for a in active if a.kind in _SILENCE), None)
        self.header.show(
            HeaderView(
                tuple(
                    header_parts(
                        HeaderInput(
                            name=m.name,
                            status=m.status,
                            age=None if shown is None else m.age_s(shown),
                            now=ctx.now,
                            stale=stale,
                            interval=m.interval,
                            alerts=count.total,
                            new_alerts=count.new,
                            alert_role=count.role,
                            paused=ctx.paused,
                            replay=ctx.replay,
                            no_data=ctx.replay is None and m.no_data(),
                            stale_alert=stale_alert,
                        )
                    )
                ),
                None if ctx.replay is not None else header_error(m.status),
                ctx.palette,
            )
        )
        load = m.host_load if ctx.host_line and ctx.replay is None else None
        self.host_line.display = load is not None
        if load is not None:
            # one line, always: no layout pass, and only the cells that changed repainted
            self.host_line.show(host_load_text(load, ctx.palette, stale=stale))

    def _refresh_rows(self, ctx: ViewContext, stale: bool) -> None:
        """The column titles and a row view per GPU of the shown sample (before the first
        sample, a waiting line instead)."""
        m, shown = self.monitor, self.shown
        if shown is None:
            self.titles.display = False
            self.waiting.display = True
            self.waiting.update(waiting_text(m, ctx.palette))
            return
        self.titles.display = True
        self.waiting.display = False
        w = m.workloads
        down = frozenset(port for port, server in w.vllm.items() if server.up is False)
        found = gpu_owners(
            shown, w.jobs, w.sglang, m.host.container, w.vllm_gpus(shown), vllm_down=down
        )
        owners = {i: Cell(o.text, o.role) for i, o in found.items()}
        span = column_span(m.interval)
        self.titles.show(TitlesView(ctx.spark_memory, ctx.palette, bool(owners), span))
        count_spark = _row_layout(self.size.width or self.app.size.width).spark
        reported = reported_details(shown.gpus)  # what this host never reports stays out
        views = [
            self._row_view(ctx, shown, pos, gpu, stale, owners, reported, count_spark)
            for pos, gpu in enumerate(shown.gpus)
        ]
        hover = self.gpu_rows.view.hover if self.gpu_rows.view is not None else None
        self.gpu_rows.show(
            RowsView(tuple(views), hover if hover is None or hover < len(views) else None)
        )

    def _row_view(
        self,
        ctx: ViewContext,
        shown: HostSample,
        pos: int,
        gpu: GpuSample,
        stale: bool,
        owners: dict[int, Cell],
        reported: frozenset[str],
        count_spark: int,
    ) -> RowView:
        """The view of GPU row ``pos`` (``gpu`` of ``shown``)."""
        m = self.monitor
        spark = self._spark(gpu, shown, ctx.spark_memory, count_spark)
        total = gpu.memory_total_mib
        expanded = gpu.index in ctx.expanded
        lines = tuple(process_lines(shown, gpu, m.host.container)) if expanded else ()
        selected = None
        if pos == ctx.cursor and ctx.process_cursor is not None:
            keys = [process_key(line.process) for line in lines]
            # gone from this sample: the cursor is back on the GPU row
            selected = keys.index(ctx.process_cursor) if ctx.process_cursor in keys else None
        in_container = m.host.container is not None
        return RowView(
            cells=gpu_cells(gpu, self._memory.get(gpu.index), reported=reported),
            spark=spark,
            spark_max=(float(total or 0) if ctx.spark_memory else 100.0),
            spark_is_memory=ctx.spark_memory,
            stale=stale,
            cursor=pos == ctx.cursor and selected is None,
            height=ctx.row_height,
            processes=(
                process_summary(shown, gpu, in_container) if ctx.row_height >= 3 else _NO_PROCESSES
            ),
            palette=ctx.palette,
            memory_rules=m.alerts.rules,
            owner=owners.get(gpu.index),
            owners=bool(owners),
            full_in=self._full_in.get(gpu.index),
            flag=memory_flag(shown, gpu, m.host.container),
            expanded=expanded,
            process_lines=lines,
            selected_line=selected,
            mig=mig_cells(
                shown,
                gpu,
                m.alerts.rules.memory_warning_pct,
                m.alerts.rules.memory_critical_pct,
                self._slices_full_in(gpu),
            ),
        )

    def _slices_full_in(self, gpu: GpuSample) -> dict[int, float]:
        """The GPU instances of ``gpu`` whose time to full is within the warning's
        horizon, or whose warning is on (as a GPU row's "full in")."""
        alerts = self.monitor.alerts
        active = {a.key for a in alerts.active()}
        horizon = alerts.rules.ttf_horizon_s
        return {
            gi: ttf
            for gi, ttf in alerts.instance_times_to_full(gpu.index).items()
            if ttf <= horizon or f"time_to_full:{gpu.index}:gi{gi}" in active
        }

    def _memory_levels(self, sample: HostSample | None) -> dict[int, Health | None]:
        """GPU -> memory level of ``sample`` from the host's alert engine, so a row is
        coloured as its memory alert reads (the host's thresholds, its hysteresis)."""
        if sample is None:
            return {}
        alerts = self.monitor.alerts
        return {gpu.index: alerts.memory_level(gpu, sample.time) for gpu in sample.gpus}

    def _times_to_full(self, sample: HostSample | None) -> dict[int, float]:
        """GPU -> seconds to full, for GPUs where the time-to-full warning applies (the
        estimate is within the rule's horizon, or its alert is still on)."""
        if sample is None:
            return {}
        alerts = self.monitor.alerts
        horizon = alerts.rules.ttf_horizon_s
        active = {a.key for a in alerts.active()}
        out = {}
        for gpu in sample.gpus:
            ttf = alerts.time_to_full(gpu.index)
            if ttf is not None and (ttf <= horizon or f"time_to_full:{gpu.index}" in active):
                out[gpu.index] = ttf
        return out

    def _refresh_panes(self, ctx: ViewContext, stale: bool) -> None:
        """The SGLang, vLLM and jobs panes; while paused they keep their numbers (the
        cursor, the colours and the number of server lines still follow)."""
        w = self.monitor.workloads
        views: tuple[PaneView | None, ...]
        old = self._panes
        if ctx.paused and any(v is not None for v in old):
            cursors = (None, None, ctx.job_cursor)
            views = tuple(_restyle(v, ctx, c, stale) for v, c in zip(old, cursors, strict=True))
        else:
            width = self.size.width or self.app.size.width
            # trackers keep ~120 points, one per scrape or log line: 2 intervals a column
            span = 2 * max(self.monitor.interval, 0.5)
            end = w.now()  # the trackers keep their times on their own clock
            pal = ctx.palette
            views = (
                sglang_view(w.sglang, end=end, span=span, count=width, palette=pal, stale=stale),
                vllm_view(
                    w.vllm,
                    now=end,  # its hang judged as the alerts judge it
                    hung_after_s=w.vllm_hung_after_s,
                    end=end,
                    span=span,
                    count=width,
                    palette=pal,
                    stale=stale,
                ),
                jobs_view(
                    w.jobs,
                    end=end,
                    span=span,
                    count=width,
                    palette=pal,
                    cursor=ctx.job_cursor,
                    stale=stale,
                ),
            )
        self._panes = views
        self.sglang.show(limit_servers(views[0], ctx.max_servers))
        self.vllm.show(views[1])
        self.jobs.show(views[2])

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
        binned = self._binned.setdefault((gpu.index, memory), BinnedSeries())
        values = tuple(
            binned.bins(hist.times, series, end=shown.time, span=span, count=count, mean=not memory)
        )
        self._spark_cache[gpu.index] = (key, values)
        return values


def _restyle(
    view: PaneView | None, ctx: ViewContext, cursor: int | None, stale: bool
) -> PaneView | None:
    if view is None:
        return None
    return replace(view, palette=ctx.palette, cursor=cursor, stale=stale)


_NO_PROCESSES = Cell("", Role.MUTED)
_SILENCE = tagged(Tag.SILENCE)  # the header marks the data stale at the alert's level


def waiting_text(m: HostMonitor, palette: Palette | None = None) -> Text:
    """What stands in the GPU rows' place before the first sample: waiting for it; on a
    host that has not connected and whose attempt failed (refused, authentication, host
    key, no answer), the whole reason at once in the critical colour, since it is the
    configuration or the host to fix, not a wait (the header line above is cut to the
    width); on a host gpumon gave up on (FAILED: a name that never resolved), that no
    sample will come."""
    error = m.status.error
    critical = f"italic {palette.critical}" if palette is not None else "italic"
    if m.status.state == ConnState.FAILED:
        return Text(f"  no sample will come: {error or 'the connection failed'}", critical)
    if error and m.status.state != ConnState.CONNECTED:
        return Text(f"  not connected: {error} (retrying)", critical)
    return Text(f"  waiting for the first sample from {m.name}…", "italic")
