"""The GPU detail's process pane (issue 39 point 1), on ``local`` through the real agent
and the NVML stand-in (tests/support/fake_nvml: 2 GPUs, its per-process samples), over a
real launcher and its two workers (``python train.py --rank N``, with NCCL and CUDA
variables and a secret in their environment): each worker's SM %, sorted by it; ``o`` the
next column; ``T`` the launcher above its workers; ``e`` the environment, scrubbed."""

from __future__ import annotations

import dataclasses
import getpass
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nvml_stand_in import FAKE_NVML, load_fake_nvml
from textual.geometry import Region
from textual.widget import Widget

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import DetailScreen

Wait = Callable[..., Awaitable[None]]
SECRET = "s3cr3t-nccl-value-42"
# The launcher starts two ranks and waits for them; each rank waits for its stdin to close.
LAUNCHER = """
import subprocess, sys
ranks = [subprocess.Popen([sys.executable, "train.py", "--rank", str(r)],
                          stdin=subprocess.PIPE) for r in (0, 1)]
print(",".join(str(p.pid) for p in ranks), flush=True)
sys.stdin.read()
for p in ranks:
    p.stdin.close()
    p.wait()
"""


@pytest.fixture
def ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The launcher's PID, then its ranks'."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_AUTH_TOKEN": SECRET,
        "MASTER_PORT": "29500",
    }
    (tmp_path / "train.py").write_text("import sys\nsys.stdin.read()\n")
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "torchrun-stand-in"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert launcher.stdout is not None and launcher.stdin is not None
    pids = [int(p) for p in launcher.stdout.readline().decode().split(",")]
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML.parent))
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_PROCESS_PID", ",".join(map(str, pids)))
    yield [launcher.pid, *pids]
    launcher.stdin.close()
    launcher.wait(timeout=10)


def shown(w: Widget) -> str:
    width, height = w.size
    return "\n".join(s.text for s in w.render_lines(Region(0, 0, width, height)))


def _local() -> HostMonitor:
    return make_monitor(resolve_host(Config(path=None), "local"))


async def test_the_process_pane_sorts_nests_and_shows_the_environment(
    ranks: list[int], wait: Wait
) -> None:
    launcher_pid = ranks[0]
    stand_in = load_fake_nvml("fake_pynvml_pane")
    sm = [stand_in.process_usage(1, n)[0] for n in range(2)]  # GPU 1: rank 1 computes most
    assert sm[1] > sm[0]
    monitor = _local()
    app = GpumonApp([monitor])

    def listed() -> bool:
        s = monitor.latest
        return (
            s is not None
            and all(p.sm_pct is not None for p in s.processes)
            and (len(s.processes) == 4)
        )

    async with app.run_test(size=(140, 40)) as pilot:
        await wait(pilot, listed, timeout=30, what="both ranks with their SM %")
        await pilot.press("1", "enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        pane = screen.processes

        def lines() -> list[str]:
            return shown(pane).splitlines()

        await wait(pilot, lambda: "SM~▼" in shown(pane), what="the table")
        rows = [line for line in lines() if "--rank" in line]
        assert [r.split("--rank ")[1][:1] for r in rows] == ["1", "0"]  # by SM, highest first
        assert f"{sm[1]}%" in rows[0].split() and f"{sm[0]}%" in rows[1].split()
        assert f" {getpass.getuser()} " in rows[0]  # the user, not "?"
        assert "NVML" not in shown(pane) and "approximate" in shown(pane)

        await pilot.press("o")  # by memory-bandwidth %
        await wait(pilot, lambda: "BW~▼" in shown(pane), what="the next sort")

        await pilot.press("T")
        parent = f"parent {launcher_pid}"
        await wait(pilot, lambda: parent in " ".join(shown(pane).split()), what="the tree")
        text = lines()
        at = next(k for k, line in enumerate(text) if line.split()[:1] == ["parent"])
        assert "import subprocess" in text[at]  # the launcher's command line
        assert all("--rank" in line for line in text[at + 1 : at + 3])

        await pilot.press("e")
        await wait(pilot, lambda: "CUDA_VISIBLE_DEVICES=0,1" in shown(pane), what="the env")
        assert "NCCL_DEBUG=INFO" in shown(pane) and "MASTER_PORT=29500" in shown(pane)
        assert "NCCL_IB_AUTH_TOKEN=<redacted>" in shown(pane)
        assert SECRET not in shown(pane)
        await pilot.press("e")
        await wait(pilot, lambda: "CUDA_VISIBLE_DEVICES" not in shown(pane), what="env hidden")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_main_screen_has_a_process_table_where_it_has_room(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, size: tuple[int, int]
) -> None:
    """From 40 lines the demo's host shows its busiest processes under its GPU rows (by
    SM %, from the simulator's pmon); at 80x24 the GPU rows keep the screen."""
    monitor = demo_monitor(demo_time=40.0)
    app = GpumonApp([monitor])

    def shared() -> bool:
        s = monitor.latest
        return (
            s is not None
            and len(s.processes) == 9
            and all(p.sm_pct is not None for p in s.processes)
        )

    async with app.run_test(size=size) as pilot:
        await wait(pilot, shared, timeout=30, what="the processes with their SM %")
        table = app.dashboard.sections[0].process_table
        if size[1] < 40:
            await pilot.pause()
            assert not table.display
            return
        await wait(pilot, lambda: "processes  9 on 8 GPUs" in shown(table), what="the table")
        lines = shown(table).splitlines()
        assert lines[1].split()[:2] == ["GPU", "WHERE"] and "SM~▼" in lines[1]
        sm = [int(line.split()[8].rstrip("%")) for line in lines[2:] if line.strip()]
        assert sm == sorted(sm, reverse=True) and len(sm) == 9, lines
        assert lines[-1].split()[:2] == ["6", "CT201"] and sm[-1] == 0  # the idle holder


async def test_the_main_screens_process_table_is_rebuilt_only_when_its_processes_change(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """Issue 41: a new sample whose processes and their values are the last one's
    rebuilds no table (main's code re-made and re-wrapped its text on every sample);
    one whose values differ is shown."""
    monitor = demo_monitor(demo_time=40.0)  # frozen: each sample's processes are alike
    app = GpumonApp([monitor])
    async with app.run_test(size=(120, 40)) as pilot:
        section = app.dashboard.sections[0]
        table = section.process_table
        await wait(pilot, lambda: "processes  9 on 8 GPUs" in shown(table), what="the table")
        built: list[object] = []
        update = table.update

        def counted(*args: Any, **kwargs: Any) -> None:
            built.append(args)
            update(*args, **kwargs)

        table.update = counted  # type: ignore[method-assign]

        def procs() -> object:
            s = section.shown
            assert s is not None
            return tuple((g.index, tuple(s.processes_for(g))) for g in s.gpus)

        before, alike = procs(), 0
        for _ in range(10):  # the first samples still fill in the container's PIDs
            last = section.shown
            await wait(pilot, lambda v=last: section.shown is not v, what="a new sample shown")
            await pilot.pause()
            if procs() != before:
                before, alike = procs(), 0
                built.clear()  # a change: rebuilt, as it should be
                continue
            assert built == []
            alike += 1
            if alike == 3:
                break
        assert alike == 3, "the frozen demo's processes kept changing"
        last = section.shown
        assert last is not None
        moved = tuple(dataclasses.replace(p, sm_pct=(p.sm_pct or 0) + 1) for p in last.processes)
        monitor.latest = dataclasses.replace(last, processes=moved)
        app.dashboard.refresh_dashboard()  # at once: no sample can come in between
        assert len(built) == 1
