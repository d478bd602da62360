"""The numbers beside the detail view's plots (issue 36 point 7): at 80x24 a plot is a
few rows tall, so its title says the value now and the window's range."""

from __future__ import annotations

from gpumon.tui.views.plot_text import WindowRange, plot_title, window_range


def test_a_plot_says_its_value_now_and_its_windows_range() -> None:
    """Issue 36 point 7: at 80x24 a plot is four rows: 86 and 96 GiB share one."""
    times = [float(t) for t in range(100)]
    values: list[float | None] = [float(v % 10) for v in range(100)]
    values[-1] = None  # not reported: the newest known value is said
    numbers = window_range(times, values, end=99.0, window=30.0)
    assert numbers == WindowRange(8.0, 0.0, 9.0)
    assert plot_title("power W", numbers) == "power W  8 now (0-9)"
    gib = WindowRange(88064.0, 6144.0, 97280.0)
    assert plot_title("memory GiB", gib, scale=1 / 1024, digits=1) == (
        "memory GiB  86.0 now (6.0-95.0)"
    )
    steady = window_range(times, [5.0] * 100, end=99.0, window=10.0)
    assert plot_title("temperature °C", steady) == "temperature °C  5 now"
    assert plot_title("util %", window_range([], [], end=0.0, window=60.0)) == "util %"
    old = window_range(times, values, end=200.0, window=60.0)  # nothing in the window
    assert old == WindowRange(None, None, None)
