"""The SGLang pane, the vLLM pane and the jobs pane: a title line with column titles, then
one line per server or job, with a sparkline in what the columns leave.

Both are one widget each that draws a ``PaneView`` (plain data, compared for equality),
so a refresh without news costs a comparison. Columns have a priority: in a narrow
terminal the least important go first, and the sparkline takes what is left (from
``MIN_SPARK`` cells; below that it goes too), after a cell cut at its column's bound
has taken the room to be said whole. A pane with no rows is hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.events import Click
from textual.message import Message

from gpumon.tui.views import Cell, Palette, Role
from gpumon.tui.views.sparkline import spark_rows
from gpumon.tui.views.workload_views import PaneRow, PaneView
from gpumon.tui.widgets.text_line import Line
from gpumon.tui.widgets.view_widget import ViewWidget

MIN_SPARK = 8
SPARK_KEPT = 20  # a cut column grows into the free width only where this much sparkline stays


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its key in a row's cells, title, width bounds and priority (the lowest
    goes first when space is short)."""

    key: str
    title: str
    min_width: int
    max_width: int
    priority: int
    left: bool = False
    optional: bool = False  # shown only when a row has this cell (a drafter's accept length)


SGLANG_COLUMNS: tuple[Column, ...] = (
    Column("name", "", 6, 6, 100, left=True),
    Column("state", "", 4, 10, 99, left=True),  # "hung 45 s"
    Column("model", "model", 8, 20, 10, left=True),
    Column("tok/s", "tok/s", 5, 6, 90),
    Column("run", "run", 3, 5, 80),
    Column("queue", "queue", 5, 5, 79),
    Column("KV", "KV use", 6, 6, 70),  # the KV cache's used share
    Column("hit", "hit", 4, 4, 60),
    Column("TTFT", "TTFT p50/95", 11, 11, 50),
    Column("ITL", "ITL", 5, 6, 40),
    Column("acc", "accept", 6, 11, 55, optional=True),
)

# vLLM's overview dashboard, in the SGLang pane's columns where the meaning is the same
VLLM_COLUMNS: tuple[Column, ...] = (
    Column("name", "", 6, 6, 100, left=True),
    Column("state", "", 4, 12, 99, left=True),  # "wedged 94 s", "engine dead"
    Column("model", "model", 8, 20, 10, left=True),
    Column("tok/s", "tok/s", 5, 6, 90),
    Column("run", "run", 3, 5, 80),
    Column("queue", "wait", 4, 5, 79),
    Column("KV", "KV use", 6, 6, 70),
    Column("pre/s", "pre/s", 5, 6, 65),  # preemptions: the KV cache is full
    Column("failed", "failed", 6, 16, 62, left=True),
    Column("hit", "hit", 4, 4, 60),
    Column("acc", "accept", 6, 11, 55, optional=True),
    Column("TTFT", "TTFT p50/95", 11, 11, 50),
    Column("in/s", "in/s", 5, 6, 45),  # prompt tokens
    Column("ITL", "ITL p50/95", 10, 11, 40),
)

JOB_COLUMNS: tuple[Column, ...] = (
    Column("name", "", 4, 14, 100, left=True),
    Column("state", "state", 7, 26, 99, left=True),
    Column("GPUs", "GPUs", 4, 9, 45, left=True),
    Column("progress", "step", 4, 11, 90),
    Column("rate", "rate", 6, 22, 80),  # "— (last step 40 s ago)" whole
    Column("loss", "loss", 4, 7, 60),
    Column("ETA", "ETA", 3, 6, 85),
)


def fit_columns(
    columns: Sequence[Column], rows: Sequence[PaneRow], width: int
) -> tuple[list[tuple[Column, int]], int]:
    """The columns that fit ``width`` with their widths, and the sparkline's width (0 when
    fewer than ``MIN_SPARK`` cells are left). A column is as wide as its widest cell,
    within its bounds; when space is short the lowest priority goes first. A column whose
    widest cell is cut at its bound takes the room to say it whole ("crashed: OOM on GPU 6
    (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)", not "(…)") where the sparkline keeps
    ``SPARK_KEPT`` cells, the most important column first."""
    sized = []
    longest: dict[str, int] = {}
    columns = [c for c in columns if not c.optional or any(r.cell(c.key) for r in rows)]
    for col in columns:
        longest[col.key] = max((len(c.text) for r in rows if (c := r.cell(col.key))), default=0)
        wanted = max(longest[col.key], len(col.title), col.min_width)
        sized.append((col, min(wanted, col.max_width)))

    def used(cols: list[tuple[Column, int]]) -> int:
        return sum(w + 1 for _, w in cols)

    kept = list(sized)
    while len(kept) > 2 and used(kept) + MIN_SPARK > width:
        kept.remove(min(kept[2:], key=lambda cw: cw[0].priority))
    for col, w in sorted(kept, key=lambda cw: -cw[0].priority):
        more = longest[col.key] - w
        if more > 0 and width - used(kept) - more >= SPARK_KEPT:
            kept[kept.index((col, w))] = (col, w + more)
    spark = width - used(kept)
    return kept, spark if spark >= MIN_SPARK else 0


