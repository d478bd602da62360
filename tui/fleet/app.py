"""``gpumon fleet``: the fleet screen as the app's default screen, and drilling into a node.

A node that is a configured host (by name or SSH host) or that the fleet's
``ssh_template`` names opens the existing per-host dashboard over the fleet (a monitor the
app's runtime starts for it and closes on Esc); any other node opens its GPUs from
Prometheus alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.screen import Screen

from gpumon.backends.config import Config, ConfigError, FleetConfig, HostConfig, resolve_host
from gpumon.backends.fleet.model import NodeRow
from gpumon.backends.fleet.source import FleetSource
from gpumon.backends.monitor import HostMonitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.fleet.node import NodeDashboardScreen, PromNodeScreen
from gpumon.tui.fleet.screen import FleetScreen
from gpumon.tui.screens import HelpScreen, help_rows


def node_host(config: Config, fleet: FleetConfig, node: str) -> HostConfig | None:
    """The host to open for ``node``: a configured host named ``node`` (or whose SSH host
    is ``node``), else the fleet's ``ssh_template`` filled in (with its ``container``);
    None when neither applies or the template makes no valid SSH target."""
    if node in config.hosts:
        return config.hosts[node]
    for host in config.hosts.values():
        if host.ssh_host == node:
            return host
    if fleet.ssh_template is None:
        return None
    try:
        host = resolve_host(config, fleet.ssh_template.format(node=node))
    except ConfigError:
        return None
    if host.kind != "ssh":
        return None
    if fleet.container is not None:
        host = replace(host, container=fleet.container)
    return replace(host, name=node)


class FleetApp(GpumonApp):
    BINDINGS: ClassVar[list[BindingType]] = [
        *GpumonApp.BINDINGS,
        Binding("escape", "back_to_fleet", "Fleet", show=False),
    ]

    def __init__(
        self,
        config: Config,
        source: FleetSource,
        *,
        theme: str | None = None,
        read_only: bool = False,
        bell: bool = True,
        notes: Sequence[str] = (),
    ) -> None:
        super().__init__([], theme=theme, read_only=read_only, bell=bell, notes=notes)
        self.config = config
        self.source = source
        self.read_only = read_only
        self.bell_enabled = bell
        self.fleet = FleetScreen(source, palette_of=lambda: self.palette, open_node=self.open_node)
        self.node_monitor: HostMonitor | None = None

    def get_default_screen(self) -> Screen[None]:
        return self.fleet

    async def on_unmount(self) -> None:
        await super().on_unmount()  # the runtime stops the node's monitor with the rest
        self.node_monitor = None
        await self.source.close()

    def open_node(self, row: NodeRow) -> None:
        """Enter on a fleet row: the node's live dashboard, or its Prometheus GPUs."""
        host = node_host(self.config, self.source.fleet, row.node)
        if host is None:
            self.push_screen(PromNodeScreen(self.source, row.node, palette_of=lambda: self.palette))
            return
        monitor = self.runtime.monitor(host)
        self.node_monitor = monitor
        self.dashboard = NodeDashboardScreen(
            [monitor],
            palette_of=lambda: self.palette,
            read_only=self.read_only,
            bell=self.bell_enabled,
            session=self.session,
        )
        self.runtime.start_monitor(monitor)
        self.push_screen(self.dashboard)

    async def action_back_to_fleet(self) -> None:
        """Esc on a node's dashboard: back to the fleet; the node's stream stops."""
        if self.screen is self.fleet:
            return
        if isinstance(self.screen, NodeDashboardScreen | PromNodeScreen):
            self.pop_screen()
        await self._stop_node()

    async def _stop_node(self) -> None:
        monitor, self.node_monitor = self.node_monitor, None
        if monitor is not None:
            await self.runtime.close_monitor(monitor)

    def watch_theme(self, name: str) -> None:
        super().watch_theme(name)
        fleet = getattr(self, "fleet", None)  # the theme is first set in GpumonApp.__init__
        if fleet is not None and fleet.is_mounted:
            fleet.show()  # the table's colours come from the palette

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        if self.screen is not self.fleet:
            super().action_help()
            return
        self.push_screen(HelpScreen(help_rows([("Fleet", FleetScreen.BINDINGS)])))


def run_fleet(
    config: Config,
    source: FleetSource,
    *,
    theme: str | None,
    read_only: bool,
    notes: Sequence[str] = (),
) -> int:
    app = FleetApp(config, source, theme=theme, read_only=read_only, notes=notes)
    app.run()
    return app.return_code or 0
