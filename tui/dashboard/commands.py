"""The command palette's gpumon commands: every dashboard action, plus one per theme.

Actions that cannot run now (``check_action`` says so) are left out rather than shown
and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True, slots=True)
class PaletteCommand:
    title: str
    help: str
    action: str  # an action string on the app, e.g. "toggle_pause"


COMMANDS: tuple[PaletteCommand, ...] = (
    PaletteCommand(
        "Open GPU detail", "History plots and processes of the GPU under the cursor", "open_detail"
    ),
    PaletteCommand("Alert history", "Active and past alerts; acknowledge them", "alerts"),
    PaletteCommand("Pause / resume updates", "Freeze the rows; monitoring goes on", "toggle_pause"),
    PaletteCommand("Replay: step one sample", "Play the next sample (while paused)", "replay_step"),
    PaletteCommand("Replay: faster", "Play the recording faster", "replay_faster"),
    PaletteCommand("Replay: slower", "Play the recording slower", "replay_slower"),
    PaletteCommand("Refresh faster", "Shorter sampling interval on every host", "faster"),
    PaletteCommand("Refresh slower", "Longer sampling interval on every host", "slower"),
    PaletteCommand("Next theme", "Cycle through the colour themes", "cycle_theme"),
    PaletteCommand(
        "Sparkline: memory / utilisation", "Toggle what the sparklines show", "toggle_spark"
    ),
    PaletteCommand("Keys (help)", "List every key", "help"),
    PaletteCommand("Quit gpumon", "Leave the dashboard", "quit"),
)


class GpumonCommands(Provider):
    """Dashboard actions and theme choices for the command palette."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app = self.app
        out = [
            (c.title, c.help, c.action) for c in COMMANDS if app.check_action(c.action, ()) is True
        ]
        for name in sorted(app.available_themes):
            out.append((f"Theme: {name}", f"Switch to the {name} theme", f"set_theme('{name}')"))
        return out

    async def discover(self) -> Hits:
        for title, help_text, action in self._commands():
            yield DiscoveryHit(title, partial(self._run, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action in self._commands():
            score = matcher.match(title)
            if score > 0:
                run = partial(self._run, action)
                yield Hit(score, matcher.highlight(title), run, help=help_text)

    async def _run(self, action: str) -> None:
        await self.app.run_action(action)
