"""What an app under Pilot said in its notifications, for the tests that check the words."""

from __future__ import annotations

from typing import Any

from textual.app import App


def said(app: App[Any]) -> list[str]:
    """The message of every notification ``app`` shows from here on (they still show)."""
    seen: list[str] = []
    original = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        seen.append(message)
        original(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return seen
