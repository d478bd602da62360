"""A toast whose notification expired before it was mounted goes away; it froze the app.

Textual 8.2.8 gives a toast's timer its notification's ``time_left``, negative once the
notification expired, and its ``Timer`` never ends with an interval below 0: the event
loop spun at 100 % of a core for good (a dashboard test under load hung so; see
tui/textual_fixes.py, fix 2).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.notifications import Notification
from textual.timer import Timer
from textual.widgets import Static
from textual.widgets._toast import Toast, ToastHolder, ToastRack

from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.textual_fixes import MIN_TIMER_S, clamp_timer_intervals


@pytest.mark.timeout(60)  # without the fix the loop never yields: fail, do not hang
async def test_a_toast_made_for_an_expired_notification_goes_and_the_app_answers(
    demo_monitor: Callable[..., HostMonitor],
) -> None:
    """The race's outcome, made on purpose: ``ToastRack.show`` checks ``has_expired``,
    then makes the ``Toast`` (which reads ``time_left``); a process descheduled between
    the two on a loaded machine makes a toast for a notification that expired 0.1 s ago
    (what py-spy showed). Here that toast is made and mounted as the rack does."""
    app = GpumonApp([demo_monitor(demo_time=30.0)])
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await pilot.pause(0.3)
        app.notify("drafter: GPU 6 memory 97.8% used", timeout=5.0)
        await pilot.pause(0.3)
        rack = app.screen.query_one(ToastRack)
        late = Notification("drafter: CUDA OOM on GPU 6", timeout=1.0)
        late.raised_at = time.time() - 1.1  # expired 0.1 s ago, not yet pruned
        app._notifications.add(late)
        await rack.mount(ToastHolder(Toast(late), id=rack._toast_id(late)))
        await pilot.pause(0.5)
        toasts = [str(t.render()) for t in app.screen.query(Toast)]
        assert toasts == ["drafter: GPU 6 memory 97.8% used"]  # the late one went at once
        await pilot.press("question_mark")  # the app still answers keys
        await pilot.pause(0.3)
        assert app.screen is not app.dashboard


def test_a_timer_is_never_given_an_interval_below_the_minimum() -> None:
    clamp_timer_intervals()
    assert not clamp_timer_intervals()  # once
    target = Static()  # any message target: the timer is not started
    for asked, given in ((-0.1, MIN_TIMER_S), (0.0, MIN_TIMER_S), (0.25, 0.25)):
        timer = Timer(target, asked, repeat=0)
        assert timer._interval == given
