"""The dashboard delivers through the same notifiers as ``gpumon watch`` when it is the
only gpumon running (``dashboard_delivery``), so a person running only ``gpumon ct200`` is
paged too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.notify.watch import hold_watch_lock
from gpumon.backends.runtime import dashboard_hub
from gpumon.tui.app import GpumonApp

from held_demo import HeldDemo, drafter_read, hub_counts
from notify_schema import check_webhook
from receiver import Receiver

Wait = Callable[..., Awaitable[None]]


def settings(url: str, delivery: str = "auto") -> NotifySettings:
    hook = NotifierConfig(name="hook", kind="webhook", url=url, group_s=0)
    return NotifySettings(
        notifiers={"hook": hook}, min_open_s=0, resolve_after_s=0, dashboard_delivery=delivery
    )


async def test_the_dashboard_pages_the_demo_oom_through_the_webhook(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    with Receiver() as rx:
        hub = NotifyHub(settings(rx.url("/hook")), Outbox(tmp_path / "outbox.sqlite3"))
        # Held at 48 s until the drafter's log was read (an OOM in its backlog is never
        # paged) and the hub counts the demo's alerts: the OOM 3 s after the release.
        held = HeldDemo(tmp_path)
        monitor = demo_monitor(demo_time=48, speed=4.0, held=held)
        app = GpumonApp([monitor], hub=hub)

        def oom_sent() -> bool:  # the OOM opens its incident, or updates the memory warning's
            return any(
                e["kind"] == "cuda_oom" and e["event"] in ("open", "update")
                for r in rx.received("/hook")
                for e in check_webhook(r.json())
            )

        async with app.run_test(size=(100, 40)) as pilot:
            await wait(
                pilot,
                lambda: drafter_read(monitor) and hub_counts(monitor),
                timeout=30,
                what="the drafter's log read and the hub's first samples",
            )
            held.release()
            await wait(pilot, oom_sent, timeout=30, what="the OOM at the webhook")
        assert hub.outbox.path.exists()


def test_auto_delivery_leaves_it_to_a_running_watch(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/hook"
    assert dashboard_hub(None) is None
    assert dashboard_hub(NotifySettings()) is None  # no notifiers
    assert dashboard_hub(settings(url, "never")) is None
    hub = dashboard_hub(settings(url))
    assert hub is not None
    hub.outbox.close()
    lock = hold_watch_lock()
    try:
        assert dashboard_hub(settings(url)) is None  # `gpumon watch` delivers
        hub = dashboard_hub(settings(url, "always"))
        assert hub is not None
        hub.outbox.close()
    finally:
        lock.close()
    hub = dashboard_hub(settings(url))
    assert hub is not None
    hub.outbox.close()
