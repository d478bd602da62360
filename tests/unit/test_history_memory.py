"""A GPU's history keeps exactly the values it was given (``None`` for not reported, never
0 and never NaN) and takes all its memory when it is made: an hour of samples filling it
allocates nothing more, so the dashboard's RSS does not climb for its first hour."""

from __future__ import annotations

import tracemalloc

from gpumon.backends.model import GpuHistory, GpuSample


def test_values_are_kept_and_not_reported_stays_none() -> None:
    hist = GpuHistory(10)
    samples = [
        GpuSample(
            0, utilization_pct=45.0, temperature_c=61.0, power_w=301.27, memory_used_mib=70000
        ),
        GpuSample(
            0, utilization_pct=45.0, temperature_c=None, power_w=301.27, memory_used_mib=70000
        ),
        GpuSample(0, utilization_pct=float("nan"), temperature_c=62.5, power_w=None),
        GpuSample(0, utilization_pct=1024.0, temperature_c=62.5, power_w=2000.0),
    ]
    for k, s in enumerate(samples):
        hist.append(float(k), s)
    assert list(hist.times) == [0.0, 1.0, 2.0, 3.0]
    assert list(hist.memory_used_mib) == [70000.0, 70000.0, None, None]
    assert list(hist.temperature_c) == [61.0, None, 62.5, 62.5]
    assert list(hist.power_w) == [301.27, 301.27, None, 2000.0]
    assert list(hist.utilization_pct) == [45.0, 45.0, None, 1024.0]  # a NaN: not reported
    assert all(isinstance(v, float) for v in hist.memory_used_mib if v is not None)


def test_filling_an_hour_allocates_nothing_after_creation() -> None:
    sample = GpuSample(
        0, utilization_pct=37.0, temperature_c=55.0, power_w=250.5, memory_used_mib=1000
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        hists = [GpuHistory(3600) for _ in range(8)]
        made = tracemalloc.get_traced_memory()[0]
        for k in range(2 * 3600):  # full, then wrapped round once
            for hist in hists:
                hist.append(float(k), sample)
        filled = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert made - before >= 8 * 5 * 3600 * 8  # every slot, from the start
    assert filled - made < 4096, f"{filled - made} bytes allocated while filling"
    assert all(len(h) == 3600 and h.times[0] == 3600.0 for h in hists)
