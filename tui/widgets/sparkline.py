"""Sparklines: a GPU's recent history binned by time and drawn with block characters.

Columns are fixed slices of time (``span`` seconds each, aligned to multiples of
``span``), so a new sample changes at most the last column and jitter in arrival times
never reshuffles the line. A slice with no sample is a gap (blank), not a zero: a
dashboard must not draw data it did not get.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

from rich.style import Style
from rich.text import Span, Text

BLOCKS = " ▁▂▃▄▅▆▇█"
MIN_SPAN_S = 5.0


def column_span(interval: float) -> float:
    """Seconds of history per sparkline column for a sampling ``interval``."""
    return max(MIN_SPAN_S, 2 * interval)


def bin_series(
    times: Sequence[float],
    values: Sequence[float | None],
    *,
    end: float,
    span: float,
    count: int,
    mean: bool = False,
) -> list[float | None]:
    """``count`` values, oldest first: the max (or mean) of the samples in each time slice.

    The last slice is the one holding ``end``; samples after ``end`` are ignored (a paused
    view keeps its picture). ``None`` values are skipped; a slice without values is None.
    """
    if count <= 0 or span <= 0:
        return []
    last = math.floor(end / span)
    first = last - count + 1
    sums = [0.0] * count
    ns = [0] * count
    best: list[float | None] = [None] * count
    for t, v in zip(reversed(times), reversed(values), strict=True):
        if t > end:
            continue
        k = math.floor(t / span)
        if k < first:
            break
        if v is None:
            continue
        j = k - first
        sums[j] += v
        ns[j] += 1
        b = best[j]
        if b is None or v > b:
            best[j] = v
    if mean:
        return [sums[j] / ns[j] if ns[j] else None for j in range(count)]
    return best


def spark_levels(value: float | None, lo: float, hi: float, height: int) -> int:
    """How many eighths of ``height`` rows ``value`` fills; -1 for a gap. A known value
    always shows at least one eighth, so a zero is distinguishable from no data."""
    if value is None:
        return -1
    total = 8 * height
    if hi <= lo:
        return 1
    frac = min(max((value - lo) / (hi - lo), 0.0), 1.0)
    return max(1, round(frac * total))


@functools.cache
def _row_chars(row: int, height: int) -> str:
    """The character of each level (-1 .. 8 * height) on line ``row`` (0: the bottom)."""
    return " " + "".join(BLOCKS[min(max(lv - 8 * row, 0), 8)] for lv in range(8 * height + 1))


def spark_rows(
    values: Sequence[float | None],
    lo: float,
    hi: float,
    height: int,
    styles: Iterable[Style] | None = None,
) -> list[Text]:
    """``height`` lines of text, top first, one column per value. Neighbouring columns of
    one style become one span (a 100-column sparkline is a handful of spans).

    Every row of every GPU is drawn each second, so this builds each line's string in one
    join and its spans directly (no ``Text.append`` per run); styles are compared by
    identity first (the palette hands out one object per role)."""
    levels = [spark_levels(v, lo, hi, height) for v in values]
    style_list = list(styles) if styles is not None else [Style.null()] * len(levels)
    rows: list[Text] = []
    for row in range(height - 1, -1, -1):  # row 0 is the bottom line
        lut = _row_chars(row, height)
        chars = [lut[lv + 1] for lv in levels]
        spans: list[Span] = []
        start = 0
        run_style: Style | None = None
        for i, (char, st) in enumerate(zip(chars, style_list, strict=False)):
            style = None if char == " " else st
            if style is not run_style and style != run_style:
                if run_style is not None:
                    spans.append(Span(start, i, run_style))
                start, run_style = i, style
        if run_style is not None:
            spans.append(Span(start, min(len(chars), len(style_list)), run_style))
        rows.append(Text("".join(chars[: len(style_list)]), spans=spans))
    return rows


def spark_string(values: Sequence[float | None], lo: float, hi: float) -> str:
    """A one-line sparkline as plain text (for tests and logs)."""
    return spark_rows(values, lo, hi, 1)[0].plain
