"""The fleet screen: a header (the fleet, Prometheus' state, the data's age), the node
table sorted by trouble, a filter line, the footer.

The refresh re-arms itself after each answer (refreshes never overlap). The screen is
never blank: before the first answer, and when Prometheus cannot be reached, the header
and the table say so; rows already shown stay, with their ages growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input, Static

from gpumon.backends.fleet.model import DCGM_COLLECT_S, SORT_NAMES, sort_rows
from gpumon.backends.fleet.source import FleetSnapshot, FleetSource
from gpumon.backends.model import Health
from gpumon.tui.fleet.cells import SPARK_COLUMN
from gpumon.tui.fleet.table import FleetTable, header_text
from gpumon.tui.views import Palette
from gpumon.tui.views.gpu_cells import Role, duration
from gpumon.tui.widgets import KeyFooter

if TYPE_CHECKING:
    from gpumon.backends.fleet.model import NodeRow


class FleetScreen(Screen[None]):
    DEFAULT_CSS = """
    FleetScreen #fleet-header { height: 2; }
    FleetScreen #fleet-columns { height: 1; }
    FleetScreen #fleet-table { height: 1fr; }
    FleetScreen #fleet-filter { height: 3; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "app.quit", "Quit"),
        Binding("question_mark", "app.help", "Help", key_display="?"),
        Binding("enter", "drill", "Open node", tooltip="Live dashboard of the node (or its GPUs)"),
        Binding("s", "sort", "Sort", tooltip="Cycle the sort: trouble, name, memory, ..."),
        Binding("slash", "filter", "Filter", key_display="/", tooltip="Filter by name or label"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("r", "refresh_now", "Refresh", tooltip="Ask Prometheus now"),
    ]

    def __init__(
        self,
        source: FleetSource,
        *,
        palette_of: Callable[[], Palette],
        open_node: Callable[[NodeRow], None],
    ) -> None:
        super().__init__(id="fleet")
        self.source = source
        self.palette_of = palette_of
        self.open_node = open_node
        self.sort = SORT_NAMES[0]
        self.filter = ""
        self.snapshot: FleetSnapshot | None = None
        self.shown: list[NodeRow] = []
        self.table = FleetTable(palette_of(), id="fleet-table")
        self._wake = asyncio.Event()
        # Figures for the benchmark: event-loop time of the last show(), and refresh start
        # to the frame that drew it.
        self.show_s = 0.0
        self.refresh_to_screen_s = 0.0
        self.refreshes = 0

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header", markup=False)
        yield Static(id="fleet-columns", markup=False)
        yield self.table
        yield Input(placeholder="filter: node name, label value, or label=value", id="fleet-filter")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#fleet-filter", Input).display = False
        self.source.spark_columns = SPARK_COLUMN.width
        self.table.message = f"asking Prometheus at {self.source.fleet.prometheus} …"
        self.table.focus()
        self._draw_header()
        self.run_worker(self._refresh_loop(), group="fleet-refresh", exclusive=True)
        self.set_interval(1.0, self._draw_header, name="fleet-age")

    async def _refresh_loop(self) -> None:
        while True:
            started = time.perf_counter()
            snap = await self.source.refresh()
            self.show(snap)
            self.call_after_refresh(self._drawn, started)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.source.fleet.refresh)

    def _drawn(self, started: float) -> None:
        self.refresh_to_screen_s = time.perf_counter() - started
        self.refreshes += 1

    # --- drawing -------------------------------------------------------------------------
    def show(self, snap: FleetSnapshot | None = None) -> None:
        """Bring the table and header up to ``snap`` (or re-sort/filter the last one)."""
        t0 = time.perf_counter()
        if snap is not None:
            self.snapshot = snap
        snap = self.snapshot
        now = time.time()
        rows = list(snap.rows) if snap is not None else []
        if self.filter:
            rows = [r for r in rows if r.matches(self.filter)]
        self.shown = sort_rows(rows, self.sort, now)
        self.table.message = self._empty_message()
        self.table.set_rows(self.shown, now, self.palette_of())
        self.query_one("#fleet-columns", Static).update(
            Text(header_text(self.table.line_width or 80), style="bold")
        )
        self._draw_header()
        self.show_s = time.perf_counter() - t0

    def _empty_message(self) -> str:
        snap = self.snapshot
        url = self.source.fleet.prometheus
        if snap is None:
            return f"asking Prometheus at {url} …"
        if snap.error is not None and not snap.rows:
            return f"{snap.error}; retrying every {self.source.fleet.refresh:g} s"
        if not snap.rows:
            return f"no dcgm-exporter GPU data in {url} for this fleet's selector"
        return f"no node matches the filter {self.filter!r} (Esc clears it)"

    def _draw_header(self) -> None:
        palette = self.palette_of()
        snap = self.snapshot
        now = time.time()
        text = Text(no_wrap=True, overflow="ellipsis")  # two lines: the fleet, its state
        text.append(f"fleet {self.source.fleet.name}", style="bold")
        text.append(f"  {self.source.fleet.prometheus}  ")
        if snap is None:
            text.append("\nconnecting …", palette.text(Role.MUTED))
        else:
            crit = sum(1 for r in snap.rows if r.severity is Health.CRITICAL)
            warn = sum(1 for r in snap.rows if r.severity is Health.WARNING)
            text.append(f"{len(snap.rows)} nodes  ")
            if crit:
                text.append(f"{crit} critical  ", palette.text(Role.CRITICAL))
            if warn:
                text.append(f"{warn} warning  ", palette.text(Role.WARNING))
            shown = f"{len(self.shown)} shown  " if self.filter else ""
            text.append(f"{shown}sort: {self.sort}  ")
            if self.filter:
                text.append(f"filter: {self.filter}  ", palette.text(Role.WARNING))
            text.append("\n")
            if snap.unreachable:
                since = snap.error_since or snap.taken_at
                kept = (
                    ""
                    if snap.data_at is None
                    else f", rows from {duration(now - snap.data_at)} ago"
                )
                text.append(
                    f"PROMETHEUS UNREACHABLE for {duration(now - since)}{kept}: {snap.error}",
                    palette.text(Role.CRITICAL),
                )
            elif snap.error is not None:
                text.append(snap.error, palette.text(Role.CRITICAL))
            else:
                text.append(
                    f"asked {duration(now - snap.taken_at)} ago, every "
                    f"{self.source.fleet.refresh:g} s; dcgm-exporter samples every "
                    f"{DCGM_COLLECT_S} s by default (AGE is the last scrape)",
                    palette.text(Role.MUTED),
                )
            for w in snap.warnings[:1]:
                text.append(f"  partial answer: {w}", palette.text(Role.WARNING))
        self.query_one("#fleet-header", Static).update(text)

    def on_resize(self) -> None:
        self.show()

    # --- keys ----------------------------------------------------------------------------
    def action_sort(self) -> None:
        self.sort = SORT_NAMES[(SORT_NAMES.index(self.sort) + 1) % len(SORT_NAMES)]
        self.show()
        self.table.action_jump(0)

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.display = True
        box.value = self.filter
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.value = ""
        box.display = False
        self.filter = ""
        self.table.focus()
        self.show()

    def action_refresh_now(self) -> None:
        self._wake.set()

    def action_drill(self) -> None:
        row = self.table.current_row()
        if row is not None:
            self.open_node(row)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value
        self.show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.table.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "drill":
            return True if self.table.current_row() is not None else None
        if action == "clear_filter":
            return bool(self.filter or self.query_one("#fleet-filter").display)
        return True
