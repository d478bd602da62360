"""Text from the watched machine is data, never markup and never terminal control.

The real agent runs locally with a stand-in nvidia-smi whose GPU and process names are
hostile, and follows log files into which each string of the hostile corpus is written
inside a CUDA OOM line. Every string then travels the real path (agent -> JSON -> monitor
-> alert engine -> toast, strip, alert history, detail view) while the test checks what
reaches the screen: the text shown literally, no escape character in the composed
frame, clicking the toast does nothing, and the app keeps running."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hostile import CORPUS, forbidden_in
from textual.widgets._toast import Toast

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import ConnState
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.untrusted import printable
from gpumon.tui.app import GpumonApp
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen

from screen_text import screen_text

Wait = Callable[..., Awaitable[None]]
FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"
HOSTILE_NAME = "RTX [@click=app.quit]PRO[/] \x1b]52;c;b3duZWQ=\x07\x1b]0;t\x07\x1b[2J6000"
HOSTILE_PROCESS = "[@click=app.quit]py[/]\x1b[31m\u202e"


def toast_texts(app: GpumonApp) -> list[str]:
    return [t.render().plain for t in app.screen.query(Toast)]


@pytest.fixture
def hostile_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., HostMonitor]:
    monkeypatch.setenv("HOSTILE_NAME", HOSTILE_NAME)
    monkeypatch.setenv("HOSTILE_PROCESS", HOSTILE_PROCESS)
    logs = tmp_path / "logs"
    logs.mkdir()
    for n, (label, _) in enumerate(CORPUS):  # present from the start: polled, not globbed
        (logs / f"{n:02d}-{label}.log").touch()

    def make(python: str = sys.executable) -> HostMonitor:
        host = dataclasses.replace(
            resolve_host(Config(path=None), "local"),
            nvidia_smi=str(FAKE_SMI),
            python=python,
            interval=0.5,
            kernel_log=False,
            watch_logs=(f"{logs}/*.log",),
        )
        return make_monitor(host)

    return make


async def test_the_corpus_reaches_the_screen_as_text_and_acts_on_nothing(
    hostile_host: Callable[..., HostMonitor], tmp_path: Path, wait: Wait
) -> None:
    monitor = hostile_host()
    app = GpumonApp([monitor], bell=False)
    logs = tmp_path / "logs"
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await wait(pilot, lambda: monitor.latest is not None, timeout=30, what="first sample")
        await wait(pilot, lambda: monitor.processes != (), timeout=30, what="processes")
        await wait(pilot, lambda: "RTX [@click=ap" in screen_text(app), what="the GPU name")
        gpu = monitor.latest.gpus[0] if monitor.latest else None
        assert gpu is not None and gpu.name == printable(HOSTILE_NAME)
        assert monitor.processes[0].name == printable(HOSTILE_PROCESS)
        frame = screen_text(app)
        assert forbidden_in(frame) == []
        assert "RTX [@click=ap" in frame  # shown literally, not applied
        for n, (label, text) in enumerate(CORPUS):
            line = f"torch.OutOfMemoryError: CUDA out of memory. {text} end\n"
            with (logs / f"{n:02d}-{label}.log").open("a", encoding="utf-8") as f:
                f.write(line)
            shown = printable(text)[:16]  # a toast has the start of the message
            await wait(
                pilot,
                lambda shown=shown: any(shown in t for t in toast_texts(app)),
                timeout=20,
                what=f"the toast for {label}",
            )
            assert app.return_code is None, label
            assert forbidden_in(screen_text(app)) == [], label
        # Clicking the toast whose text is `[@click=app.quit]` clicks nothing but the toast.
        (logs / "99-click.log").write_text(
            f"torch.OutOfMemoryError: CUDA out of memory. {CORPUS[0][1]}\n", encoding="utf-8"
        )
        await wait(pilot, lambda: any("click me[/]" in t for t in toast_texts(app)), timeout=20)
        await pilot.click(Toast)
        await pilot.pause(0.2)
        assert app.return_code is None and app.is_running
        assert not (tmp_path / "owned.svg").exists() and not Path("/tmp/owned.svg").exists()
        # Every alert in the strip and the history, every character of them.
        await pilot.press("a")
        await wait(pilot, lambda: isinstance(app.screen, AlertHistoryScreen), what="history")
        await wait(pilot, lambda: "[/bold]" in screen_text(app), what="the history's rows")
        frame = screen_text(app)
        assert forbidden_in(frame) == []
        assert "[/bold] after" in frame or "[/bold]" in frame
        await pilot.press("escape")
        await pilot.press("enter")
        await wait(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail view")
        await wait(pilot, lambda: "\\x1b]52;c;" in screen_text(app), what="the GPU's name")
        frame = screen_text(app)
        assert forbidden_in(frame) == []
        assert "\\x1b]52;c;" in frame  # the OSC 52 in the GPU name, shown as text
        assert app.return_code is None


async def test_nvidia_smi_error_text_with_markup_is_shown_plainly_when_the_link_drops(
    hostile_host: Callable[..., HostMonitor], monkeypatch: pytest.MonkeyPatch, wait: Wait
) -> None:
    """No Python on the target: gpumon streams nvidia-smi itself, which fails with hostile
    words; the 'connection lost' notice quotes them, as text."""
    error = "Failed to initialize NVML: Unknown Error [/] [@click=app.quit]x[/] \x1b]0;t\x07"
    monkeypatch.setenv("HOSTILE_FAIL", error)
    monitor = hostile_host(python="/bin/false")  # not a usable Python
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await wait(
            pilot,
            lambda: monitor.status.state == ConnState.RECONNECTING and monitor.status.error,
            timeout=30,
            what="the failure",
        )
        await wait(pilot, lambda: any("[/]" in t for t in toast_texts(app)), what="the notice")
        await pilot.pause(0.2)
        assert app.return_code is None and app.is_running
        frame = screen_text(app)
        assert forbidden_in(frame) == []
        assert "\\x1b]0;t\\x07" in "".join(toast_texts(app))
