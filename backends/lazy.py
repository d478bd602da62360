"""Package exports and regular expressions resolved on first use.

Each subpackage's ``__init__`` names its public API (``__all__``) and resolves a name the
first time it is asked for, so ``from gpumon.backends.monitor import HostMonitor`` loads
the one module that defines it. Importing a package stays cheap (``gpumon check`` and
``snapshot`` start without the dashboard's half of the library), and a package's
``__init__`` never imports its own modules in an order that could close a cycle.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

__all__ = ["lazy_exports", "lazy_pattern"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each public name to the
    submodule (relative to ``package``) that defines it. An unknown name raises
    ``AttributeError`` as a module attribute lookup does."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        return value

    return __getattr__


class _LazyPattern:
    """``re.compile(pattern, flags)`` made on the first use of any of its attributes, which
    are then the compiled pattern's own (bound methods in the instance): no cost per call
    after the first. ``pattern`` is there from the start, so a pattern built from another
    one's text compiles neither."""

    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern = pattern
        self._flags = flags

    def __getattr__(self, name: str) -> Any:  # only for what the instance does not hold yet
        if name.startswith("__"):
            raise AttributeError(name)  # copy, pickle and the like probing for hooks
        compiled = re.compile(self.pattern, self._flags)
        for attr in (
            "match",
            "search",
            "fullmatch",
            "finditer",
            "findall",
            "sub",
            "subn",
            "split",
            "flags",
            "groups",
            "groupindex",
        ):
            setattr(self, attr, getattr(compiled, attr))
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy_pattern({self.pattern!r})"


def lazy_pattern(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A module-level pattern compiled when first used, not when its module is imported:
    a one-shot that never reads a training log never compiles the progress parsers' 40
    patterns. Use it where ``re.compile`` would be at import time, for patterns called
    through their methods (``re.sub(p, ...)`` and ``isinstance(p, re.Pattern)`` want a
    real one)."""
    return cast("re.Pattern[str]", _LazyPattern(pattern, flags))
