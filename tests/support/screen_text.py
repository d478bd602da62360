"""What an app under Pilot has on screen, as text: the composed frame, every layer (toasts,
the strip, the footer) as the terminal would show it."""

from __future__ import annotations

from typing import Any

from textual.app import App


def screen_lines(app: App[Any]) -> list[str]:
    """Every line of the composed frame, each as wide as the screen."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


def screen_text(app: App[Any]) -> str:
    """``screen_lines`` joined by newlines."""
    return "\n".join(screen_lines(app))
