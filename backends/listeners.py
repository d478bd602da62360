"""``Listeners``: the one observer list of the library (add, remove, emit).

A listener that raises is logged and skipped: a broken display never stops monitoring,
alerting or a restart. Listeners are called in the order they were added, on the caller's
thread (the event loop, everywhere in gpumon); one may remove itself (or add another)
while being called, which takes effect from the next ``emit``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

__all__ = ["Listeners"]

P = ParamSpec("P")
log = logging.getLogger(__name__)


class Listeners(Generic[P]):
    """``Listeners[[Alert]]``: functions taking an ``Alert``; ``emit(alert)`` calls each."""

    def __init__(self, what: str = "listener") -> None:
        self.what = what  # named in the log line when one fails
        self._calls: list[Callable[P, None]] = []

    def add(self, listener: Callable[P, None]) -> None:
        self._calls.append(listener)

    def remove(self, listener: Callable[P, None]) -> None:
        """Forget ``listener`` (its first registration); one never added is ignored."""
        if listener in self._calls:
            self._calls.remove(listener)

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for listener in list(self._calls):
            try:
                listener(*args, **kwargs)
            except Exception:
                log.exception("%s failed", self.what)

    def __len__(self) -> int:
        return len(self._calls)
