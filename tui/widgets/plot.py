"""History plots drawn with plotext 6 into a widget of our own.

plotext keeps one global master figure; this module is the only place that touches it.
Every build clears it first and sets everything it uses, and builds run on the event loop
one at a time, so no state leaks from one plot into the next. The ANSI output becomes a
``rich.text.Text`` with backgrounds removed (the widget's background shows through).
plotext is imported on first use (about 30 ms, see ``plotext``), not when the dashboard starts.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from gpumon.tui.views.sparkline import bin_series

RGB = tuple[int, int, int]
_BACKGROUND_SGR = re.compile(r"\x1b\[48;[0-9;]*m")


@dataclass(frozen=True, slots=True)
class PlotSpec:
    """One plot: points as seconds before the newest sample (<= 0) and values."""

    title: str
    xs: tuple[float, ...]
    ys: tuple[float | None, ...]
    window: float  # seconds shown
    y_max: float  # top of the y axis (the data may raise it)
    colour: RGB
    frame: RGB  # axes and tick labels
    gap_s: float  # consecutive points farther apart than this are not joined
    # horizontal lines across the window, (value, colour): the memory plot's capacity and
    # warning threshold, so a ramp towards full shows how close it is
    levels: tuple[tuple[float, RGB], ...] = ()
    y_min: float = 0.0  # bottom of the y axis (the memory plot zooms in on a ramp)


def series(
    times: Sequence[float],
    values: Sequence[float | None],
    *,
    end: float,
    window: float,
    max_points: int,
    interval: float,
    mean: bool = False,
    scale: float = 1.0,
) -> tuple[tuple[float, ...], tuple[float | None, ...], float]:
    """Points of the last ``window`` seconds up to ``end``: raw samples when there are at
    most ``max_points``, else binned into ``max_points`` slices (max, or mean). Returns
    xs (seconds before ``end``), ys (times ``scale``) and the gap that breaks the line."""
    start = end - window
    xs: list[float] = []
    ys: list[float | None] = []
    raw, limit = True, max_points if max_points > 0 else -1
    for t, v in zip(reversed(times), reversed(values), strict=True):
        if t > end:
            continue
        if t < start:
            break
        if len(xs) == limit:  # one more than fits: binned, the rest need not be read
            raw = False
            break
        xs.append(t - end)
        ys.append(None if v is None else v * scale)
    gap = 3.0 * max(interval, 1.0)
    if raw:
        xs.reverse()
        ys.reverse()
        return tuple(xs), tuple(ys), gap
    span = window / max_points
    binned = bin_series(times, values, end=end, span=span, count=max_points + 1, mean=mean)
    last = (end // span) * span - end
    bx = tuple(last - (len(binned) - 1 - i) * span + span / 2 for i in range(len(binned)))
    by = tuple(None if v is None else v * scale for v in binned)
    return bx, by, max(gap, 2.5 * span)


def window_ticks(window: float) -> tuple[list[float], list[str]]:
    """Three x ticks: the start of the window, its middle and "now"."""

    def label(s: float) -> str:
        if s >= 3600 and s % 3600 == 0:
            return f"-{s / 3600:g}h"
        if s >= 60 and s % 60 == 0:
            return f"-{s / 60:g}m"
        return f"-{s:g}s"

    return [-window, -window / 2, 0.0], [label(window), label(window / 2), "now"]


def plotext() -> Any:
    """The plotext module (imported on first call; later calls are a dict lookup).

    plotext 6's ``__init__`` ends by building its interactive documentation browser
    (``plotext.doc``, from ``plotext._doc.doc``): ~120 ms and 2.6 MiB of the ~150 ms and
    8 MiB its import costs, for a menu gpumon never opens. An empty stand-in takes that
    module's place, so the first detail view imports plotext in ~30 ms and a dashboard
    nobody opens a plot in never loads it (no warm-up at start). plotext is pinned
    exactly; tests/system/test_plotext_docs.py proves the plots are byte for byte those
    of a full import."""
    module = sys.modules.get("plotext")
    if module is None:
        if PLOTEXT_DOCS not in sys.modules:
            stand_in = types.ModuleType(PLOTEXT_DOCS, "plotext's documentation: not loaded")
            stand_in.docs = None  # type: ignore[attr-defined]
            sys.modules[PLOTEXT_DOCS] = stand_in
        module = importlib.import_module("plotext")
    return module


PLOTEXT_DOCS = "plotext._doc.doc"


def build_plot(spec: PlotSpec, width: int, height: int) -> Text:
    """The plot as text, ``width`` x ``height`` cells (plotext draws the frame and ticks)."""
    if width < 12 or height < 4:
        return Text(spec.title[:width])
    plt = plotext()
    fig = plt.figure
    fig.clear()
    fig.plot_size(width, height)
    fig.theme("colorless")
    frame = plt.pixel(foreground=spec.frame)
    fig.axes(pixel=frame)
    fig.ruler("both").pixel(frame)
    fig.title(spec.title)
    fig.ruler("x").lim(-spec.window, 0.0)
    known = [y for y in spec.ys if y is not None]
    top = max([spec.y_max, *known]) if known else spec.y_max
    top = top if top > 0 else 1.0
    bottom = min([spec.y_min, *known]) if known else spec.y_min
    bottom = bottom if 0 <= bottom < top else 0.0
    fig.ruler("y").lim(bottom, top)
    n = 2 if height < 8 else 3 if height < 16 else 5
    ticks = [bottom + (top - bottom) * k / (n - 1) for k in range(n)]
    if spec.levels:  # the levels are the ticks that matter: the bottom, threshold, capacity
        ticks = sorted({bottom, *(v for v, _ in spec.levels if bottom < v <= top)})
    fig.ruler("y").ticks(ticks, [_tick_label(v, top) for v in ticks])
    positions, labels = window_ticks(spec.window)
    fig.ruler("x").ticks(positions, labels)
    for value, colour in spec.levels:
        if bottom < value <= top:
            level = plt.marker("hd", pixel=plt.pixel(foreground=colour))
            line = fig.signal([-spec.window, 0.0], [value, value], marker=level)
            line.lines()
            fig.draw(line)
    xs = [x for x, y in zip(spec.xs, spec.ys, strict=True) if y is not None]
    ys = [y for y in spec.ys if y is not None]
    if xs:
        marker = plt.marker("hd", pixel=plt.pixel(foreground=spec.colour))
        sig = fig.signal(xs, ys, marker=marker)
        sig.lines()
        for i in _breaks(spec):
            sig.line(i, False)
        fig.draw(sig)
    ansi = fig.build().string().rstrip("\n")
    fig.clear()
    return Text.from_ansi(_BACKGROUND_SGR.sub("", ansi), no_wrap=True, end="")


def _tick_label(value: float, top: float) -> str:
    return f"{value:.1f}" if top < 10 else f"{value:.0f}"


def _breaks(spec: PlotSpec) -> list[int]:
    """Indexes (among the known points) whose segment to the previous point is a gap."""
    out: list[int] = []
    prev_x: float | None = None
    missing = False
    i = 0
    for x, y in zip(spec.xs, spec.ys, strict=True):
        if y is None:
            missing = True
            continue
        if prev_x is not None and (missing or x - prev_x > spec.gap_s):
            out.append(i)
        prev_x, missing = x, False
        i += 1
    return out


class PlotWidget(Widget):
    """Shows one ``PlotSpec``; rebuilds only when the spec or the size changes. The
    owner calls ``show`` again after a resize (the spec depends on the width)."""

    DEFAULT_CSS = """
    PlotWidget { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.spec: PlotSpec | None = None
        self._built: tuple[PlotSpec, int, int] | None = None
        self._text = Text()
        self.builds = 0

    def show(self, spec: PlotSpec) -> bool:
        """Use ``spec``; builds at once when visible. Returns whether it rebuilt."""
        self.spec = spec
        return self._rebuild()

    def _rebuild(self) -> bool:
        spec, (w, h) = self.spec, self.size
        if spec is None or w <= 0 or h <= 0 or self._built == (spec, w, h):
            return False
        self._text = build_plot(spec, w, h)
        self._built = (spec, w, h)
        self.builds += 1
        self.refresh()
        return True

    def render(self) -> Text:
        return self._text
