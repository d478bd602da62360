"""The help screen: every key, where it works and what it does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
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

    def _sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """(where, [(keys, what), ...]) in order."""
        out: list[tuple[str, list[tuple[str, str]]]] = []
        for section, keys, what in self.rows:
            if not out or out[-1][0] != section:
                out.append((section, []))
            out[-1][1].append((keys, what))
        return out

    def _text(self) -> Group:
        """Each section's title, then its keys and what they do in two columns: the keys as
        wide as the widest ("0 1 2 3 4 5 6 7 8 9"), a long description wrapped beside them,
        not back under the keys."""
        parts: list[RenderableType] = []
        for i, (section, rows) in enumerate(self._sections()):
            title = Text(f"{section}", Style(bold=True, underline=True))
            parts.append(Text("\n").join([Text(""), title]) if i else title)
            grid = Table.grid(padding=(0, 2, 0, 0), expand=True)
            grid.add_column(no_wrap=True, width=max(len(k) for k, _ in rows) + 2)
            grid.add_column(ratio=1)
            for keys, what in rows:
                grid.add_row(Text(f"  {keys}", Style(bold=True)), Text(what))
            parts.append(grid)
        parts.append(Text("\nEvery action is also in the command palette.", "italic"))
        return Group(*parts)

    @property
    def plain(self) -> str:
        """Every row as "keys  what", unwrapped (tests read it)."""
        lines = []
        for section, rows in self._sections():
            lines.append(section)
            lines += [f"  {keys}  {what}" for keys, what in rows]
        return "\n".join([*lines, "Every action is also in the command palette."])
