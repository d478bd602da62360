"""Waiting on a condition in a test: the one ``until`` every lane uses.

    await until(lambda: monitor.latest, timeout=30, what="the first sample")
    [row] = await until(lambda: prom.query(q), 60, "GPU 6", in_thread=True)  # blocking HTTP
    await until(lambda: screen.outcome, pause=pilot.pause, what="the swap")  # Textual

A test waits on what it needs, never for a fixed time: under load a fixed sleep is either
too short (a flaky test) or too long (a slow one). The timeout only bounds a failure.

The in-process lanes (tests/unit, tests/views) allow no real-time wait at all (the
conftest fails a test there that sleeps). Code that waits takes its clock and its sleep as
arguments; the test passes a ``FakeClock``, whose ``sleep`` moves the time on and only
yields to the event loop:

    clock = FakeClock()
    hub = Hub(..., clock=clock.time, sleep=clock.sleep)
    await until(lambda: sent, timeout=60, what="the retry", pause=clock.sleep, clock=clock.time)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def until(
    condition: Callable[[], T],
    timeout: float = 20.0,
    what: str | Callable[[], str] = "the condition",
    *,
    step: float = 0.05,
    pause: Callable[[float], Awaitable[object]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    in_thread: bool = False,
) -> T:
    """``condition()``'s first truthy value, polled every ``step`` seconds (``in_thread``:
    called in a thread, for a blocking check, so that the event loop keeps serving).

    Between polls ``await pause(step)``: ``asyncio.sleep`` by default, ``pilot.pause`` to
    let a Textual app run, ``monitor.wait_for_update`` to wake on new data, a
    ``FakeClock``'s ``sleep`` in the in-process lanes. Fails the test ("timed out waiting
    for WHAT after N s") once ``timeout`` seconds of ``clock`` have passed; ``what`` may be
    a function, called then, to say the state things were left in."""
    __tracebackhide__ = True  # a timeout reads as the test's own line
    wait = pause or asyncio.sleep
    start = clock()
    while True:
        value = await asyncio.to_thread(condition) if in_thread else condition()
        if value:
            return value
        if clock() - start > timeout:
            said = what() if callable(what) else what
            pytest.fail(f"timed out waiting for {said} after {timeout:g} s")
        await wait(step)


async def seconds_until(
    condition: Callable[[], object],
    timeout: float = 20.0,
    what: str = "the condition",
    *,
    step: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """How many seconds of ``clock`` passed until ``condition()`` held (``until``'s
    polling and failure), for a test that pins how soon something happens."""
    __tracebackhide__ = True
    start = clock()
    await until(condition, timeout=timeout, what=what, step=step, clock=clock)
    return clock() - start


class FakeClock:
    """A clock that moves only when told to: ``time()`` reads it, ``await sleep(s)`` moves
    it on by ``s`` and yields to the event loop once (no real time passes), ``advance(s)``
    moves it from synchronous code."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)
