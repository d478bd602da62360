"""The fleet view end to end: a real Prometheus scraping 20 fake dcgm-exporter nodes, the
Textual app driven with Pilot (sort, filter), and a drill-down into a node that is also a
configured host, reached over the test sshd (the live per-host dashboard), Esc back."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.backends.config import load_config
from gpumon.backends.fleet import FleetQueries, FleetSource
from gpumon.backends.model import ConnState
from gpumon.tui.fleet.app import FleetApp
from gpumon.tui.fleet.node import NodeDashboardScreen, PromNodeScreen
from gpumon.tui.fleet.screen import FleetScreen

from dcgm_exporter import TOTAL_MIB, FakeNode, fleet, serving
from prom_fleet import FleetPrometheus
from sshd_server import SshServer
from waiting import until

XID_WINDOW_S = 60  # the Xid column's window, shortened from 15 min (4 s steps)

pytestmark = pytest.mark.integration


def screen_text(app: FleetApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_twenty_nodes_sort_filter_and_drill_down_over_ssh(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    nodes = fleet(20, seed=7)
    nodes[12].gpus[4].remap_failure = 1  # node-0013: critical
    with serving(nodes) as exporter:
        prom = FleetPrometheus(tmp_path, {"dcgm": [exporter.target]}).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 160)
            prom.wait_for_xid_history(160, XID_WINDOW_S)
            with exporter.lock:  # an Xid while Prometheus watches: node-0005 warns
                exporter.node("node-0005").gpus[0].xid = 13
            prom.wait_for("DCGM_FI_DEV_XID_ERRORS > 0")
            config_file = tmp_path / "config.toml"
            config_file.write_text(
                sshd.config_toml("node-0007")
                + f'\n[fleet.lab]\nprometheus = "{prom.url}"\nrefresh = 2\n'
            )
            config = load_config(config_file)
            lab = config.fleets["lab"]
            queries = FleetQueries(lab.selector, lab.node_labels, xid_window_s=XID_WINDOW_S)
            app = FleetApp(config, FleetSource(lab, queries=queries))
            async with app.run_test(size=(140, 36)) as pilot:
                await drive(app, pilot, exporter.nodes)
        finally:
            prom.stop()


async def drive(app: FleetApp, pilot: Pilot[int], truth: list[FakeNode]) -> None:
    screen = app.fleet
    await until(lambda: len(screen.shown) == 20, 30, "20 fleet rows", pause=pilot.pause)

    # The Xid shows once a step of the window has passed since it happened.
    def xid_shown() -> bool:
        return [r.node for r in screen.shown][1:2] == ["node-0005"]

    await until(xid_shown, 30, "node-0005's Xid", pause=pilot.pause)
    order = [r.node for r in screen.shown]
    assert order[:2] == ["node-0013", "node-0005"]  # critical, then warning
    fullest = {n.name: max(g.used_mib for g in n.gpus) / TOTAL_MIB for n in truth}
    calm = order[2:]
    assert calm == sorted(calm, key=lambda n: -fullest[n])  # then the fullest memory
    text = screen_text(app)
    assert "row-remap failure on 1 GPU" in text and "Xid 13 on 1 GPU" in text
    assert "20 nodes  1 critical  1 warning" in text

    await pilot.press("s")
    assert screen.sort == "name"
    assert [r.node for r in screen.shown] == sorted(order)
    assert "sort: name" in screen_text(app)

    await pilot.press("slash", "0", "0", "0", "7")
    assert [r.node for r in screen.shown] == ["node-0007"]
    await pilot.press("enter")  # ends the filter input; the table has the keys again
    assert screen.table.has_focus and screen.filter == "0007"

    await pilot.press("enter")  # node-0007 is a configured host: its live dashboard
    assert isinstance(app.screen, NodeDashboardScreen)
    monitor = app.node_monitor
    assert monitor is not None and monitor.host.name == "node-0007"
    await until(lambda: monitor.latest is not None, 60, "a sample over SSH", pause=pilot.pause)
    assert monitor.status.state == ConnState.CONNECTED
    await until(lambda: "RTX PRO 6000" in screen_text(app), 10, "its GPU rows", pause=pilot.pause)

    await pilot.press("escape")  # back to the fleet; the node's stream stops
    await until(lambda: monitor.status.state != ConnState.CONNECTED, 15, "stop", pause=pilot.pause)
    assert isinstance(app.screen, FleetScreen) and app.node_monitor is None
    assert [r.node for r in screen.shown] == ["node-0007"]  # the filter is kept

    await pilot.press("escape")  # clears the filter
    assert len(screen.shown) == 20 and screen.filter == ""

    await pilot.press("home", "down")  # node-0002: not a host, no ssh_template
    assert screen.table.current_row().node == "node-0002"  # type: ignore[union-attr]
    await pilot.press("enter")
    assert isinstance(app.screen, PromNodeScreen)
    node_screen = app.screen
    await until(
        lambda: len(node_screen.gpus) == 8, 15, "its GPUs from Prometheus", pause=pilot.pause
    )
    assert "from Prometheus only" in screen_text(app)
    await pilot.press("escape")
    assert isinstance(app.screen, FleetScreen)
