"""What the action dialogs (restart, torch swap, doctor) share: plan rows and outcomes
styled by their level."""

from __future__ import annotations

from collections.abc import Mapping

from rich.style import Style
from rich.text import Text

from gpumon.backends.actions import Level
from gpumon.tui.views import Palette, Role

LEVEL_ROLES: Mapping[Level, Role] = {
    "ok": Role.OK,
    "info": Role.NORMAL,
    "warning": Role.WARNING,
    "problem": Role.CRITICAL,
}


def level_style(pal: Palette, level: Level) -> Style:
    """A row's text in its level's colour (info and ok stay plain, as all calm text does)."""
    return pal.text(LEVEL_ROLES[level])


def outcome_line(word: str, level: Level, message: str, duration_s: float, pal: Palette) -> Text:
    """``FAILED: verify: drafter exited with code 3 (12.5 s)``: the outcome's word in bold in
    its level's colour, then its message and how long the run took."""
    text = Text(f"{word.upper()}: ", Style(color=pal.colour(LEVEL_ROLES[level]), bold=True))
    text.append(f"{message} ({duration_s:.1f} s)")
    return text
