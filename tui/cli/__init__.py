"""The command line, Textual-free at import: headless commands and starting the dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .launch import main

__all__ = ["main"]

# Lazy: ``launch`` starts the early agent before the rest of the command line is imported.
# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__, {"main": "launch"})
