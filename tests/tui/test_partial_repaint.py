"""The GPU rows repaint only the lines that changed (``ViewWidget._repaint_changed``):
what the screen holds after many partial repaints is exactly what a full repaint draws,
and the lines that did not change were really left alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.geometry import Region

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.widgets import GpuRows

Wait = Callable[..., Awaitable[None]]


async def test_partial_repaints_leave_the_screen_as_a_full_repaint_draws_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, speed=4.0)  # memory, sparklines and values move
    app = GpumonApp([monitor])
    async with app.run_test(size=(120, 40)) as pilot:
        rows = app.dashboard.sections[0].gpu_rows
        assert isinstance(rows, GpuRows) and list(app.screen.query(GpuRows)) == [rows]
        await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
        partial: list[tuple[int, int]] = []  # (lines repainted, lines of the rows)
        set_dirty = rows._set_dirty

        def record(*regions: Region) -> None:
            if regions:
                partial.append((sum(r.height for r in regions), rows.size.height))
            set_dirty(*regions)

        rows._set_dirty = record  # type: ignore[method-assign]
        samples = monitor.samples
        await wait(pilot, lambda: monitor.samples >= samples + 6, timeout=30, what="6 rounds")
        await pilot.pause(0.3)
        assert partial, "the rows were never repainted line by line"
        whole = Region(0, 0, rows.size.width, rows.size.height)
        on_screen = rows.render_lines(whole)  # the styles cache: partly from earlier rounds
        rows.refresh()
        redrawn = rows.render_lines(whole)  # every line drawn afresh
        assert on_screen == redrawn  # segments and styles, line for line
        texts = rows.render().plain.split("\n")
        assert [strip.text.rstrip() for strip in on_screen] == [t.rstrip() for t in texts]
        assert any(0 < repainted < height for repainted, height in partial), partial
