"""The one backoff (reconnects, notifier deliveries, automatic restarts, the probes of an
outage): doubling from the first wait up to the cap, and still the cap after any number
of failures."""

from __future__ import annotations

import itertools
import random

from gpumon.backends.backoff import backoff_s
from gpumon.backends.monitor.sources import backoff_delay
from gpumon.backends.monitor.sources.connection import (
    PROBE_CAP_S,
    PROBE_FAST_S,
    PROBE_S,
    ProbeSchedule,
)


def test_it_doubles_from_the_first_wait_up_to_the_cap() -> None:
    waits = [backoff_s(n, first=1.0, cap=30.0) for n in range(7)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff_s(-1, first=5.0, cap=300.0) == 5.0


def test_a_long_outage_still_waits_the_cap() -> None:
    # A host down for a night: one reconnect every ~30 s is past 1,024 attempts by
    # morning, where 2.0 ** attempts no longer fits a float.
    assert backoff_s(5000, first=1.0, cap=30.0) == 30.0
    delay = backoff_delay(5000, random.Random(0))
    assert 15.0 <= delay <= 30.0


def _probe_times(schedule: ProbeSchedule, seconds: float) -> list[float]:
    """When ``schedule`` probes a host that stays unanswering for ``seconds``, with the
    whole time spent waiting (the SSH attempts between the waits only take from it)."""
    schedule.begin(0.0)
    times = []
    while schedule.due <= seconds:
        times.append(schedule.due)
        schedule.probed(schedule.due)
    return times


def test_the_probes_of_an_outage_back_off_to_one_a_minute() -> None:
    """Issue 34 point 10: a host that accepts and never answers got a probe every second
    for as long as it was down (637 connections in 15 minutes with the SSH attempts)."""
    times = _probe_times(ProbeSchedule(), 900.0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    fast = [t for t in times if t < PROBE_FAST_S]
    assert len(fast) == PROBE_FAST_S / PROBE_S  # the first two minutes: every second
    assert gaps[len(fast) : len(fast) + 7] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert all(gap == PROBE_CAP_S for gap in gaps[len(fast) + 5 :])  # then one a minute
    assert len(times) == 137  # of 900 a second before


def test_an_outage_that_ends_probes_fast_again_at_the_next() -> None:
    schedule = ProbeSchedule(fast_s=10.0, cap_s=8.0)
    assert len(_probe_times(schedule, 39.0)) == 10 + 5  # 10 fast, then at 10, 12, 16, 24, 32
    schedule.begin(100.0)  # a later wait of the same outage: the schedule runs on
    assert (schedule.due, schedule.slowed) == (40.0, 5)
    schedule.end()  # a session delivered
    schedule.begin(200.0)
    assert (schedule.due, schedule.slowed) == (200.0, 0)
    schedule.probed(200.0)
    assert schedule.due == 200.0 + PROBE_S