def render_pane(view: PaneView, columns: Sequence[Column], width: int) -> Text:
    """The pane's lines as one Text (pure: for tests and the bench too)."""
    return Text("\n").join(pane_lines(view, columns, width))


def pane_lines(view: PaneView, columns: Sequence[Column], width: int) -> list[Text]:
    """The pane's lines, the title line first."""
    pal = view.palette
    kept, spark_w = fit_columns(columns, view.rows, width)
    lines = [_title_line(view, kept, spark_w, Style(color=pal.na, bold=True))]
    cursor_style = pal.cursor_style
    for n, row in enumerate(view.rows):
        line = _row_line(row, kept, spark_w, view, pal).text()
        if n == view.cursor:
            line.stylize(cursor_style)
        lines.append(line)
    return lines


def _title_line(view: PaneView, kept: list[tuple[Column, int]], spark_w: int, style: Style) -> Text:
    pal = view.palette
    title = Text(no_wrap=True)
    # the label spans the first two columns (they have no titles of their own)
    label_w = kept[0][1] + 1 + kept[1][1]
    title.append(_fit(view.label, label_w, True), Style(bold=True, color=pal.accent))
    for col, w in kept[2:]:
        title.append(" ")
        title.append(_fit(col.title, w, col.left), style)
    if spark_w:
        shown = {col.key for col, _ in kept}
        text = view.spark_title + "".join(n for key, n in view.notes if key not in shown)
        if len(text) + len(view.legend) <= spark_w:  # whole or not at all
            text += view.legend
        title.append(" ")
        title.append(_fit(text, spark_w, True).rstrip(), style)
    return title


def _row_line(
    row: PaneRow, kept: list[tuple[Column, int]], spark_w: int, view: PaneView, pal: Palette
) -> Line:
    line = Line()  # eight server lines a second: parts and spans, one Text at the end
    bold = Style(bold=True) if row.bold else Style.null()
    cells = dict(row.cells)
    for i, (col, w) in enumerate(kept):
        if i:
            line.add(" ")
        if row.error is not None and i == 2:
            rest = sum(cw + 1 for _, cw in kept[2:]) - 1
            line.add(_fit(row.error.text, rest, True), pal.text(row.error.role))
            break
        cell = cells.get(col.key) or _EMPTY
        style = pal.text(cell.role, stale=view.stale)
        line.add(_fit(cell.text, w, col.left), style + bold)
    if spark_w:
        line.add(" ")
        shown = row.spark[-spark_w:]
        values: list[float | None] = [None] * (spark_w - len(shown))
        values += shown
        fill = pal.fill(Role.NA if view.stale else Role.NORMAL)
        line.add_text(spark_rows(values, row.spark_min, row.spark_max, 1, [fill] * spark_w)[0])
    return line


_EMPTY = Cell("")


def _fit(text: str, width: int, left: bool) -> str:
    if len(text) > width:
        text = _cut(text, width)
    return text.ljust(width) if left else text.rjust(width)


def _cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` with "…"; a parenthesis that does not fit goes whole
    ("crashed: OOM on GPU 6 (…)", not "crashed: OOM on GPU 6 (GP…"), so what comes
    before it stays readable."""
    if width <= 0:
        return ""
    at = text.find(" (")
    if at > 0 and at + 4 <= width:
        return text[:at] + " (…)"
    return text[: width - 1] + "…"


class WorkloadPane(ViewWidget[PaneView]):
    """A pane of ``COLUMNS``; ``show(view)`` updates it, ``None`` (no rows) hides it."""

    COLUMNS: tuple[Column, ...] = ()

    class RowSelected(Message):
        """A row was clicked."""

        def __init__(self, pane: WorkloadPane, index: int) -> None:
            super().__init__()
            self.pane = pane
            self.index = index

    DEFAULT_CSS = """
    WorkloadPane { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False

    def view_changed(self, old: PaneView | None) -> None:
        view = self.view
        self.display = view is not None and bool(view.rows)
        if view is not None:
            self.styles.height = len(view.rows) + 1

    def render_view(self, view: PaneView, width: int) -> Text:
        return render_pane(view, self.COLUMNS, width) if view.rows else Text()

    def render_view_lines(self, view: PaneView, width: int) -> list[Text]:
        return pane_lines(view, self.COLUMNS, width) if view.rows else [Text()]

    def on_click(self, event: Click) -> None:
        if self.view is not None and 1 <= event.y <= len(self.view.rows):
            self.post_message(self.RowSelected(self, event.y - 1))


class SglangPane(WorkloadPane):
    COLUMNS = SGLANG_COLUMNS


class VllmPane(WorkloadPane):
    COLUMNS = VLLM_COLUMNS


class JobsPane(WorkloadPane):
    COLUMNS = JOB_COLUMNS
