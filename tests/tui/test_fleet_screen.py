"""The fleet screen is never blank: before the first answer, with no Prometheus at all,
and when Prometheus goes away (the rows stay, the header says so) and comes back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from gpumon.backends.config import Config
from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.fleet import FleetSource
from gpumon.tui.fleet.app import FleetApp

from dcgm_exporter import closed_port, fleet, serving
from prom_fleet import FleetPrometheus
from screen_text import screen_text

Wait = Callable[..., Awaitable[None]]


def fleet_app(url: str) -> FleetApp:
    source = FleetSource(FleetConfig("lab", url, refresh=1, timeout=1))
    return FleetApp(Config(path=None), source)


async def test_no_prometheus_at_all_is_said_in_80x24(wait: Wait) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    app = fleet_app(url)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: app.fleet.snapshot is not None, 10, "the first refresh")
        text = screen_text(app)
        assert "PROMETHEUS UNREACHABLE" in text
        assert f"Prometheus at {url} unreachable" in text  # in the table's place
        await pilot.press("enter", "s", "r")  # nothing to open; nothing breaks
        assert app.screen is app.fleet
        theme = app.theme
        await pilot.press("t")  # the next theme redraws the fleet in its colours
        assert app.theme != theme and "PROMETHEUS UNREACHABLE" in screen_text(app)


async def test_prometheus_goes_away_and_comes_back(tmp_path: Path, wait: Wait) -> None:
    with serving(fleet(6)) as exporter:
        prom = FleetPrometheus(tmp_path, {"dcgm": [exporter.target]}).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 48)
            app = fleet_app(prom.url)
            async with app.run_test(size=(100, 30)) as pilot:
                screen = app.fleet
                await wait(pilot, lambda: len(screen.shown) == 6, 15, "six rows")
                assert "asked" in screen_text(app)
                prom.stop()
                await wait(pilot, lambda: "PROMETHEUS UNREACHABLE" in screen_text(app), 15, "down")
                text = screen_text(app)
                assert "node-0001" in text and len(screen.shown) == 6  # the last rows stay
                assert "rows from" in text
                prom.start()
                await wait(pilot, lambda: "asked" in screen_text(app), 30, "back")
                assert "UNREACHABLE" not in screen_text(app)
        finally:
            prom.stop()
