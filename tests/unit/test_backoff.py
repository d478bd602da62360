"""The one backoff (reconnects, notifier deliveries, automatic restarts): doubling from the
first wait up to the cap, and still the cap after any number of failures."""

from __future__ import annotations

import random

from gpumon.backends.backoff import backoff_s
from gpumon.backends.monitor.sources import backoff_delay


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
