"""Package exports resolved on first use.

Each subpackage's ``__init__`` names its public API (``__all__``) and resolves a name the
first time it is asked for, so ``from gpumon.backends.monitor import HostMonitor`` loads
the one module that defines it. Importing a package stays cheap (``gpumon check`` and
``snapshot`` start without the dashboard's half of the library), and a package's
``__init__`` never imports its own modules in an order that could close a cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


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
