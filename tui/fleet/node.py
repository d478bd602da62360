"""Drilling into one node: the live SSH dashboard (the per-host view, Esc back to the
fleet), or, for a node gpumon cannot reach, its GPUs from Prometheus alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from gpumon.backends.fleet.prom import PrometheusError
from gpumon.backends.fleet.source import FleetSource, GpuLine
from gpumon.backends.untrusted import printable
from gpumon.tui.dashboard import DashboardScreen
from gpumon.tui.fleet.cells import memory_role, xid_role
from gpumon.tui.views import Palette
from gpumon.tui.views.gpu_cells import Role, duration, short_name, temperature_role
from gpumon.tui.widgets import KeyFooter


class NodeDashboardScreen(DashboardScreen):
    """The per-host dashboard of one node, opened from the fleet: Esc goes back (and
    stops the node's SSH stream)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_to_fleet", "Fleet", tooltip="Back to the fleet view"),
        *DashboardScreen.BINDINGS,
    ]

    async def action_back_to_fleet(self) -> None:
        await self.app.run_action("back_to_fleet")


def gpu_table(gpus: Sequence[GpuLine], palette: Palette, now: float) -> Table:
    """The node's GPUs as a Rich table (None shows as n/a, never 0)."""
    table = Table(box=None, pad_edge=False, expand=False)
    for title in (
        "GPU",
        "MODEL",
        "MEM GiB",
        "MEM%",
        "UTIL",
        "TEMP",
        "POWER",
        "XID",
        "REMAP",
        "AGE",
    ):
        table.add_column(title, justify="left" if title == "MODEL" else "right")

    def na(v: float | None, spec: str = ".0f") -> Text:
        return Text("n/a", palette.text(Role.NA)) if v is None else Text(f"{v:{spec}}")

    for g in gpus:
        used, total = g.mem_used_mib, g.mem_total_mib
        frac = None if used is None or not total else used / total
        mem = (
            Text("n/a", palette.text(Role.NA))
            if used is None or total is None
            else Text(f"{used / 1024:.1f}/{total / 1024:.1f}")
        )
        pct = (
            na(None) if frac is None else Text(f"{100 * frac:.0f}", palette.text(memory_role(frac)))
        )
        temp = (
            na(g.temp)
            if g.temp is None
            else Text(f"{g.temp:.0f}", palette.text(temperature_role(g.temp)))
        )
        xid = (
            na(None)
            if g.xid_last is None
            else (
                Text(str(g.xid_last), palette.text(xid_role(g.xid_last)))
                if g.xid_last
                else Text("-")
            )
        )
        remap = (
            na(None)
            if g.remap_failure is None
            else (Text("FAILED", palette.text(Role.CRITICAL)) if g.remap_failure else Text("-"))
        )
        age = na(None) if g.last_seen is None else Text(duration(now - g.last_seen))
        table.add_row(
            printable(g.gpu),
            short_name(g.model),
            mem,
            pct,
            na(g.util),
            temp,
            na(g.power_w),
            xid,
            remap,
            age,
        )
    return table


class PromNodeScreen(Screen[None]):
    """One node's GPUs from Prometheus (no SSH to it), refreshed with the fleet's period."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Fleet", tooltip="Back to the fleet view"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, source: FleetSource, node: str, *, palette_of: Callable[[], Palette]):
        super().__init__(id="fleet-node")
        self.source, self.node, self.palette_of = source, node, palette_of
        self.gpus: list[GpuLine] = []
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="node-header", markup=False)
        yield Static(id="node-gpus", markup=False)
        yield KeyFooter()

    def on_mount(self) -> None:
        self._draw()
        self.run_worker(self._loop(), group="fleet-node", exclusive=True)

    async def _loop(self) -> None:
        while True:
            try:
                self.gpus = await self.source.node_gpus(self.node)
                self.error = None
            except PrometheusError as e:
                self.error = str(e)
            self._draw()
            await asyncio.sleep(self.source.fleet.refresh)

    def _draw(self) -> None:
        palette = self.palette_of()
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(f"{printable(self.node)}", style="bold")
        head.append(
            "  from Prometheus only (no SSH: not a configured host, no ssh_template)  ",
            palette.text(Role.MUTED),
        )
        if self.error:
            head.append(self.error, palette.text(Role.CRITICAL))
        self.query_one("#node-header", Static).update(head)
        body: Table | Text
        if self.gpus:
            body = gpu_table(self.gpus, palette, time.time())
        elif self.error is None:
            body = Text(f"asking {self.source.fleet.prometheus} …", palette.text(Role.MUTED))
        else:
            body = Text("no GPU data for this node", palette.text(Role.WARNING))
        self.query_one("#node-gpus", Static).update(body)
