"""A widget's render cache goes with the widget: toasts that came and went leave no
styles caches (and the lines they hold) behind, so the dashboard's RSS does not climb
with every alert for hours (Textual 8.2.8 kept up to 1,024 of them; tui/textual_fixes)."""

from __future__ import annotations

import gc
from collections.abc import Callable

from textual._styles_cache import StylesCache
from textual.widget import Widget
from textual.widgets._toast import Toast

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.textual_fixes import cache_inner_outer_by_colour


def _orphans() -> int:
    """Styles caches alive without a live widget that owns them."""
    gc.collect()
    objects = gc.get_objects()
    owned = {id(w._styles_cache) for w in objects if isinstance(w, Widget)}
    return sum(isinstance(o, StylesCache) and id(o) not in owned for o in objects)


async def test_toasts_gone_leave_no_styles_caches(
    demo_monitor: Callable[..., HostMonitor],
) -> None:
    app = GpumonApp([demo_monitor(demo_time=30.0)])
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause(0.5)
        shown = 0
        for i in range(30):
            app.notify(f"alert {i}: GPU {i % 8} memory full in ~56 s", timeout=0.3)
            await pilot.pause(0.1)
            shown += bool(app.screen.query(Toast))
        await pilot.pause(1.5)  # every toast timed out and was removed
        assert shown >= 10  # the toasts were drawn (each drew its two widgets)
        assert _orphans() == 0
    assert not cache_inner_outer_by_colour()  # done once, by the app


def test_inner_outer_still_gives_textual_s_colours() -> None:
    from textual.color import Color

    cache_inner_outer_by_colour()
    base, background = Color(10, 20, 30), Color(200, 100, 50, 0.5)
    inner, outer = StylesCache().get_inner_outer(base, background)
    assert inner.background == base + background and outer.background == base
