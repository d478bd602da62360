"""The command palette from a Pilot test, waited on by what it shows, never for a fixed time.

    await run_from_palette(pilot, "Pause / resume updates")
    options = await search_palette(pilot, "job drafter")

The palette searches in a worker and shows its hits in batches (Textual's
``CommandPalette._gather_commands``: a quarter second apart, later on a loaded machine,
and "No matches found" half a second after a search found nothing). Enter after a fixed
pause ran nothing (no list yet) or whatever was first then, and titles read after one
missed a provider that had not answered yet.
"""

from __future__ import annotations

from typing import Any

from textual.command import Command, CommandPalette
from textual.pilot import Pilot
from textual.widgets import OptionList

from waiting import until

__all__ = ["run_from_palette", "search_palette", "title_of"]


def title_of(option: object) -> str | None:
    """A palette option's title (its prompt without the help line); None for a line that
    is no command ("No matches found")."""
    if not isinstance(option, Command):
        return None
    return str(option.prompt).split("\n", 1)[0]


async def _open_and_type(pilot: Pilot[Any], query: str) -> OptionList:
    app = pilot.app
    await pilot.press("ctrl+p")
    await until(
        lambda: isinstance(app.screen, CommandPalette), 15, "the palette", pause=pilot.pause
    )
    await pilot.press(*query)
    return app.screen.query_one(OptionList)


async def run_from_palette(pilot: Pilot[Any], title: str, query: str | None = None) -> None:
    """Open the palette, type ``query`` (default: ``title``) and press Enter once the
    search shows the command ``title`` first, highlighted: Enter runs that one."""
    options = await _open_and_type(pilot, query or title)

    def first() -> bool:
        return (
            options.option_count > 0
            and options.highlighted == 0
            and title_of(options.get_option_at_index(0)) == title
        )

    await until(first, 15, f"{title!r} first in the palette", pause=pilot.pause)
    await pilot.press("enter")


async def search_palette(pilot: Pilot[Any], query: str) -> OptionList:
    """Open the palette, type ``query`` and return its option list once every provider
    has answered it: the palette's search worker has ended and the list holds its hits or
    "No matches found"."""
    options = await _open_and_type(pilot, query)
    palette = pilot.app.screen

    def answered() -> bool:
        searching = any(w.node is palette and not w.is_finished for w in pilot.app.workers)
        return not searching and options.option_count > 0

    await until(answered, 15, f"the palette's answer to {query!r}", pause=pilot.pause)
    return options
