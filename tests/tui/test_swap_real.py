"""From the dashboard, `w` swaps torch in a real test venv between two variants and back,
each time showing the verification (stand-in torch wheels from a local index on
127.0.0.1; the real agent, plan, install, verification and audit)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Select

from gpumon.backends.actions import read_entries
from gpumon.backends.config import HostConfig
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.sim import write_wrapper
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import SwapScreen

from torch_index import IndexServer, build_index, standard_bases

Wait = Callable[..., Awaitable[None]]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    root = build_index(tmp_path / "index", standard_bases())
    with IndexServer(root) as server:
        yield server.url


def shown(widget: Widget) -> str:
    """The text a widget shows on screen now."""
    w, h = widget.size
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, w, h)))


def torch_state(python: Path) -> str:
    code = "import torch; print(torch.__version__, torch.version.cuda)"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()


async def swap_to(pilot: Pilot[int], app: GpumonApp, variant: str, wait: Wait) -> SwapScreen:
    await pilot.press("w")
    await wait(pilot, lambda: isinstance(app.screen, SwapScreen), what="the swap dialog")
    screen = cast(SwapScreen, app.screen)
    screen.query_one("#swap-variant", Select).value = variant
    deadline = time.monotonic() + 60  # a plan probes the venv: it can take a while
    while not screen.can_confirm and time.monotonic() < deadline:
        await pilot.pause(0.2)
    assert screen.can_confirm, shown(screen.query_one("#swap-plan"))
    await pilot.press("y")
    await wait(pilot, lambda: screen.outcome is not None, timeout=120, what="the swap")
    await pilot.pause()
    return screen


async def test_w_swaps_torch_and_back_with_verification(
    tmp_path: Path, index: str, wait: Wait
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--index-url", f"{index}/good/cu128",
         "torch==2.11.0+cu128", "torchvision==0.26.0+cu128"],
        check=True,
    )  # fmt: skip
    assert torch_state(python) == "2.11.0+cu128 12.8"
    smi = write_wrapper(tmp_path, demo_settings(demo_time=10))
    host = HostConfig(
        name="box", kind="local", python=str(python), nvidia_smi=str(smi), interval=0.5,
        torch_index=f"{index}/good", kernel_log=False,
    )  # fmt: skip
    app = GpumonApp([make_monitor(host)])
    async with app.run_test(size=(120, 50)) as pilot:
        await wait(
            pilot, lambda: app.dashboard.check_action("swap_torch", ()) is True, what="connected"
        )
        screen = await swap_to(pilot, app, "cu130", wait)
        outcome = screen.outcome
        assert outcome is not None and outcome.message == "swapped to 2.11.0+cu130, verified"
        assert "13.0" in shown(screen.query_one("#swap-plan"))  # the verification
        assert torch_state(python) == "2.11.0+cu130 13.0"
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, SwapScreen), what="closed")
        screen = await swap_to(pilot, app, "cu128", wait)
        outcome = screen.outcome
        assert outcome is not None and outcome.message == "swapped to 2.11.0+cu128, verified"
        assert torch_state(python) == "2.11.0+cu128 12.8"
    swaps = [e["outcome"] for e in read_entries() if e["action"] == "swap-torch"]
    assert swaps == ["started", "swapped", "started", "swapped"]
