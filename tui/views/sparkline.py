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


class BinnedSeries:
    """``bin_series`` of one growing history, kept between calls: a new sample changes
    only the newest column (columns are fixed slices of time), so a call whose ``end``
    moved forward over the same history re-bins only the samples of its newest columns
    instead of all of them (a 200-column sparkline spans 1000 samples at 1 Hz). The
    result is always what ``bin_series`` gives; anything it cannot tell is unchanged
    (another history, a new width or span, an end that went back, samples dropped from
    inside the window) re-bins everything."""

    __slots__ = ("_end", "_first", "_key", "_newest", "_oldest", "_series", "_values")

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._series: tuple[object, object] | None = None  # held: no id is reused
        self._values: list[float | None] = []
        self._first = self._end = 0.0
        self._oldest = self._newest = 0.0

    def bins(
        self,
        times: Sequence[float],
        values: Sequence[float | None],
        *,
        end: float,
        span: float,
        count: int,
        mean: bool = False,
    ) -> list[float | None]:
        if count <= 0 or span <= 0 or not times:
            self._key = None
            return bin_series(times, values, end=end, span=span, count=count, mean=mean)
        key = (span, count, mean)
        last = math.floor(end / span)
        first = last - count + 1
        oldest, newest = times[0], times[-1]
        series = self._series
        reuse = (
            key == self._key
            and series is not None
            and series[0] is times
            and series[1] is values
            and end >= self._end
            and newest >= self._newest
            # nothing the kept columns hold was dropped from the history since
            and (oldest == self._oldest or oldest <= first * span)
        )
        if not reuse:
            out = bin_series(times, values, end=end, span=span, count=count, mean=mean)
        else:
            # the kept columns before the one that held the last end (or the newest sample,
            # if earlier) are final: samples come in time order, so any sample not binned
            # then falls in that column or after it
            kept_last = math.floor(min(self._end, self._newest) / span)
            start = max(kept_last, first)
            fresh = bin_series(times, values, end=end, span=span, count=last - start + 1, mean=mean)
            old_first = int(self._first)
            out = self._values[first - old_first : start - old_first] + fresh
        self._key, self._series = key, (times, values)
        self._values, self._first, self._end = out, float(first), end
        self._oldest, self._newest = oldest, newest
        return list(out)


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
    one style become one span (a 100-column sparkline is a handful of spans)."""
    return [
        Text(plain, spans=spans) for plain, spans in spark_parts(values, lo, hi, height, styles)
    ]


def spark_parts(
    values: Sequence[float | None],
    lo: float,
    hi: float,
    height: int,
    styles: Iterable[Style] | None = None,
) -> list[tuple[str, list[Span]]]:
    """``spark_rows`` as (plain text, spans) per line, for ``Line.add_spans``.

    Every row of every GPU is drawn each second, so this builds each line's string in one
    join and its spans directly (no ``Text.append`` per run, no ``Text`` at all);
    styles are compared by identity first (the palette hands out one object per role)."""
    levels = [spark_levels(v, lo, hi, height) for v in values]
    style_list = list(styles) if styles is not None else [Style.null()] * len(levels)
    rows: list[tuple[str, list[Span]]] = []
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
        rows.append(("".join(chars[: len(style_list)]), spans))
    return rows


def spark_string(values: Sequence[float | None], lo: float, hi: float) -> str:
    """A one-line sparkline as plain text (for tests and logs)."""
    return spark_rows(values, lo, hi, 1)[0].plain
