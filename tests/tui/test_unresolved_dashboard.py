"""``gpumon nosuchhost`` on the dashboard: the first connection's "no such name" ends the
host (✖, not "reconnecting #N" forever) and the notice says what was tried and the
configured hosts. The loop's resolver stands in for DNS (no query leaves the machine)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import ConnState
from gpumon.backends.monitor import make_monitor
from gpumon.tui.app import GpumonApp

Wait = Callable[..., Awaitable[None]]


async def test_an_unknown_name_fails_once_with_what_was_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: Wait
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    asked: list[str] = []

    async def no_such_name(host: Any, *_args: Any, **_kw: Any) -> Any:
        asked.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_such_name)
    cfg = tmp_path / "config.toml"
    cfg.write_text('[hosts.ct200]\nssh = "root@pve1"\n')
    monitor = make_monitor(resolve_host(load_config(cfg), "nosuchhost"), record=False)
    app = GpumonApp([monitor])
    told: list[str] = []
    notify = app.notify

    def recording(message: str, **kw: Any) -> None:
        told.append(message)
        notify(message, **kw)

    app.notify = recording  # type: ignore[method-assign]
    async with app.run_test(size=(120, 30)) as pilot:
        await wait(pilot, lambda: monitor.status.state == ConnState.FAILED, 10, what="FAILED")
        await wait(pilot, lambda: bool(told), 5, what="the notice")
        await pilot.pause(1.5)  # a retry would have come within a second
        assert monitor.status.state == ConnState.FAILED and asked == ["nosuchhost"]
        screen = " ".join(s.text.strip() for s in app.screen._compositor.render_strips())
        assert "✖ failed" in screen  # the header: not "reconnecting #N"
        # the whole reason where the GPU rows would be (the header line is cut to the width)
        assert "no sample will come: cannot resolve nosuchhost" in screen
        assert "start gpumon again" in screen
    said = told[0]  # the connection notice (an alert's toast may follow, cut to fit)
    assert said.startswith("nosuchhost: cannot resolve nosuchhost: name or service not known")
    assert "port 22" in said and f"hosts in {cfg}: ct200" in said
