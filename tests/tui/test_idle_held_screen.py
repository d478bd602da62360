"""The dashboard on the demo's ``idle`` scenario at 150 s: the drafter's GPUs held and
idle are one warning incident, its headline in the strip and a "GPU held and idle" toast
naming the holder; at 40 s (idle 10 s of the demo's 60) the strip says nothing of it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp

Wait = Callable[..., Awaitable[None]]


def toasts(app: GpumonApp) -> list[tuple[str, str]]:
    """(message, title) of every notification from here on."""
    seen: list[tuple[str, str]] = []
    original = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        seen.append((message, str(kwargs.get("title", ""))))
        original(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return seen


async def test_the_idle_drafter_is_one_incident_on_the_screen(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=150.0, scenario="idle")
    app = GpumonApp([monitor], bell=False)
    seen = toasts(app)
    async with app.run_test(size=(120, 40)) as pilot:
        strip = app.dashboard.strip
        await wait(pilot, lambda: "drafter's GPUs 5-7 idle" in strip.plain, what="the strip")
        assert "while holding 84-86 GiB each" in strip.plain
        await wait(pilot, lambda: any(t == "WARNING: GPU held and idle" for _, t in seen))
        message = next(m for m, t in seen if t == "WARNING: GPU held and idle")
        assert message.startswith("drafter's GPUs 5-7 idle (")  # the toast cuts the holder
        host_side = "held by PID 874 train.drafter in CT200 (+2 more)"  # the Proxmox host's list

        def said() -> list[str]:
            return [a.message for a in monitor.alerts.active() if a.kind == "gpu_idle_held"]

        await wait(pilot, lambda: said()[0].endswith(host_side), what="the host-side holder")


async def test_not_before_the_window(demo_monitor: Callable[..., HostMonitor], wait: Wait) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, scenario="idle")
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
        await pilot.pause(0.5)
        assert "idle" not in app.dashboard.strip.plain
        assert not [a for a in monitor.alerts.history() if a.kind == "gpu_idle_held"]
