"""``ViewWidget``: a widget that draws one view (plain data, compared for equality).

The dashboard redraws about once a second; most of the time nothing a widget shows has
changed, so each widget is handed a frozen view and repaints only when the view differs
from the one it has. ``render_view`` is the pure drawing (tests and the bench call the
module-level render functions behind it); ``plain`` is what the widget shows now, as text.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from rich.text import Text
from textual.widget import Widget

V = TypeVar("V")


class ViewWidget(Widget, Generic[V]):
    """Draws ``self.view``; ``show(view)`` replaces it. ``None`` draws nothing."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: V | None = None

    def show(self, view: V | None) -> bool:
        """Draw ``view``; returns whether it differs from the one on show (only then is
        the widget repainted)."""
        if view == self.view:
            return False
        old, self.view = self.view, view
        self.view_changed(old)
        self.refresh()
        return True

    def view_changed(self, old: V | None) -> None:
        """Called with the previous view once ``self.view`` is new: a subclass sets its
        height, visibility or classes here."""

    def render_view(self, view: V, width: int) -> Text:
        """``view`` drawn ``width`` cells wide."""
        raise NotImplementedError

    def render(self) -> Text:
        if self.view is None:
            return Text()
        return self.render_view(self.view, self.size.width or self.app.size.width)

    @property
    def plain(self) -> str:
        """The widget's text at its current width ("" without a view)."""
        return self.render().plain
