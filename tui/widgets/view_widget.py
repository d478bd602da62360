"""``ViewWidget``: a widget that draws one view (plain data, compared for equality).

The dashboard redraws about once a second; most of the time nothing a widget shows has
changed, so each widget is handed a frozen view and repaints only when the view differs
from the one it has. ``render_view`` is the pure drawing (tests and the bench call the
module-level render functions behind it); ``plain`` is what the widget shows now, as text.

The widget draws through Textual's line API (``render_line``), not ``render``: the rows
change every second, and Textual's general path (Rich ``Text`` to ``Content``, wrapped,
re-styled span by span) cost twice the building of the text itself. Our lines are
already cut to the width, with spans one after another, so ``text_strip`` turns each
into segments directly, and a line that did not change keeps its strip. A line it cannot
take (wider than the widget, overlapping spans, a tab, justified) goes through Textual's
path as before, so nothing is drawn differently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.dom import NoScreen
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget

from gpumon.tui.widgets.text_line import Line

V = TypeVar("V")


class ViewWidget(Widget, Generic[V]):
    """Draws ``self.view``; ``show(view)`` replaces it. ``None`` draws nothing."""

    ALLOW_SELECT = False  # the line API draws no selection; tmux's copy mode still works
    _strips: list[Strip] | None = None  # the lines drawn since the last refresh
    _strips_key: object = None
    _in_frame = False  # render_lines is running: its _drawn() is in _frame
    _frame: list[Strip] | None = None

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view: V | None = None
        self._line_strips: dict[tuple[object, ...], Strip] = {}  # the last drawing's lines

    def show(self, view: V | None) -> bool:
        """Draw ``view``; returns whether it differs from the one on show (only then is
        the widget repainted)."""
        if view == self.view:
            return False
        old, self.view = self.view, view
        before = self._strips if self._strips_key == self._draw_key() else None
        self.view_changed(old)
        if before is not None and not self._seen():
            # Off the screen (a host section scrolled out, a hidden widget): no lines are
            # built for nobody; Textual draws the widget whole when it comes into view.
            before = None
        self._repaint_changed(before)
        return True

    def _seen(self) -> bool:
        """Whether any of the widget was on the screen in its last arrangement (the test
        Textual's own ``Widget`` makes before it scrolls to or refreshes a widget)."""
        try:
            return self in self.screen._compositor.visible_widgets
        except NoScreen:
            return False

    def _repaint_changed(self, before: list[Strip] | None) -> None:
        """Repaint only the lines that differ from ``before`` (the lines on screen): a
        GPU row's values change every second, its clock, process and sparkline lines
        mostly do not, and each line repainted costs Textual's styling and compositing."""
        if before is None or self._strips is not before:  # a size, style or layout change
            self.refresh()
            return
        self._strips = None
        after = self._drawn()
        if after is None or len(after) != len(before):
            self.refresh()
            return
        width = self.size.width
        changed = [
            Region(0, y, width, 1)
            for y, (a, b) in enumerate(zip(before, after, strict=True))
            if a is not b
        ]
        if changed:
            super().refresh(*changed)  # not self.refresh: that would drop ``after``

    def view_changed(self, old: V | None) -> None:
        """Called with the previous view once ``self.view`` is new: a subclass sets its
        height, visibility or classes here."""

    def render_view(self, view: V, width: int) -> Text:
        """``view`` drawn ``width`` cells wide."""
        raise NotImplementedError

    def render_view_lines(self, view: V, width: int) -> Sequence[Text | Line]:
        """``render_view``'s lines (a subclass that builds lines one by one returns them
        here, as ``Line``s or Texts, so they are not joined into one Text only to be split
        again)."""
        return list(self.render_view(view, width).split("\n", allow_blank=True))

    def render(self) -> Text:
        if self.view is None:
            return Text()
        return self.render_view(self.view, self.size.width or self.app.size.width)

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> ViewWidget[V]:
        self._strips = None  # whatever asked for the repaint (a view, a size, a theme)
        super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        return self

    def render_lines(self, crop: Region) -> list[Strip]:
        # The drawing is checked against the widget's size and style once per call here,
        # not once per line in render_line (each check is a region lookup on the screen).
        self._frame, self._in_frame = self._drawn(), True
        try:
            return super().render_lines(crop)
        finally:
            self._frame, self._in_frame = None, False

    def render_line(self, y: int) -> Strip:
        strips = self._frame if self._in_frame else self._drawn()
        if strips is None:  # a line Textual's own path must take
            return super().render_line(y)
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _draw_key(self) -> tuple[Size, VisualStyle]:
        return (self.size, self.visual_style)

    def _drawn(self) -> list[Strip] | None:
        key = self._draw_key()
        style = key[1]
        if self._strips is not None and self._strips_key == key:
            return self._strips
        size = key[0]
        width = size.width
        base = style.rich_style
        drawn: dict[tuple[object, ...], Strip] = {}
        strips: list[Strip] = []
        view = self.view
        lines: Sequence[Text | Line] = ()
        if view is not None:
            lines = self.render_view_lines(view, width or self.app.size.width)
        for line in lines[: size.height]:
            line_key = (line.plain, tuple(line.spans), line.style, base, width)
            strip = self._line_strips.get(line_key) or text_strip(line, base, width)
            if strip is None:
                self._strips = None
                return None
            drawn[line_key] = strip
            strips.append(strip)
        self._line_strips = drawn
        self._strips, self._strips_key = strips, key
        return strips

    @property
    def plain(self) -> str:
        """The widget's text at its current width ("" without a view)."""
        return self.render().plain


def text_strip(line: Text | Line, base: RichStyle, width: int) -> Strip | None:
    """One line (a ``Text`` or a ``Line``) as a strip on ``base`` (the widget's style), or
    None when it needs Textual's general path: wider than ``width``, spans that overlap or
    are out of order, a tab, or a justification."""
    plain = line.plain
    length = cell_len(plain)
    if length > width or "\t" in plain or line.justify not in (None, "default", "left"):
        return None
    get = RichStyle.parse
    ground = base + (get(line.style) if isinstance(line.style, str) else line.style)
    segments: list[Segment] = []
    at = 0
    for span in line.spans:
        start, end = span.start, min(span.end, len(plain))
        if start < at:
            return None
        if start > at:
            segments.append(Segment(plain[at:start], ground))
        if end > start:
            style = get(span.style) if isinstance(span.style, str) else span.style
            segments.append(Segment(plain[start:end], ground + style))
        at = max(end, at)
    if at < len(plain):
        segments.append(Segment(plain[at:], ground))
    return Strip(segments, length)


class TextWidget(ViewWidget[Text]):
    """One ``Text`` drawn through the line API (a line that changes every second, like
    the host's CPU and RAM, without Textual's ``Static`` path)."""

    def render_view(self, view: Text, width: int) -> Text:
        return view
