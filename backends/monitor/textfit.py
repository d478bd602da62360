"""Plain text in a given number of terminal columns, for the headless text views
(``gpumon snapshot``): a wide character (CJK, most emoji) takes two columns, a combining
mark none; what does not fit is cut with ``…`` or wrapped. ``width`` None: no limit (the
text as it is: ``--wide``).

The text given is already printable (``untrusted.printable``): cutting never brings a
control character back, it may only shorten an escape such as ``\\x1b`` to ``\\x1…``.
"""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Iterable

__all__ = ["ELLIPSIS", "cells", "cut", "fit_lines", "wrap", "wrap_pairs"]

ELLIPSIS = "…"


def _char_cells(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(ch) for ch in text)


def cut(text: str, width: int | None) -> str:
    """``text`` in at most ``width`` columns: cut, with ``…`` as its last column, when it
    is wider; as it is when it fits or ``width`` is None."""
    if width is None or cells(text) <= width:
        return text
    if width <= 0:
        return ""
    room = width - 1  # the ellipsis
    out: list[str] = []
    used = 0
    for ch in text:
        w = _char_cells(ch)
        if used + w > room:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def wrap(
    text: str, width: int | None, indent: int = 0, max_lines: int | None = None, lead: int = 0
) -> list[str]:
    """``text`` on lines of at most ``width`` columns, broken at spaces (a word wider
    than a line is cut with ``…``): the first line after ``lead`` spaces, the others after
    ``indent``; at most ``max_lines`` lines, the last ending in ``…`` when more was left.
    One line, as it is, when ``width`` is None or it fits."""
    first = " " * lead + text
    if width is None or cells(first) <= width:
        return [first]
    lines = textwrap.wrap(
        text,
        width=max(width, indent + 10, lead + 10),
        initial_indent=" " * lead,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first]
    lines = [cut(one, width) for one in lines]
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = cut(lines[-1] + " " + ELLIPSIS, width)
    return lines


def wrap_pairs(pairs: Iterable[str], width: int | None, lead: int, indent: int) -> list[str]:
    """``key value`` pairs joined by two spaces on lines of at most ``width`` columns,
    never broken inside a pair (a pair wider than a line is cut with ``…``): the first
    line starts after ``lead`` spaces, the others after ``indent``."""
    items = list(pairs)
    if width is None:
        return [" " * lead + "  ".join(items)]
    lines: list[str] = []
    line = ""
    for pair in items:
        pad = lead if not lines else indent
        if line and cells(line) + 2 + cells(pair) > width - pad:
            lines.append(" " * pad + line)
            line = ""
        pad = lead if not lines else indent
        line = cut(pair, width - pad) if not line else f"{line}  {pair}"
    if line or not lines:
        lines.append(" " * (lead if not lines else indent) + line)
    return lines


def fit_lines(lines: Iterable[str], width: int | None) -> list[str]:
    """Every line cut to ``width`` columns: the guard for what a layout did not foresee
    (a host name of 100 characters)."""
    return [cut(line, width) for line in lines]
