"""Rows repaint only the lines that changed (``ViewWidget._repaint_changed``): what the
screen holds after many partial repaints is exactly what a full repaint draws, and the
lines that did not change were really left alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.geometry import Region

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.widgets import GpuRow

Wait = Callable[..., Awaitable[None]]


async def test_partial_repaints_leave_the_screen_as_a_full_repaint_draws_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, speed=4.0)  # memory, sparklines and values move
    app = GpumonApp([monitor])
    async with app.run_test(size=(120, 40)) as pilot:

        def rows() -> list[GpuRow]:
            return list(app.screen.query(GpuRow))

        await wait(pilot, lambda: len(rows()) == 8, what="GPU rows")
        partial: list[tuple[int, int]] = []  # (lines repainted, lines of the row)
        for row in rows():
            set_dirty = row._set_dirty

            def record(
                *regions: Region, row: GpuRow = row, set_dirty: Callable[..., None] = set_dirty
            ) -> None:
                if regions:
                    partial.append((sum(r.height for r in regions), row.size.height))
                set_dirty(*regions)

            row._set_dirty = record  # type: ignore[method-assign]
        samples = monitor.samples
        await wait(pilot, lambda: monitor.samples >= samples + 6, timeout=30, what="6 rounds")
        await pilot.pause(0.3)
        assert partial, "no row was repainted line by line"
        for row in rows():
            whole = Region(0, 0, row.size.width, row.size.height)
            on_screen = row.render_lines(whole)  # the styles cache: partly from earlier rounds
            row.refresh()
            redrawn = row.render_lines(whole)  # every line drawn afresh
            assert on_screen == redrawn  # segments and styles, line for line
            assert on_screen[0].text == row.render().plain.split("\n")[0][: row.size.width]
        assert any(0 < repainted < height for repainted, height in partial), partial
