"""Fixes for the pinned Textual (8.2.8), applied once when the app is made.

1. ``StylesCache.get_inner_outer`` is an ``lru_cache(1024)`` on a plain method, so its
key holds ``self``: the styles cache of every widget that ever rendered, and the lines
that cache keeps (Strips, each with its own small caches), stay alive after the widget is
gone, until 1,024 of them have been seen. In the dashboard every toast brings two new
widgets (the toast and its holder): with an alert every few minutes, the RSS climbed by
about 1.5 MiB an hour for many hours (tracemalloc over a ``gpumon local`` run). The
values depend only on the two colours, so the cache is keyed on them alone here.

Upstream: Textual issue #6665 (https://github.com/Textualize/textual/issues/6665), open
when this was written; no release fixes it yet (Textual's main, commit 03d11c9, still
decorates the method). Drop this fix with the pin that fixes it: the patch is applied
only while the method is such a cache, and does nothing once it is not.

2. A ``Timer`` with an interval of 0 or less never ends: 8.2.8's ``Timer._run`` skips
late ticks with ``count = int((now - start) / interval + 1)``, which with a negative
interval is negative, so the loop recomputes forever on the event loop, holding it (the
screen freezes at 100 % of a core; 0 divides by zero). A ``Toast`` sets its timer to its
notification's ``time_left``, which is negative when the toast is made after the
notification expired: ``ToastRack.show`` checks ``has_expired`` and then makes the toast,
and a process descheduled between the two on a loaded machine does so (a dashboard test
hung for minutes; py-spy showed ``interval -0.101``). Upstream's ``timer.py`` at commit
03ad3af counts ``count += 1`` there instead, and ends; no upstream issue was found for
it. Intervals are held at ``MIN_TIMER_S`` or more here: such a timer fires at once, as
it was due. Drop this fix with the pin whose ``Timer`` ends on such an interval.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from textual._styles_cache import StylesCache
from textual.timer import Timer

MIN_TIMER_S = 0.001  # the shortest interval a Timer is given (fix 2)


def cache_inner_outer_by_colour() -> bool:
    """Key ``StylesCache.get_inner_outer`` on its two colours, not on its instance.
    Returns whether it was changed now (False once done, or on a Textual whose method
    is no longer such a cache)."""
    method = StylesCache.__dict__.get("get_inner_outer")
    compute: Callable[..., Any] | None = getattr(method, "__wrapped__", None)
    if compute is None or not hasattr(method, "cache_clear"):
        return False
    by_colour = lru_cache(1024)(lambda base, background: compute(None, base, background))

    def get_inner_outer(self: StylesCache, base: Any, background: Any) -> Any:
        return by_colour(base, background)

    get_inner_outer.__doc__ = compute.__doc__
    setattr(StylesCache, "get_inner_outer", get_inner_outer)  # noqa: B010 (a method)
    return True


def clamp_timer_intervals() -> bool:
    """Give every ``Timer`` an interval of at least ``MIN_TIMER_S`` (fix 2). Returns
    whether it was changed now (False once done)."""
    init = Timer.__init__
    if getattr(init, "gpumon_clamped", False):
        return False

    def clamped_init(self: Timer, event_target: Any, interval: float, **kw: Any) -> None:
        init(self, event_target, max(interval, MIN_TIMER_S), **kw)

    clamped_init.gpumon_clamped = True  # type: ignore[attr-defined]
    clamped_init.__doc__ = init.__doc__
    setattr(Timer, "__init__", clamped_init)  # noqa: B010 (a method)
    return True
