"""The help screen: every key, where it works and what it does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_NAMES = {
    "question_mark": "?",
    "plus": "+",
    "minus": "-",
    "equals_sign": "=",
    "enter": "Enter",
    "escape": "Esc",
    "up": "↑",
    "down": "↓",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "home": "Home",
    "end": "End",
    "ctrl+p": "Ctrl+P",
    "ctrl+c": "Ctrl+C",
    "full_stop": ".",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "space": "Space",
}


def key_text(keys: str) -> str:
    """``"plus,equals_sign"`` -> ``"+ ="``."""
    return " ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))


def help_rows(sections: Sequence[tuple[str, Iterable[BindingType]]]) -> list[tuple[str, str, str]]:
    """(where, keys, what) for every binding with a description, in order; neighbours that
    say the same (the digits: "Jump to that GPU") share one row, their keys joined."""
    rows: list[tuple[str, str, str]] = []
    for where, bindings in sections:
        for b in bindings:
            if not (isinstance(b, Binding) and b.description):
                continue
            what = b.tooltip or b.description
            if rows and rows[-1][0] == where and rows[-1][2] == what:
                rows[-1] = (where, f"{rows[-1][1]} {key_text(b.key)}", what)
            else:
                rows.append((where, key_text(b.key), what))
    return rows


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close help"),
    ]

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__(id="help")
        self.rows = rows

    def compose(self) -> ComposeResult:
        box = VerticalScroll(id="help-box")
        box.border_title = "gpumon keys"
        box.border_subtitle = "Esc closes"
        with box:
            yield Static(self._text(), id="help-text", markup=False)

    def _text(self) -> Text:
        text = Text()
        where = None
        for section, keys, what in self.rows:
            if section != where:
                if where is not None:
                    text.append("\n")
                text.append(f"{section}\n", Style(bold=True, underline=True))
                where = section
            text.append(f"  {keys:<14}", Style(bold=True))
            text.append(f"{what}\n")
        text.append("\nEvery action is also in the command palette.", "italic")
        return text

    @property
    def plain(self) -> str:
        return self._text().plain
