"""Server-rendered SVG plots of the last minutes: one series over time, no script and no
chart library (the page's Content-Security-Policy loads nothing from anywhere).

``svg_plot`` draws a series of (time, value) points, ``None`` leaving a gap (a value not
reported is not drawn as 0), between ``start`` and ``end``, from 0 to ``top`` (the GPU's
memory, 100 %) or to the series' highest value. Its title says the value now and the
window's range, as the dashboard's plots do; the text is escaped by the caller's rule
(``html.escape``): a plot's title may name a job.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

__all__ = ["HEIGHT", "WIDTH", "svg_plot"]

WIDTH, HEIGHT = 320, 110  # the viewBox; the page scales it to the column's width
_LEFT, _TOP, _BOTTOM = 4, 18, 14  # room for the title above and the times below


def _number(value: float) -> str:
    if abs(value) < 0.05:  # a GPU's few MiB in GiB: "0", not "0.000977"
        return "0"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def svg_plot(
    title: str,
    unit: str,
    points: Iterable[tuple[float, float | None]],
    start: float,
    end: float,
    top: float | None = None,
    css_class: str = "plot",
) -> str:
    """An ``<svg>`` of ``points`` in [start, end] (see the module docstring)."""
    kept = [(t, v) for t, v in points if start <= t <= end]
    values = [v for _, v in kept if v is not None]
    high = max([top or 0.0, *values]) or 1.0
    span = max(end - start, 1e-9)
    plot_h = HEIGHT - _TOP - _BOTTOM
    plot_w = WIDTH - 2 * _LEFT

    def xy(t: float, v: float) -> str:
        x = _LEFT + (t - start) / span * plot_w
        y = _TOP + plot_h - max(min(v / high, 1.0), 0.0) * plot_h
        return f"{x:.1f},{y:.1f}"

    lines: list[list[str]] = [[]]
    for t, v in kept:
        if v is None:
            if lines[-1]:
                lines.append([])
            continue
        lines[-1].append(xy(t, v))
    if values:
        said = f"{_number(values[-1])} {unit} now ({_number(min(values))}-{_number(max(values))})"
    else:
        said = "not reported"
    caption = html.escape(f"{title}  {said}")
    back = f"-{span / 60:.0f} min" if span >= 120 else f"-{span:.0f} s"
    parts = [
        f'<svg class="{css_class}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{caption}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{caption}</title>",
        f'<text x="{_LEFT}" y="12" class="t">{caption}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>',
    ]
    if top:
        parts.append(
            f'<text x="{WIDTH - _LEFT}" y="{_TOP + 9}" class="a" text-anchor="end">'
            f"{_number(top)} {html.escape(unit)}</text>"
        )
    for line in lines:
        if len(line) == 1:
            x, y = line[0].split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="1.5" class="dot"/>')
        elif line:
            parts.append(f'<polyline points="{" ".join(line)}" class="line"/>')
    parts += [
        f'<text x="{_LEFT}" y="{HEIGHT - 3}" class="a">{back}</text>',
        f'<text x="{WIDTH - _LEFT}" y="{HEIGHT - 3}" class="a" text-anchor="end">now</text>',
        "</svg>",
    ]
    return "".join(parts)
