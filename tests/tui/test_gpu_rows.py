"""A host's GPU rows are one widget (``GpuRows``): the row under the mouse is lit as the
stylesheet's ``$boost`` lit a row widget, the cursor row keeps ``$primary 22%``, and the
cursor scrolls its row into view."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.color import Color

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.views.palette import CURSOR_ALPHA

Wait = Callable[..., Awaitable[None]]
FROZEN_NOW = 1_750_000_000.0


def frozen_clock() -> float:
    return FROZEN_NOW


async def test_the_row_under_the_mouse_is_lit_and_the_cursor_row_keeps_its_colour(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    # textual-dark: a theme whose $boost is not transparent (gpumon's themes set $panel,
    # and then Textual leaves $boost transparent: no hover colour, as before)
    app = GpumonApp([demo_monitor(clock=frozen_clock)], theme="textual-dark")
    async with app.run_test(size=(120, 40)) as pilot:
        section = app.dashboard.sections[0]
        rows = section.gpu_rows
        await wait(pilot, lambda: len(section.rows) == 8, what="GPU rows")
        variables = app.get_css_variables()
        below = rows.background_colors[1]
        lit = (below + Color.parse(variables["boost"])).rich_color
        cursor = (below + Color.parse(variables["primary"]).with_alpha(CURSOR_ALPHA)).rich_color
        assert lit not in (cursor, below.rich_color)

        def backgrounds(k: int) -> set[object]:
            """The background colours of row ``k``'s first line, as drawn."""
            assert rows.view is not None
            strip = rows.render_line(rows.view.top(k))
            return {seg.style.bgcolor for seg in strip if seg.style and not seg.text.strip(" ")}

        assert app.dashboard.cursor == (0, 0)
        await pilot.hover(rows, offset=(30, section.rows[3].region.y - rows.region.y))
        assert rows.view is not None and rows.view.hover == 3
        assert lit in backgrounds(3)
        assert lit not in backgrounds(2) and lit not in backgrounds(4)
        assert cursor in backgrounds(0) and lit not in backgrounds(0)
        await pilot.hover(rows, offset=(30, section.rows[0].region.y - rows.region.y))
        assert rows.view.hover == 0
        assert cursor in backgrounds(0) and lit not in backgrounds(0)  # the cursor's colour wins
        assert lit not in backgrounds(3)
        await pilot.hover(section.header)
        assert rows.view.hover is None


async def test_the_cursor_brings_its_row_into_view(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """Three hosts at 80x16: the last host's rows start below the screen; walking the
    cursor down to them scrolls each into view, and back up to the first row."""
    app = GpumonApp([demo_monitor(clock=frozen_clock) for _ in range(3)])
    async with app.run_test(size=(80, 16)) as pilot:
        sections = app.dashboard.sections
        await wait(pilot, lambda: all(len(s.rows) == 8 for s in sections), what="GPU rows")
        hosts = app.screen.query_one("#hosts")
        assert sections[2].rows[7].region.y >= hosts.region.bottom  # not in view at first
        seen = set()
        while app.dashboard.cursor is not None and app.dashboard.cursor < (2, 7):
            await pilot.press("down")
            await pilot.pause()
            host, row = app.dashboard.cursor
            if row < 8:
                region = sections[host].rows[row].region
                assert hosts.region.contains_region(region), (app.dashboard.cursor, region)
                seen.add((host, row))
        assert (2, 7) in seen and hosts.scroll_y > 0
        await pilot.press("g")
        await pilot.pause()
        assert app.dashboard.cursor == (0, 0)
        assert hosts.region.contains_region(sections[0].rows[0].region)
