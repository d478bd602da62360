"""A GPU's history keeps exactly the values it was given, sharing one float object for
a repeated value or a small whole number (an hour of 8 GPUs is 144,000 values)."""

from __future__ import annotations

from gpumon.backends.model import GpuHistory, GpuSample


def test_values_are_kept_and_repeats_and_whole_numbers_share_one_object() -> None:
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
    assert list(hist.memory_used_mib) == [70000.0, 70000.0, None, None]
    assert list(hist.temperature_c) == [61.0, None, 62.5, 62.5]
    assert list(hist.power_w) == [301.27, 301.27, None, 2000.0]
    util = list(hist.utilization_pct)
    assert util[:2] == [45.0, 45.0] and util[2] != util[2] and util[3] == 1024.0
    assert hist.power_w[0] is hist.power_w[1]  # a repeat: the previous object
    assert hist.memory_used_mib[0] is hist.memory_used_mib[1]
    assert hist.temperature_c[2] is hist.temperature_c[3]
    other = GpuHistory(10)
    other.append(0.0, GpuSample(1, utilization_pct=float("45")))
    assert other.utilization_pct[0] is hist.utilization_pct[0]  # a whole number: shared
    assert all(isinstance(v, float) for v in hist.memory_used_mib if v is not None)
