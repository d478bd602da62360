"""The command palette's gpumon commands, from the action table: the actions of the screen
the palette was opened from (the dashboard, or the detail view over it) that can run now,
the app's own (quit, help, next theme) and one per theme.

Actions that cannot run now (``check_action`` says so) are left out rather than shown
and ignored: in read-only mode no command that changes a machine is offered.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode

from gpumon.tui.dashboard.action_table import PaletteEntry, actions_on, palette_entries


@runtime_checkable
class PaletteSource(Protocol):
    """A screen whose table actions go in the palette (run in the screen's namespace)."""

    def palette_entries(self) -> list[PaletteEntry]:
        """The entries that can run now."""
        ...


class GpumonCommands(Provider):
    """The calling screen's actions, the app's own and the themes for the command palette."""

    def _commands(self) -> list[tuple[PaletteEntry, DOMNode]]:
        screen, app = self.screen, self.app
        out: list[tuple[PaletteEntry, DOMNode]] = []
        if isinstance(screen, PaletteSource):
            out += [(e, screen) for e in screen.palette_entries()]
        for entry in palette_entries(actions_on("app"), "app", job=None, host=""):
            if app.check_action(entry.action, ()) is True:
                out.append((entry, app))
        for name in sorted(app.available_themes):
            theme = PaletteEntry(
                f"Theme: {name}", f"Switch to the {name} theme", f"set_theme({name!r})"
            )
            out.append((theme, app))
        return out

    async def discover(self) -> Hits:
        for entry, namespace in self._commands():
            run = partial(self.app.run_action, entry.action, namespace)
            yield DiscoveryHit(entry.title, run, help=entry.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry, namespace in self._commands():
            score = matcher.match(entry.title)
            if score > 0:
                run = partial(self.app.run_action, entry.action, namespace)
                yield Hit(score, matcher.highlight(entry.title), run, help=entry.help)
