"""The words beside the detail view's plots: the value now and the window's range, so a
plot a few rows tall (80x24) still tells 86 from 96 GiB."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class WindowRange(NamedTuple):
    """The newest known value of a window and its lowest and highest (None: none known)."""

    latest: float | None
    low: float | None
    high: float | None


def window_range(
    times: Sequence[float], values: Sequence[float | None], *, end: float, window: float
) -> WindowRange:
    """The values of the ``window`` seconds up to ``end``, walked back from the newest and
    stopped at the window's start (an hour's history for a 1 min window reads 60)."""
    latest: float | None = None
    low = high = None
    start = end - window
    for t, v in zip(reversed(times), reversed(values), strict=True):
        if t > end:
            continue
        if t < start:
            break
        if v is None:
            continue
        if latest is None:
            latest = v
        low = v if low is None else min(low, v)
        high = v if high is None else max(high, v)
    return WindowRange(latest, low, high)


def plot_title(name: str, numbers: WindowRange, *, scale: float = 1.0, digits: int = 0) -> str:
    """ "memory GiB  82.5 now (6.0-93.9)": the plot's name and unit, its newest value and
    the window's range (none when it is one value), in the plot's unit (``scale``); the
    name alone with no value."""
    if numbers.latest is None or numbers.low is None or numbers.high is None:
        return name

    def said(v: float) -> str:
        return f"{v * scale:.{digits}f}"

    low, high = said(numbers.low), said(numbers.high)
    span = f" ({low}-{high})" if low != high else ""
    return f"{name}  {said(numbers.latest)} now{span}"
