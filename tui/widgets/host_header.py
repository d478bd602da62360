"""A host's header: name, connection state, source, data age, alerts; a second line
with the host-level error while there is one."""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from gpumon.tui.views import Cell, HeaderPart, Palette, Role, fit_parts
from gpumon.tui.widgets.view_widget import ViewWidget


@dataclass(frozen=True, slots=True)
class HeaderView:
    parts: tuple[HeaderPart, ...]
    error: Cell | None
    palette: Palette


class HostHeader(ViewWidget[HeaderView]):
    DEFAULT_CSS = """
    HostHeader { height: 1; width: 1fr; }
    """

    def view_changed(self, old: HeaderView | None) -> None:
        self.styles.height = 2 if self.view is not None and self.view.error else 1

    def render_view(self, view: HeaderView, width: int) -> Text:
        return render_header(view, width)


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
