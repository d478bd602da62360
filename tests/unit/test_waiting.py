"""The shared ``until`` (tests/support/waiting.py) on a ``FakeClock``: no real time passes
in the fast lanes, a timeout still fails the test with what was awaited."""

from __future__ import annotations

import asyncio

import pytest

from waiting import FakeClock, until


async def test_until_gives_the_first_truthy_value_as_the_fake_clock_moves() -> None:
    clock = FakeClock()
    start = clock.time()
    got = await until(
        lambda: clock.time() - start >= 3 and "three", pause=clock.sleep, clock=clock.time
    )
    assert got == "three" and 3 <= clock.time() - start < 3.1


async def test_until_fails_the_test_with_what_it_waited_for() -> None:
    clock = FakeClock()
    with pytest.raises(pytest.fail.Exception, match="timed out waiting for the OOM after 5 s"):
        await until(lambda: False, timeout=5, what="the OOM", pause=clock.sleep, clock=clock.time)
    assert 5 < clock.time() - 1_700_000_000.0 < 5.2


async def test_a_fake_sleep_lets_other_tasks_run() -> None:
    clock, ran = FakeClock(), []

    async def other() -> None:
        ran.append(clock.time())

    task = asyncio.ensure_future(other())
    await clock.sleep(60)
    await task
    assert ran == [clock.time()] and clock.time() == 1_700_000_060.0
