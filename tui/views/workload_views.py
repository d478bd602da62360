"""The views of the workload panes, built from a host's trackers: which rows, in which
order, with which sparkline. The panes (``widgets/workload_panes.py``) only draw them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpumon.backends.workloads import JobTracker, SglangTracker, sglang_totals
from gpumon.backends.workloads.vllm import VllmTracker
from gpumon.tui.views.gpu_cells import Cell
from gpumon.tui.views.palette import Palette
from gpumon.tui.views.sparkline import bin_series
from gpumon.tui.views.workload_cells import (
    common_model,
    job_cells,
    sglang_cells,
    sglang_total_cells,
    vllm_cells,
)


@dataclass(frozen=True, slots=True)
class PaneRow:
    """One line: cells by column key, a sparkline (oldest first) and the range it is drawn
    in (``spark_range``). ``error`` replaces the cells after ``state`` (a server that is
    down says why)."""

    key: str
    cells: tuple[tuple[str, Cell], ...]
    spark: tuple[float | None, ...] = ()
    spark_max: float = 0.0
    spark_min: float = 0.0
    error: Cell | None = None
    bold: bool = False

    def cell(self, key: str) -> Cell | None:
        return next((c for k, c in self.cells if k == key), None)


@dataclass(frozen=True, slots=True)
class PaneView:
    label: str  # in the first column of the title line: "SGLang", "jobs"
    spark_title: str  # "tok/s history · Qwen3-8B"
    rows: tuple[PaneRow, ...]
    palette: Palette
    cursor: int | None = None  # row index under the cursor
    stale: bool = False  # the host's data is stale: every number is dimmed
    # (column key, text): added to the sparkline's title when that column is left out
    notes: tuple[tuple[str, str], ...] = ()
    # what the columns count, after the sparkline's title when it fits whole there
    legend: str = ""


def history_bins(
    history: Sequence[tuple[float, float | None]], *, end: float, span: float, count: int
) -> tuple[float | None, ...]:
    """A tracker's ``(time, value)`` history as ``count`` time slices ending at ``end``."""
    if not history or count <= 0:
        return ()
    times = [t for t, _ in history]
    values = [v for _, v in history]
    return tuple(bin_series(times, values, end=end, span=span, count=count, mean=True))


def spark_range(*series: Sequence[float | None]) -> tuple[float, float]:
    """(low, top) to draw ``series`` in: their own range, not 0 to the top (a rate of
    1.13k to 1.24k tok/s drawn from 0 is a row of ▇ and █). The lowest value stays a low
    bar, not a blank, and a spread under a tenth of the top shows as small steps, not as
    the full height (noise is not drawn as a swing)."""
    known = [v for s in series for v in s if v is not None]
    if not known:
        return 0.0, 0.0
    lo, hi = min(known), max(known)
    return max(min(lo - (hi - lo) / 4, hi * 0.9), 0.0), hi


LEGEND = " · run, queue: requests; KV use: cache used"


def sglang_view(
    servers: Mapping[int, SglangTracker],
    *,
    end: float,
    span: float,
    count: int,
    palette: Palette,
    stale: bool = False,
) -> PaneView | None:
    """The SGLang pane: the aggregate row (two servers or more), then one row per server by
    port (``limit_servers`` trims it to the lines there are). None without servers."""
    if not servers:
        return None
    trackers = [servers[p] for p in sorted(servers)]
    sparks = {s.port: history_bins(s.history, end=end, span=span, count=count) for s in trackers}
    low, top = spark_range(*sparks.values())  # one range: the servers' rows compare
    rows: list[PaneRow] = []
    if len(trackers) >= 2:
        total: list[float | None] = []
        for column in zip(*(s for s in sparks.values() if s), strict=True):
            known = [v for v in column if v is not None]
            total.append(sum(known) if known else None)
        cells = sglang_total_cells(sglang_totals(trackers))
        lo, hi = spark_range(total)
        rows.append(PaneRow("all", tuple(cells.items()), tuple(total), hi, lo, bold=True))
    for s in trackers:
        cells = sglang_cells(s)
        error = cells.pop("error", None)
        rows.append(PaneRow(str(s.port), tuple(cells.items()), sparks[s.port], top, low, error))
    model = common_model(trackers)
    notes = (("model", f" · {model}"),) if model else ()
    return PaneView(
        "SGLang", "tok/s history", tuple(rows), palette, stale=stale, notes=notes, legend=LEGEND
    )


VLLM_LEGEND = " · run, wait: requests; failed: last minute, not stop or length"


def vllm_view(
    servers: Mapping[int, VllmTracker],
    *,
    now: float,
    hung_after_s: float,
    end: float,
    span: float,
    count: int,
    palette: Palette,
    stale: bool = False,
) -> PaneView | None:
    """The vLLM pane: one row per server by port (a wedged or dead one says so in its
    state), its tok/s sparkline in one range for all; None without servers."""
    if not servers:
        return None
    trackers = [servers[p] for p in sorted(servers)]
    sparks = {s.port: history_bins(s.history, end=end, span=span, count=count) for s in trackers}
    low, top = spark_range(*sparks.values())
    rows = []
    for s in trackers:
        cells = vllm_cells(s, now, hung_after_s)
        error = cells.pop("error", None)
        rows.append(PaneRow(str(s.port), tuple(cells.items()), sparks[s.port], top, low, error))
    model = common_model(trackers)
    notes = (("model", f" · {model}"),) if model else ()
    return PaneView(
        "vLLM", "tok/s history", tuple(rows), palette, stale=stale, notes=notes, legend=VLLM_LEGEND
    )


def limit_servers(view: PaneView | None, max_servers: int | None) -> PaneView | None:
    """``view`` with at most ``max_servers`` server lines (None: all). The aggregate line
    stays; servers with a problem (down, stale) go first; the title says how many are
    left out."""
    if view is None or max_servers is None:
        return view
    aggregate = view.rows[:1] if view.rows and view.rows[0].key == "all" else ()
    servers = view.rows[len(aggregate) :]
    if max_servers >= len(servers):
        return view
    ranked = sorted(servers, key=lambda r: r.error is None)[: max(max_servers, 0)]
    kept = tuple(r for r in servers if r in ranked)
    title = f"+{len(servers) - len(kept)} more · {view.spark_title}"
    return replace(view, rows=(*aggregate, *kept), spark_title=title)


def jobs_view(
    jobs: Mapping[str, JobTracker],
    *,
    end: float,
    span: float,
    count: int,
    palette: Palette,
    cursor: int | None = None,
    stale: bool = False,
) -> PaneView | None:
    """The jobs pane: one row per job in config order; None when the host has none."""
    if not jobs:
        return None
    rows = []
    for job in jobs.values():
        spark = history_bins(job.rate_history, end=end, span=span, count=count)
        lo, hi = spark_range(spark)
        rows.append(PaneRow(job.name, tuple(job_cells(job, end).items()), spark, hi, lo))
    return PaneView("jobs", "rate history", tuple(rows), palette, cursor=cursor, stale=stale)
