"""``Line``: one line of styled text built piece by piece.

The GPU rows are drawn every second, each from about fifty pieces. ``Text.append`` per
piece re-checks its arguments, strips control codes and grows the span list one call at
a time; here the pieces are only collected (a piece is stripped only when it has a
character that is not printable), and ``text()`` joins them once. The result is the same
``Text`` (same plain text, same spans in the same order) as appending the pieces one by
one.

``ViewWidget`` draws a ``Line`` without making it a ``Text`` at all (it reads ``plain``,
``spans``, ``style`` and ``justify``, as it reads a Text's): ``Text()`` strips control
codes from the whole line again (a ``str.translate`` over it, the largest single cost
of drawing the rows, measured), and the pieces here are already clean.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.style import Style
from rich.text import Span, Text


class Line:
    __slots__ = ("_length", "_parts", "_plain", "_spans", "style")

    justify = None  # as a Text's: never justified

    def __init__(self, text: str = "", style: Style | None = None) -> None:
        self._parts: list[str] = []
        self._spans: list[Span] = []
        self._length = 0
        self._plain: str | None = ""
        self.style: Style | str = ""  # under every span, as a Text's own style
        if text:
            self.add(text, style)

    def __len__(self) -> int:
        return self._length

    @property
    def plain(self) -> str:
        if self._plain is None:
            self._plain = "".join(self._parts)
        return self._plain

    @property
    def spans(self) -> list[Span]:
        return self._spans

    @property
    def cell_len(self) -> int:
        return cell_len(self.plain)

    def on(self, background: Style, width: int) -> Line:
        """A copy on ``background`` (under its spans), padded with spaces to ``width``
        cells."""
        out = Line()
        out._parts = list(self._parts)
        out._spans = list(self._spans)
        out._length = self._length
        out._plain = self._plain
        own = self.style
        out.style = background + (Style.parse(own) if isinstance(own, str) else own)
        pad = width - self.cell_len
        if pad > 0:
            out.add(" " * pad)
        return out

    def add(self, text: str, style: Style | None = None) -> None:
        """``text`` in ``style`` (as ``Text.append(text, style)``)."""
        if not text:
            return
        if not text.isprintable():  # as Text.append: no BEL, BS, CR, VT or FF in a line
            text = strip_control_codes(text)
        n = len(text)
        if style:
            self._spans.append(Span(self._length, self._length + n, style))
        self._parts.append(text)
        self._length += n
        self._plain = None

    def add_spans(self, text: str, spans: list[Span]) -> None:
        """``text`` with ``spans`` (offsets into ``text``), as ``add_text`` of a Text made
        of them; ``text`` must be printable (a sparkline's blocks)."""
        offset = self._length
        self._spans.extend(Span(offset + a, offset + b, s) for a, b, s in spans)
        self._parts.append(text)
        self._length += len(text)
        self._plain = None

    def add_text(self, text: Text) -> None:
        """A Text's plain text and spans (as ``Text.append_text``)."""
        offset = self._length
        n = len(text)
        if text.style:
            self._spans.append(Span(offset, offset + n, text.style))
        self._spans.extend(Span(offset + a, offset + b, s) for a, b, s in text.spans)
        self._parts.append(text.plain)
        self._length += n
        self._plain = None

    def text(self) -> Text:
        return Text(self.plain, self.style, spans=list(self._spans))
