"""``u``: the accounting of the host under the cursor, the table ``gpumon usage HOST``
prints (``backends/usage``), read from the database on a thread (a busy file never stalls
the screen). ``b`` groups by container, user, job or GPU in turn; ``s`` changes the span
(1 h, 24 h, 7 d)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpumon.backends.config.usage import UsageSettings
from gpumon.backends.errors import GpumonError
from gpumon.backends.paths import usage_db
from gpumon.backends.usage import DIMENSIONS, UsageStore, parse_since, usage_report

__all__ = ["SPANS", "UsageScreen", "usage_lines"]

SPANS = ("24h", "7d", "1h")


def usage_lines(host: str, since: str, by: str, settings: UsageSettings) -> list[str]:
    """The table's lines (what ``gpumon usage HOST --since SINCE --by BY`` prints), or
    why there is none."""
    path = usage_db()
    if not path.exists():
        return [f"nothing recorded yet ({path} does not exist)"]
    now = time.time()
    store = UsageStore(path)
    try:
        report = usage_report(store, host, parse_since(since, now), now, by, settings)
    finally:
        store.close()
    return report.table()


class UsageScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,u", "app.pop_screen", "Close"),
        Binding("b", "by", "Group by"),
        Binding("s", "span", "Span"),
    ]

    def __init__(self, host: str, settings: UsageSettings | None = None) -> None:
        super().__init__(id="usage")
        self.host = host
        self.settings = settings or UsageSettings()
        self.by = DIMENSIONS[0]
        self.since = SPANS[0]
        self.lines: list[str] = []  # the table shown (tests read it)

    def compose(self) -> ComposeResult:
        box = VerticalScroll(id="usage-box")
        box.border_title = f"GPU use of {self.host}"
        box.border_subtitle = "b group by  s span  Esc closes"
        with box:
            yield Static("reading ...", id="usage-text", markup=False)

    def on_mount(self) -> None:
        self.run_worker(self._load(), exclusive=True)

    async def _load(self) -> None:
        try:
            lines = await asyncio.to_thread(
                usage_lines, self.host, self.since, self.by, self.settings
            )
        except (OSError, sqlite3.Error, GpumonError) as e:  # said; the screen stays
            lines = [f"usage of {self.host}: not readable: {e}"]
        self.lines = lines
        self.query_one("#usage-text", Static).update("\n".join(lines))

    def action_by(self) -> None:
        self.by = DIMENSIONS[(DIMENSIONS.index(self.by) + 1) % len(DIMENSIONS)]
        self.run_worker(self._load(), exclusive=True)

    def action_span(self) -> None:
        self.since = SPANS[(SPANS.index(self.since) + 1) % len(SPANS)]
        self.run_worker(self._load(), exclusive=True)
