"""The fleet table: one line per node, drawn with Textual's line API.

Only the lines on screen are rendered (``render_line``), so 1,000 nodes cost what the
visible 40 cost; a refresh swaps the row list and clears the line cache, it never
rebuilds widgets. The cursor follows its node across refreshes and re-sorts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpumon.backends.fleet.model import NodeRow
from gpumon.tui.fleet.cells import columns_for, fit, row_cells
from gpumon.tui.views import Palette
from gpumon.tui.views.gpu_cells import Role
from gpumon.tui.views.sparkline import spark_rows


def header_text(width: int) -> str:
    """The column titles, laid out as the rows are."""
    parts: list[str] = []
    for c in columns_for(width):
        w = c.width if c.width else max(0, width - sum(len(p) + 1 for p in parts))
        parts.append(fit(c.title, w, c.right))
    return " ".join(parts)[:width]


class FleetTable(ScrollView, can_focus=True):
    """The nodes, scrollable, with a cursor row. ``message`` is shown when there are
    no rows (waiting for Prometheus, unreachable, nothing matches the filter)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
    ]

    def __init__(self, palette: Palette, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[NodeRow] = []
        self.palette = palette
        self.now = 0.0
        self.cursor = 0
        self.message = ""
        self._cache: dict[tuple[int, bool, int], Strip] = {}

    # --- data ----------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[NodeRow], now: float, palette: Palette) -> None:
        """Show ``rows`` (already sorted and filtered); the cursor stays on its node."""
        current = self.current_row()
        self.rows = list(rows)
        self.now = now
        self.palette = palette
        self._cache.clear()
        if current is not None:
            at = next((i for i, r in enumerate(self.rows) if r.node == current.node), None)
            self.cursor = at if at is not None else min(self.cursor, len(self.rows) - 1)
        self.cursor = max(0, min(self.cursor, len(self.rows) - 1))
        self.virtual_size = Size(self.size.width, max(1, len(self.rows)))
        self.refresh()

    def current_row(self) -> NodeRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    # --- keys ----------------------------------------------------------------------------
    def _move_to(self, index: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(index, len(self.rows) - 1))  # cached lines know the cursor
        self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False, immediate=True)
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.cursor + direction * max(1, self.size.height - 1))

    def action_jump(self, where: int) -> None:
        self._move_to(len(self.rows) - 1 if where < 0 else 0)

    def on_resize(self) -> None:
        self._cache.clear()
        self.virtual_size = Size(self.size.width, max(1, len(self.rows)))

    # --- drawing -------------------------------------------------------------------------
    @property
    def line_width(self) -> int:
        """The columns a line has: the width less the scrollbar's (a problem cut at the
        widget's width lost its last columns, "…" and all, under the scrollbar)."""
        return self.scrollable_content_region.width or self.size.width

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.line_width
        if not self.rows:
            if y == 0 and self.message:
                style = self.palette.text(Role.WARNING)
                return Strip([Segment(fit(self.message, width, False), style)])
            return Strip.blank(width)
        if index >= len(self.rows):
            return Strip.blank(width)
        key = (index, index == self.cursor, width)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(self.rows[index], key[1], width)
            self._cache[key] = strip
        return strip

    def _render_row(self, row: NodeRow, under_cursor: bool, width: int) -> Strip:
        """One node's line as segments (no Rich Text layout: a line is ~14 segments)."""
        cells = row_cells(row, self.now)
        palette = self.palette
        base = palette.cursor_style if under_cursor else Style.null()
        segments: list[Segment] = []
        used = 0
        for c in columns_for(width):
            if used >= width:
                break
            if c.key == "spark":
                values = list(row.spark[: c.width]) + [None] * (c.width - len(row.spark))
                text = spark_rows(values, 0, 100, 1)[0].plain
                style = base + palette.fill(Role.NORMAL)
                w = c.width
            else:
                w = c.width if c.width else max(0, width - used)
                cell = cells[c.key]
                text = fit(cell.text, w, c.right)
                style = base + palette.text(cell.role)
            segments.append(Segment(text, style))
            segments.append(Segment(" ", base))
            used += w + 1
        return Strip(segments).adjust_cell_length(width, base)
