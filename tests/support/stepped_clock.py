"""A wall clock a test steps, as NTP or a person setting the clock does, beside the clock
that runs on (a ``FakeClock``, or the real monotonic clock). For the tests of issue 34 point 5: a
wall-clock step changes no verdict."""

from __future__ import annotations

from collections.abc import Callable


class Wall:
    """The wall clock: ``base()`` (the clock that runs on) plus ``offset``, which the test
    steps; reading ``at`` now (None: ``base()`` itself)."""

    def __init__(self, base: Callable[[], float], at: float | None = None) -> None:
        self.base = base
        self.offset = 0.0 if at is None else at - base()

    def __call__(self) -> float:
        return self.base() + self.offset
