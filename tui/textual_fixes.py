"""A fix for the pinned Textual (8.2.8), applied once when the app module is imported.

``StylesCache.get_inner_outer`` is an ``lru_cache(1024)`` on a plain method, so its key
holds ``self``: the styles cache of every widget that ever rendered, and the lines that
cache keeps (Strips, each with its own small caches), stay alive after the widget is
gone, until 1,024 of them have been seen. In the dashboard every toast brings two new
widgets (the toast and its holder): with an alert every few minutes, the RSS climbed by
about 1.5 MiB an hour for many hours (tracemalloc over a ``gpumon local`` run). The
values depend only on the two colours, so the cache is keyed on them alone here.

Upstream: Textual issue #6665 (https://github.com/Textualize/textual/issues/6665), open
when this was written; no release fixes it yet (Textual's main, commit 03d11c9, still
decorates the method). Drop this module with the pin that fixes it: the patch is applied
only while the method is such a cache, and does nothing once it is not.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from textual._styles_cache import StylesCache


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
