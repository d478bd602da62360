"""``Line``: one line of styled text built piece by piece, made into a Rich ``Text`` once.

The GPU rows are drawn every second, each from about fifty pieces. ``Text.append`` per
piece re-checks its arguments, strips control codes and grows the span list one call at
a time; here the pieces are only collected (a piece is stripped only when it has a
character that is not printable), and ``text()`` joins them once. The result is the same
``Text`` (same plain text, same spans in the same order) as appending the pieces one by
one.
"""

from __future__ import annotations

from rich.control import strip_control_codes
from rich.style import Style
from rich.text import Span, Text


class Line:
    __slots__ = ("_length", "_parts", "_spans")

    def __init__(self, text: str = "", style: Style | None = None) -> None:
        self._parts: list[str] = []
        self._spans: list[Span] = []
        self._length = 0
        if text:
            self.add(text, style)

    def __len__(self) -> int:
        return self._length

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

    def add_text(self, text: Text) -> None:
        """A Text's plain text and spans (as ``Text.append_text``)."""
        offset = self._length
        n = len(text)
        if text.style:
            self._spans.append(Span(offset, offset + n, text.style))
        self._spans.extend(Span(offset + a, offset + b, s) for a, b, s in text.spans)
        self._parts.append(text.plain)
        self._length += n

    def text(self) -> Text:
        return Text("".join(self._parts), spans=self._spans)
