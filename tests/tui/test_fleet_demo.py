"""``gpumon fleet demo``'s screen: the simulated fleet of 50 nodes in the fleet view, no
Prometheus and no network; the worst first, and a node's GPUs one key away."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gpumon.backends.config import Config
from gpumon.backends.fleet.demo import DEMO_XID_NODE, demo_source
from gpumon.tui.fleet.app import FleetApp
from gpumon.tui.fleet.node import PromNodeScreen
from gpumon.tui.fleet.screen import FleetScreen

from screen_text import screen_text

Wait = Callable[..., Awaitable[None]]


async def test_the_demo_fleet_in_80x24_worst_first_and_a_node_s_gpus(wait: Wait) -> None:
    app = FleetApp(Config(path=None), demo_source())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.fleet
        await wait(pilot, lambda: len(screen.shown) == 50, 15, "fifty nodes")
        text = screen_text(app)
        assert "fleet demo" in text and "simulated (no network)" in text
        assert "50 nodes  2 critical  2 warning" in text
        worst = [r.node for r in screen.shown[:4]]
        assert DEMO_XID_NODE in worst and "gpu-node-08" in worst
        assert "Xid 79" in text and "UNREACHABLE" not in text
        await pilot.press("home", *["down"] * worst.index(DEMO_XID_NODE))
        assert screen.table.current_row().node == DEMO_XID_NODE  # type: ignore[union-attr]
        await pilot.press("enter")  # not a configured host: its GPUs from the answers
        assert isinstance(app.screen, PromNodeScreen)
        node = app.screen
        await wait(pilot, lambda: len(node.gpus) == 8, 15, "its eight GPUs")
        assert [g.xid_last for g in node.gpus] == [0, 0, 0, 79, 0, 0, 0, 0]
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
