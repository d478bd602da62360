"""The one observer list: order, removal, and a broken listener that is logged and skipped."""

from __future__ import annotations

import logging

import pytest

from gpumon.backends.listeners import Listeners


def test_listeners_are_called_in_order_and_can_be_removed() -> None:
    heard: list[str] = []
    listeners: Listeners[[str]] = Listeners()
    first, second = (lambda x: heard.append(f"1{x}")), (lambda x: heard.append(f"2{x}"))
    listeners.add(first)
    listeners.add(second)
    listeners.emit("a")
    listeners.remove(first)
    listeners.remove(first)  # not there any more: nothing to do
    listeners.emit("b")
    assert heard == ["1a", "2a", "2b"] and len(listeners) == 1


def test_a_broken_listener_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[int] = []
    listeners: Listeners[[int]] = Listeners("alert listener")

    def broken(value: int) -> None:
        raise RuntimeError("ui gone")

    listeners.add(broken)
    listeners.add(heard.append)
    with caplog.at_level(logging.ERROR, logger="gpumon.backends.listeners"):
        listeners.emit(7)  # does not raise
    assert heard == [7]
    assert [r.getMessage() for r in caplog.records] == ["alert listener failed"]
    assert caplog.records[0].exc_info is not None  # with its traceback


def test_a_listener_may_remove_itself_while_called() -> None:
    heard: list[str] = []
    listeners: Listeners[[]] = Listeners()

    def once() -> None:
        heard.append("once")
        listeners.remove(once)

    listeners.add(once)
    listeners.add(lambda: heard.append("always"))
    listeners.emit()
    listeners.emit()
    assert heard == ["once", "always", "always"]
