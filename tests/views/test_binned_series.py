"""``BinnedSeries`` gives what ``bin_series`` gives, call after call, while a history
grows, drops its oldest samples, pauses, rewinds, is replaced or is drawn at a new width."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.tui.views.sparkline import BinnedSeries, bin_series

steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=4),  # samples appended before this draw
        st.sampled_from([1.0, 1.0, 1.0, 0.0, -7.0, 30.0]),  # how the end moves
        st.sampled_from([8, 8, 8, 3]),  # columns (a resize now and then)
        st.booleans(),  # the mean (utilisation) or the max (memory)
        st.booleans(),  # a value not reported
        st.integers(min_value=0, max_value=30),  # 0: the history is replaced
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300)
@given(steps, st.sampled_from([2.0, 5.0]), st.sampled_from([None, 12, 40]))
def test_binned_equals_a_full_binning(
    draws: list[tuple[int, float, int, bool, bool, int]], span: float, maxlen: int | None
) -> None:
    times: deque[float] = deque(maxlen=maxlen)
    values: deque[float | None] = deque(maxlen=maxlen)
    binned, t, end = BinnedSeries(), 1000.0, 1000.0
    for added, move, count, mean, gap, replace in draws:
        if replace == 0:
            times, values = deque(maxlen=maxlen), deque(maxlen=maxlen)
        for _ in range(added):
            t += 0.9
            times.append(t)
            values.append(None if gap else (t * 7) % 13)
        end = t if move == 1.0 else end + move
        got = binned.bins(times, values, end=end, span=span, count=count, mean=mean)
        assert got == bin_series(times, values, end=end, span=span, count=count, mean=mean)


def test_a_draw_re_bins_only_the_newest_columns() -> None:
    """A second later, only the samples of the newest columns are read again."""
    reads = [0]

    class Counting(deque[float]):
        def __reversed__(self):  # type: ignore[no-untyped-def]
            for x in super().__reversed__():
                reads[0] += 1
                yield x

    times = Counting(float(t) for t in range(1000))
    values: deque[float | None] = deque(float(t % 50) for t in range(1000))
    binned = BinnedSeries()
    binned.bins(times, values, end=999.0, span=5.0, count=100)
    assert reads[0] >= 500  # the first call bins the whole window
    times.append(1000.0)
    values.append(3.0)
    reads[0] = 0
    got = binned.bins(times, values, end=1000.0, span=5.0, count=100)
    assert 0 < reads[0] <= 12  # the column of 995-999 and the new one of 1000
    assert got == bin_series(times, values, end=1000.0, span=5.0, count=100)
