"""A host's GPU rows (``GpuRows``, one widget). A row: index, name, memory bar, values,
sparkline; 1 to 3 lines tall, and, expanded (``x``), a line per process under it (the
cursor walks them; ``K`` acts on the one selected).

Each row draws a ``RowView`` (plain data, compared for equality) and is redrawn only when
the view or its width changes. Column widths come from ``row_layout`` so the column
titles and every row agree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.containers import ScrollableContainer
from textual.events import Click, Leave, MouseMove
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.model import Health
from gpumon.tui.views import Cell, GpuCells, Palette, Role, memory_role
from gpumon.tui.views.palette import CURSOR_ALPHA
from gpumon.tui.views.process_cells import ProcessLine
from gpumon.tui.views.sparkline import spark_parts
from gpumon.tui.widgets.text_line import Line
from gpumon.tui.widgets.view_widget import ViewWidget

PARTIAL = " ▏▎▍▌▋▊▉"
MEM_W, PCT_W, UTIL_W, TEMP_W, POWER_W, PSTATE_W, CLOCK_W = 12, 4, 4, 5, 9, 3, 7
PREFIX_W = 5  # cursor glyph, index (2), health glyph, space
NAME_W = 15
OWNER_W = 14  # its own column from EXTRAS_WIDTH on; before that it takes the name's place
EXTRAS_WIDTH = 130


@dataclass(frozen=True, slots=True)
class RowLayout:
    """Column widths for one table width; 0 means the column is not shown."""

    width: int
    bar: int
    spark: int
    extras: bool  # P-state and SM clock columns

    @property
    def fixed(self) -> int:
        extra = (PSTATE_W + 1 + CLOCK_W + 1 + OWNER_W + 1) if self.extras else 0
        return PREFIX_W + NAME_W + 1 + MEM_W + 1 + PCT_W + 1 + UTIL_W + TEMP_W + POWER_W + extra


def row_layout(width: int) -> RowLayout:
    """How a row of ``width`` cells is split: the bar and the sparkline share what the
    fixed columns leave, the bar taking about half, at most 40 cells. From
    ``EXTRAS_WIDTH`` on: P-state, SM clock and an owner column of its own."""
    extras = width >= EXTRAS_WIDTH
    probe = RowLayout(width, 0, 0, extras)
    room = max(width - probe.fixed - 2, 0)  # a space before the bar and the sparkline
    bar = min(max(room // 2, 6), 40)
    spark = max(room - bar, 0)
    if room < 10:  # too narrow for both: keep the bar
        bar, spark = room, 0
    return RowLayout(width, bar, spark, extras)


def bar_text(fraction: float | None, width: int, fill: Style, track: Style) -> Text:
    """A horizontal bar with eighth-cell resolution; all track when ``fraction`` is None."""
    line = Line()
    add_bar(line, fraction, width, fill, track)
    return line.text()


def add_bar(line: Line, fraction: float | None, width: int, fill: Style, track: Style) -> None:
    """``bar_text``'s pieces added to ``line``."""
    if width <= 0:
        return
    if fraction is None:
        line.add(" " * width, track)
        return
    eighths = round(min(max(fraction, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    line.add("█" * full, fill)
    if full < width:
        line.add(PARTIAL[part], fill + track if part else track)
        line.add(" " * (width - full - 1), track)


@dataclass(frozen=True, slots=True)
class RowView:
    """Everything one row draws. ``spark`` holds at least as many columns as shown."""

    cells: GpuCells
    spark: tuple[float | None, ...]
    spark_max: float
    spark_is_memory: bool
    stale: bool
    cursor: bool
    height: int  # lines for the values and sparkline (1-3); a sick GPU adds one
    processes: Cell
    palette: Palette
    memory_rules: AlertRules  # the host's: their thresholds colour the memory sparkline
    owner: Cell | None = None  # the job or SGLang server on this GPU
    owners: bool = False  # some GPU of the host has one: narrow, the column is the owner's
    full_in: float | None = None  # seconds until memory is full, while that warning applies
    flag: Cell | None = None  # who holds the memory: "6.0 GiB held by CT 201 jupyter"
    expanded: bool = False  # its process lines are shown under it
    process_lines: tuple[ProcessLine, ...] = ()
    selected_line: int | None = None  # the process line under the cursor
    mig: tuple[Cell, ...] = ()  # a GPU in MIG mode: one line per GPU instance under it

    @property
    def listed_lines(self) -> int:
        """Lines of the process list (an expanded row without processes says so)."""
        return max(len(self.process_lines), 1) if self.expanded else 0

    @property
    def lines(self) -> int:
        sick = 1 if self.cells.problems.text else 0
        flag = 1 if self.flag else 0
        return self.height + len(self.mig) + sick + flag + self.listed_lines

    def line_at(self, y: int) -> int | None:
        """The process line at ``y`` lines into the row (None: not a process line)."""
        k = y - (self.lines - self.listed_lines)
        return k if 0 <= k < len(self.process_lines) else None


@dataclass(frozen=True, slots=True)
class RowsView:
    """A host's GPU rows, top first, and the one under the mouse (``hover``)."""

    rows: tuple[RowView, ...]
    hover: int | None = None

    @property
    def lines(self) -> int:
        return sum(row.lines for row in self.rows)

    def top(self, k: int) -> int:
        """The first line of row ``k``."""
        return sum(row.lines for row in self.rows[:k])

    def row_at(self, y: int) -> tuple[int, int] | None:
        """(row, line within it) at line ``y``; None below the last row."""
        for k, row in enumerate(self.rows):
            if y < row.lines:
                return (k, y) if y >= 0 else None
            y -= row.lines
        return None


class GpuRows(ViewWidget[RowsView]):
    """All GPU rows of a host in one widget; ``show(view)`` updates them. A click selects
    a row, a double click opens its detail view.

    One widget rather than one per GPU: every second each row's values change, and each
    widget repainted costs Textual a message round (refresh, idle, update), its region,
    opacity and background lookups and its styles pass, whatever the lines cost (one
    widget took the dashboard on ``local`` from 0.91 to 0.78 % of a core). A row whose
    view did not change keeps its lines (``_row_lines``), and only lines that changed are
    repainted.
    The cursor row's and the hovered row's backgrounds are Textual's own colour sums
    (``$primary 22%`` and ``$boost`` over the widget's background), as the stylesheet
    drew them when each row was a widget.
    """

    class Selected(Message):
        """Row ``row`` was clicked; ``line``: on that process line of an expanded row."""

        def __init__(
            self, rows: GpuRows, row: int, open_detail: bool, line: int | None = None
        ) -> None:
            super().__init__()
            self.rows = rows
            self.row = row
            self.open_detail = open_detail
            self.line = line

    DEFAULT_CSS = """
    GpuRows { height: 0; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        # row -> (its view, the layout, hovered, its lines): an unchanged row is not redrawn
        self._row_lines: dict[int, tuple[RowView, RowLayout, bool, list[Line | Text]]] = {}
        self._backgrounds: tuple[object, Style, Style] | None = None

    def view_changed(self, old: RowsView | None) -> None:
        view = self.view
        lines = view.lines if view is not None else 0
        if old is None or old.lines != lines:
            self.styles.height = lines

    def row(self, k: int) -> RowRef:
        return RowRef(self, k)

    def on_click(self, event: Click) -> None:
        view = self.view
        at = view.row_at(event.y) if view is not None else None
        if view is None or at is None:
            return
        k, y = at
        line = view.rows[k].line_at(y)
        self.post_message(self.Selected(self, k, open_detail=event.chain >= 2, line=line))

    def on_mouse_move(self, event: MouseMove) -> None:
        at = self.view.row_at(event.y) if self.view is not None else None
        self._hover(at[0] if at is not None else None)

    def on_leave(self, event: Leave) -> None:
        self._hover(None)

    def _hover(self, k: int | None) -> None:
        if self.view is not None and self.view.hover != k:
            self.show(replace(self.view, hover=k))

    def scroll_row_visible(self, k: int) -> None:
        """Scroll the host list so that row ``k`` is in view (after the next refresh, when
        the rows' layout is the one drawn)."""
        self.call_after_refresh(self._scroll_row_visible, k)

    def _scroll_row_visible(self, k: int) -> None:
        view = self.view
        if view is None or k >= len(view.rows) or not self.is_mounted:
            return
        container = next((a for a in self.ancestors if isinstance(a, ScrollableContainer)), None)
        if container is None:
            return
        row = self.row(k).region  # on screen
        virtual = row.translate(container.scroll_offset - container.content_region.offset)
        container.scroll_to_region(virtual, animate=False, immediate=True)

    def render_view(self, view: RowsView, width: int) -> Text:
        return Text("\n").join(as_text(line) for line in self.render_view_lines(view, width))

    def render_view_lines(self, view: RowsView, width: int) -> list[Line | Text]:
        layout = row_layout(width)
        cached, self._row_lines = self._row_lines, {}
        out: list[Line | Text] = []
        for k, row in enumerate(view.rows):
            hover = k == view.hover
            entry = cached.get(k)
            if entry is None or entry[1] != layout or entry[2] != hover or entry[0] != row:
                lines = row_lines(row, layout)
                if row.cursor or hover:
                    cursor, hovered = self._row_backgrounds()
                    lines = [_on(line, cursor if row.cursor else hovered, width) for line in lines]
                entry = (row, layout, hover, lines)
            self._row_lines[k] = entry
            out += entry[3]
        return out

    def _row_backgrounds(self) -> tuple[Style, Style]:
        """The cursor row's and the hovered row's backgrounds, as the stylesheet's
        ``background: $primary 22%`` and ``background: $boost`` made them."""
        key = (self.app.theme, self.background_colors[1])
        if self._backgrounds is None or self._backgrounds[0] != key:
            variables = self.app.get_css_variables()
            below = key[1]
            cursor = below + Color.parse(variables["primary"]).with_alpha(CURSOR_ALPHA)
            boost = below + Color.parse(variables["boost"])
            self._backgrounds = (
                key,
                Style(bgcolor=cursor.rich_color),
                Style(bgcolor=boost.rich_color),
            )
        return self._backgrounds[1], self._backgrounds[2]

    def row_text(self, k: int) -> Text:
        """Row ``k`` as drawn at the widget's width, without the cursor's or the mouse's
        background (an empty Text without it)."""
        view = self.view
        if view is None or k >= len(view.rows):
            return Text()
        return render_row(view.rows[k], row_layout(self.size.width or self.app.size.width))


@dataclass(frozen=True, slots=True)
class RowRef:
    """Row ``index`` of a ``GpuRows``: its view, its text and its place on screen."""

    rows: GpuRows
    index: int

    @property
    def view(self) -> RowView | None:
        view = self.rows.view
        return view.rows[self.index] if view is not None and self.index < len(view.rows) else None

    @property
    def plain(self) -> str:
        return self.render().plain

    def render(self) -> Text:
        return self.rows.row_text(self.index)

    @property
    def size(self) -> Size:
        return self.region.size

    def drawn(self) -> list[Strip]:
        """The row's lines as the widget draws them on screen (backgrounds included)."""
        view, row = self.rows.view, self.view
        if view is None or row is None:
            return []
        top = view.top(self.index)
        return self.rows.render_lines(Region(0, top, self.rows.size.width, row.lines))

    @property
    def region(self) -> Region:
        """The row's lines on screen."""
        view, whole = self.rows.view, self.rows.region
        row = self.view
        if view is None or row is None:
            return Region(whole.x, whole.y, whole.width, 0)
        return Region(whole.x, whole.y + view.top(self.index), whole.width, row.lines)


def _on(line: Line | Text, background: Style, width: int) -> Line:
    """``line`` on ``background``, padded to ``width`` (a row's background spans the
    widget, as a widget's own background did)."""
    if isinstance(line, Text):
        text, line = line, Line()
        line.add_text(text)
    return line.on(background, width)


def render_row(view: RowView, layout: RowLayout) -> Text:
    """The row's lines as one Text (pure: for tests and the bench too)."""
    return Text("\n").join(as_text(line) for line in row_lines(view, layout))


def as_text(line: Line | Text) -> Text:
    return line.text() if isinstance(line, Line) else line


def row_lines(view: RowView, layout: RowLayout) -> list[Line | Text]:
    """The row's lines, top first."""
    c, pal = view.cells, view.palette

    def cell(x: Cell, width: int, left: bool = False) -> None:
        text = x.text[:width]
        line.add(text.ljust(width) if left else text.rjust(width), pal.text(x.role, stale=stale))

    stale = view.stale
    line = Line("▶" if view.cursor else " ", Style(color=pal.accent, bold=True))
    line.add(f"{c.index:>2}", _BOLD)
    line.add(c.marker.text, pal.text(c.marker.role))
    line.add(" ")
    owner = view.owner
    if layout.extras or not (view.owners or owner is not None):
        cell(c.name, NAME_W, left=True)
    else:  # narrow: what runs here says more than a model name every row shares; an idle
        # GPU says "-" there, never its model among the job names (the column is "owner")
        cell(owner or _NO_OWNER, NAME_W, left=True)
    line.add(" ")
    fill = pal.fill(Role.NA if stale else c.memory_role)
    add_bar(line, c.fraction, layout.bar, fill, pal.track_style)
    line.add(" ")
    cell(c.memory, MEM_W)
    line.add(" ")
    cell(c.memory_pct, PCT_W)
    line.add(" ")
    cell(c.util, UTIL_W)
    cell(c.temp, TEMP_W)
    cell(c.power, POWER_W)
    if layout.extras:
        line.add(" ")
        cell(c.pstate, PSTATE_W)
        line.add(" ")
        cell(c.sm_clock, CLOCK_W)
        line.add(" ")
        cell(owner or _NO_OWNER, OWNER_W, left=True)
    lines = [line]
    if view.height >= 2:
        lines.append(_indented(c.details_short if layout.extras else c.details, view, layout))
    if view.height >= 3:
        lines.append(_indented(view.processes, view, layout))
    if layout.spark > 0:
        _append_sparkline(lines, view, layout)
    out: list[Line | Text] = list(lines)
    for x in view.mig:
        instance = Text(" " * PREFIX_W)
        instance.append(x.text, pal.text(x.role, stale=stale))
        instance.truncate(layout.width, overflow="ellipsis")
        out.append(instance)
    if c.problems.text:
        problem = Text(" " * PREFIX_W)
        problem.append(f"{c.marker.text} {c.problems.text}", pal.text(c.problems.role))
        problem.truncate(layout.width, overflow="ellipsis")
        out.append(problem)
    if view.flag is not None:
        flag = Text(" " * PREFIX_W)
        flag.append(f"GPU {c.index}: {view.flag.text}", pal.text(view.flag.role, stale=view.stale))
        flag.truncate(layout.width, overflow="ellipsis")
        out.append(flag)
    if view.expanded:
        out += _process_lines(view, layout.width)
    return out


def _process_lines(view: RowView, width: int) -> list[Text]:
    """The expanded row's process lines: ``  ▶ CT200 861 root python train.py … 82.5G``,
    the selected one in the cursor's colours."""
    pal = view.palette
    if not view.process_lines:
        return [Text(" " * PREFIX_W + "no compute processes", pal.text(Role.MUTED))]
    out = []
    for k, p in enumerate(view.process_lines):
        selected = k == view.selected_line
        text = Text("   ")
        text.append("▶ " if selected else "  ", Style(color=pal.accent, bold=True))
        text.append(p.text(width - PREFIX_W), pal.text(p.role, stale=view.stale))
        if selected:
            text.stylize(pal.cursor_style + Style(bold=True))
        out.append(text)
    return out


def _indented(x: Cell, view: RowView, layout: RowLayout) -> Line:
    width = layout.fixed + layout.bar + 1
    text = Text(" " * PREFIX_W)
    text.append(x.text, view.palette.text(x.role, stale=view.stale))
    text.truncate(width, overflow="ellipsis", pad=True)
    line = Line()
    line.add_text(text)
    return line


def full_in_text(seconds: float, width: int) -> str:
    """ "full in ~40 s" in at most ``width`` cells (shorter forms first dropped words)."""
    s = max(seconds, 0.0)
    amount = f"{s:.0f} s" if s < 100 else f"{s / 60:.0f} min"
    tight = amount.replace(" ", "")
    for text in (f"full in ~{amount}", f"full in ~{tight}", f"full ~{tight}", f"~{tight}"):
        if len(text) <= width:
            return text
    return ""


def _append_sparkline(lines: list[Line], view: RowView, layout: RowLayout) -> None:
    pal = view.palette
    count = layout.spark
    note = ""
    if view.full_in is not None:
        note = full_in_text(view.full_in, layout.spark)
        # the warning takes the newest end of the first line; the history keeps the rest
        count = layout.spark - len(note) - 1 if layout.spark - len(note) > 8 else 0
    _draw_sparkline(lines, view, count)
    if note:
        drawn = count + 1 if count else 0
        lines[0].add(" " * (layout.spark + 1 - drawn - len(note)))
        lines[0].add(note, pal.text(Role.WARNING, stale=view.stale))


def _draw_sparkline(lines: list[Line], view: RowView, count: int) -> None:
    if count <= 0:
        return
    pal = view.palette
    shown = view.spark[-count:]
    values: list[float | None] = [None] * (count - len(shown))
    values += shown
    if view.stale:
        styles = [pal.fill(Role.NA)] * len(values)
    elif view.spark_is_memory and view.spark_max > 0:
        top, rules = view.spark_max, view.memory_rules
        by_health = {h: pal.fill(memory_role(h)) for h in Health}
        gap = pal.fill(memory_role(None))
        styles = [gap if v is None else by_health[rules.memory_health(v / top)] for v in values]
    else:
        styles = [pal.fill(Role.NORMAL)] * len(values)
    rows = spark_parts(values, 0.0, view.spark_max, view.height, styles)
    for line, (plain, spans) in zip(lines, rows, strict=False):
        line.add(" ")
        line.add_spans(plain, spans)


_NO_OWNER = Cell("-", Role.MUTED)
_BOLD = Style(bold=True)
