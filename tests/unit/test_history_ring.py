"""A GPU history's rings read exactly like the ``deque(maxlen=...)`` they replaced: over
appends, wrap-around, values not reported and resizes, by iteration, reversed iteration,
indexing (negative too), slices, ``len`` and truth."""

from __future__ import annotations

from collections import deque
from itertools import islice
from types import GeneratorType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.model import GpuHistory, GpuSample, SeriesRing, TimeRing

values = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(min_value=0, max_value=200_000),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), values),
        st.tuples(st.just("resize"), st.integers(min_value=1, max_value=12)),
    ),
    max_size=80,
)


def _same(ring: SeriesRing | TimeRing, ref: deque[float | None]) -> None:
    assert len(ring) == len(ref) and bool(ring) == bool(ref)
    assert list(ring) == list(ref)
    assert list(reversed(ring)) == list(reversed(ref))
    assert [ring[i] for i in range(len(ref))] == list(ref)
    assert [ring[i] for i in range(-len(ref), 0)] == list(ref)
    assert ring[1:-1] == list(ref)[1:-1] and ring[::2] == list(ref)[::2]
    for i in (len(ref), -len(ref) - 1):
        with pytest.raises(IndexError):
            ring[i]
    # a reader that stops early (the sparkline walks back from the newest sample)
    assert list(islice(reversed(ring), 3)) == list(islice(reversed(ref), 3))
    assert ring.maxlen == ref.maxlen


@settings(max_examples=400)
@given(st.integers(min_value=1, max_value=12), ops)
def test_series_ring_reads_like_a_deque(maxlen: int, steps: list[tuple[str, object]]) -> None:
    ring, ref = SeriesRing(maxlen), deque[float | None](maxlen=maxlen)
    for op, arg in steps:
        if op == "append":
            assert arg is None or isinstance(arg, int | float)
            ring.append(arg)
            ref.append(arg)
        else:
            assert isinstance(arg, int)
            ring, ref = SeriesRing(arg, ring), deque(ref, maxlen=arg)
        _same(ring, ref)
        assert all(v is None or v == v for v in ring)  # never NaN


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=9), st.lists(st.floats(0, 2e9), max_size=40))
def test_time_ring_reads_like_a_deque(maxlen: int, times: list[float]) -> None:
    ring, ref = TimeRing(maxlen), deque[float | None](maxlen=maxlen)
    for t in times:
        ring.append(t)
        ref.append(t)
        _same(ring, ref)


@settings(max_examples=200)
@given(
    st.integers(min_value=1, max_value=10),
    st.lists(
        st.one_of(
            st.tuples(values, values, values, values),
            st.integers(min_value=1, max_value=10),  # an interval change: resize
        ),
        max_size=50,
    ),
)
def test_history_reads_like_its_deques(maxlen: int, steps: list[object]) -> None:
    hist = GpuHistory(maxlen)
    names = ("memory_used_mib", "utilization_pct", "temperature_c", "power_w")
    refs = {n: deque[float | None](maxlen=maxlen) for n in ("times", *names)}
    t = 1000.0
    for step in steps:
        if isinstance(step, int):
            hist.resize(step)
            refs = {n: deque(r, maxlen=step) for n, r in refs.items()}
            assert hist.maxlen == step
            continue
        assert isinstance(step, tuple)
        t += 1.0
        mem, util, temp, power = step
        hist.append(
            t,
            GpuSample(
                0,
                memory_used_mib=None if mem is None else int(mem),
                utilization_pct=util,
                temperature_c=temp,
                power_w=power,
            ),
        )
        refs["times"].append(t)
        refs["memory_used_mib"].append(None if mem is None else float(int(mem)))
        for n, v in zip(names[1:], (util, temp, power), strict=True):
            refs[n].append(v)
        assert len(hist) == len(refs["times"])
        for n, ref in refs.items():
            _same(getattr(hist, n), ref)


def test_a_reported_nan_reads_as_not_reported() -> None:
    ring = SeriesRing(3)
    for v in (1.0, float("nan"), 2.0, float("nan"), 3.0, 4.0):
        ring.append(v)
    assert list(ring) == [None, 3.0, 4.0] and ring[0] is None
    ring.append(5.0)  # the last NaN is overwritten: read at full speed again
    assert list(ring) == [3.0, 4.0, 5.0] and list(reversed(ring)) == [5.0, 4.0, 3.0]
    assert not isinstance(iter(ring), GeneratorType)  # no per-value check left
    assert not isinstance(reversed(ring), GeneratorType)
