"""Remake docs/dashboard.svg, the README's picture of the dashboard: ``gpumon demo`` at
120x40, started at its scenario's start and shot in the seconds before the drafter's OOM,
once CT 201's jupyter holds 6 GiB of GPU 6 and the drafter's memory warning there names
it (its row, the strip with `K stop jupyter-lab`, 35 s of history).

    .venv/bin/python scripts/screenshot.py [OUT.svg]

Textual's own screenshot (``App.save_screenshot``) of the real app on the real simulator,
through Pilot: the scenario runs in real time, so it takes about 45 s. Nothing here runs at
test time; the picture shows whatever the code draws when it is remade."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumon.backends.alerts.store import Alert

SIZE = (120, 40)
START_S = 0.0  # scenario time at start: the jupyter comes at 32 s, the OOM at about 60 s
WARNING_KINDS = {"memory", "time_to_full"}


def warned_of_the_holder(alerts: list[Alert]) -> bool:
    on_6 = {a.kind for a in alerts if a.gpu == 6}
    return "foreign_process" in on_6 and bool(on_6 & WARNING_KINDS)


async def shoot(out: Path) -> None:
    from gpumon.backends.config import Config, resolve_host
    from gpumon.backends.monitor import demo_settings, make_monitor
    from gpumon.tui.app import GpumonApp

    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, demo_settings(demo_time=START_S), clock=time.time)
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 90
        while not warned_of_the_holder(monitor.alerts.active()):
            if any(a.kind == "cuda_oom" for a in monitor.alerts.active()):
                raise SystemExit("the OOM came before the warning was seen: run it again")
            if time.monotonic() > deadline:
                raise SystemExit("no memory warning naming the holder on GPU 6 within 90 s")
            await pilot.pause(0.1)
        await pilot.pause(1.5)  # the strip and the rows of the next refresh
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.svg").resolve()
    # A private state dir: no theme remembered from this machine's dashboard, no recording
    # or audit entry left behind in the user's own.
    with tempfile.TemporaryDirectory() as state:
        os.environ["XDG_STATE_HOME"] = state
        asyncio.run(shoot(out))
    print(out)


if __name__ == "__main__":
    main()
