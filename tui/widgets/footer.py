"""The footer of every gpumon screen: Textual's compact footer, showing only whole keys.

Textual lays the keys out in one row and docks the command palette's key over its right
end; where the keys are wider than the screen (the detail view, the alert history at 80
columns) the last of them ran under it, cut ("w Torc▏^p palette"). Here a key that does
not end before the palette's key is hidden (``visibility``: it keeps its place in the
row, so it comes back when the screen widens); the help screen and the palette still
list it.
"""

from __future__ import annotations

from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterLabel, KeyGroup


class KeyFooter(Footer):
    """``Footer(compact=True)`` without cut keys."""

    def __init__(self) -> None:
        super().__init__(compact=True)

    async def recompose(self) -> None:
        await super().recompose()  # the screen's keys changed: a new row of them
        self.call_after_refresh(self.fit_keys)

    def on_resize(self) -> None:
        self.call_after_refresh(self.fit_keys)

    def fit_keys(self) -> None:
        """Hide the keys that would end past the start of the palette's key (or the
        footer's end); show the others. Measured from their sizes and margins, which a
        hidden key keeps (its region is empty), as the horizontal layout places them."""
        keys = [c for c in self.children if not c.has_class("-command-palette")]
        palette = [c for c in self.children if c.has_class("-command-palette")]
        if self.size.width and any(c.display and not c.outer_size.width for c in self.children):
            # Not laid out yet (right after a recompose every key is 0 wide, so all would
            # "fit" and the last ones run under the palette's key): fit again once they
            # are. The fit a resize or recompose queues may have been this one; under load
            # no other comes (issue 36: "? Help" lost under "^p palette" in CI).
            self.call_after_refresh(self.fit_keys)
            return
        end = self.size.width - sum(c.outer_size.width + c.styles.margin.width for c in palette)
        # a group's keys ("+-") and its label ("Interval") go together
        units: list[list[Widget]] = []
        for child in keys:
            if isinstance(child, FooterLabel) and units and isinstance(units[-1][0], KeyGroup):
                units[-1].append(child)
            else:
                units.append([child])
        x, margin = 0, 0
        for unit in units:
            for child in unit:
                x += max(margin, child.styles.margin.left)  # neighbouring margins collapse
                x += child.outer_size.width
                margin = child.styles.margin.right
            fits = x <= end
            for child in unit:
                if child.visible != fits:
                    child.visible = fits
