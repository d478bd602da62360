"""A host's header: name, connection state, source, data age, alerts; a second line
with the host-level error while there is one."""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from gpumon.tui.views import Cell, HeaderPart, Palette, Role, fit_parts


@dataclass(frozen=True, slots=True)
class HeaderView:
    parts: tuple[HeaderPart, ...]
    error: Cell | None
    palette: Palette


class HostHeader(Widget):
    DEFAULT_CSS = """
    HostHeader { height: 1; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: HeaderView | None = None

    def show(self, view: HeaderView) -> bool:
        if view == self.view:
            return False
        self.view = view
        self.styles.height = 2 if view.error else 1
        self.refresh()
        return True

    @property
    def plain(self) -> str:
        """The header as plain text at the current width (tests read this)."""
        return self.render().plain

    def render(self) -> Text:
        if self.view is None:
            return Text()
        return render_header(self.view, self.size.width or 80)


def render_header(view: HeaderView, width: int) -> Text:
    pal = view.palette
    line = Text(no_wrap=True, overflow="ellipsis")
    for i, part in enumerate(fit_parts(list(view.parts), width - 1)):
        if i:
            line.append("  ")
        if part.badge:
            line.append(f" {part.text} ", pal.badge(part.role))
        elif i == 0:
            line.append(part.text, Style(bold=True, color=pal.accent))
        else:
            line.append(part.text, pal.text(part.role) if part.role != Role.OK else pal.ok)
    line.truncate(width, overflow="ellipsis")
    if view.error is None:
        return line
    err = Text("  ")
    err.append(view.error.text, pal.text(view.error.role))
    err.truncate(width, overflow="ellipsis")
    return Text("\n").join([line, err])
