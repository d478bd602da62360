"""Where a monitor's data comes from: the direct nvidia-smi stream (a target without
Python), run for real on this machine with the simulator's nvidia-smi."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.remote.agent import NAME_MAX_CHARS
from gpumon.backends.sim import write_wrapper

from waiting import until

pytestmark = pytest.mark.system


def direct_host(smi: Path, interval: float) -> HostConfig:
    """A local host whose "Python" is ``false``: gpumon streams nvidia-smi directly."""
    return HostConfig(
        name="box",
        kind="local",
        python=shutil.which("false") or "/bin/false",
        nvidia_smi=str(smi),
        interval=interval,
        kernel_log=False,
    )


def said(monitor: HostMonitor, what: str) -> Callable[[], str]:
    """``what``, with the monitor's status when the wait timed out."""
    return lambda: f"{what} ({monitor.status})"


async def test_a_direct_stream_follows_a_new_interval(tmp_path: Path) -> None:
    """``+`` on a host without Python: the nvidia-smi loop restarts at the new rate, so
    samples arrive as often as the (shorter) stale limit expects."""
    smi = write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))
    monitor = make_monitor(direct_host(smi, interval=4.0))
    monitor.start()
    try:
        await until(
            lambda: monitor.samples >= 1,
            15,
            said(monitor, "a first sample"),
            pause=monitor.wait_for_update,
        )
        assert monitor.status.source == SampleSource.SMI_DIRECT
        monitor.set_interval(0.2)
        count = monitor.samples
        await asyncio.sleep(2.5)
        # At 0.2 s that is about a dozen samples; the old 4 s loop gives at most one.
        assert monitor.samples - count >= 5, monitor.samples - count
        assert not monitor.is_stale()
    finally:
        await monitor.stop()


async def test_a_failed_process_poll_is_said_and_polling_goes_on(tmp_path: Path) -> None:
    """nvidia-smi vanishes for a while (the transport cannot start it): the process poll
    says so and keeps polling; the list comes back once nvidia-smi does."""
    smi = write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))
    loop_errors: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: loop_errors.append(ctx))
    monitor = make_monitor(direct_host(smi, interval=0.5))
    monitor.start()
    try:
        await until(
            lambda: monitor.processes_time is not None,
            15,
            said(monitor, "a process list"),
            pause=monitor.wait_for_update,
        )
        script = smi.read_text()
        smi.unlink()  # the running loop keeps streaming; new nvidia-smi runs fail to start
        await until(
            lambda: any("cannot run" in text for _, text in monitor.alerts.notes()),
            15,
            said(monitor, "the failed poll to be said"),
            pause=monitor.wait_for_update,
        )
        smi.write_text(script)
        smi.chmod(0o755)
        polled = monitor.processes_time
        await until(
            lambda: monitor.processes_time != polled,
            15,
            said(monitor, "polling to go on"),
            pause=monitor.wait_for_update,
        )
        assert monitor.latest is not None and monitor.latest.processes
    finally:
        await monitor.stop()
    assert loop_errors == []


FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"


def fake_smi_host(python: str) -> HostConfig:
    """tests/support/fake_smi.py streamed directly (``false``) or through the agent."""
    host = direct_host(FAKE_SMI, interval=0.3)
    return dataclasses.replace(host, python=sys.executable) if python == "agent" else host


@pytest.mark.parametrize("python", ["false", "agent"])
async def test_a_driver_before_r535_still_shows_its_gpus(
    python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 point 12: before R535 nvidia-smi knows neither clocks_event_reasons.active
    (it is clocks_throttle_reasons.active) nor power.draw.instant, and one unknown field
    fails the whole query. Direct mode and the agent both ask what its --help-query-gpu
    lists (tests/fixtures/nvidia/help_query_gpu_pre_r535.txt), under the old name."""
    monkeypatch.setenv("FAKE_SMI_DRIVER", "pre-r535")
    monitor = make_monitor(fake_smi_host(python))
    monitor.start()
    try:
        await until(
            lambda: monitor.samples >= 1,
            15,
            said(monitor, "a sample from the old driver"),
            pause=monitor.wait_for_update,
        )
        want = SampleSource.SMI_DIRECT if python == "false" else SampleSource.AGENT_SMI
        assert monitor.status.source == want
        assert monitor.latest is not None
        (gpu,) = monitor.latest.gpus
        assert gpu.clocks_event_reasons == 0x4 and gpu.power_w == 80.5
        assert gpu.power_instant_w is None and monitor.status.error is None
    finally:
        await monitor.stop()


@pytest.mark.parametrize("python", ["false", "agent"])
async def test_a_gpu_whose_line_is_over_the_bound_is_kept_its_name_cut_and_said(
    python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 point 7: a 100,000-character name put GPU 3's line over the agent's
    64 KiB line bound and the GPU was gone (7 of 8, nothing said); streamed directly it
    came whole. Both ways the GPU stays, its name cut to NAME_MAX_CHARS, said once."""
    monkeypatch.setenv("FAKE_SMI_GPUS", "8")
    monkeypatch.setenv("FAKE_SMI_LONG_NAME", "3:100000")
    monitor = make_monitor(fake_smi_host(python))
    monitor.start()
    try:
        await until(lambda: monitor.samples >= 3, 20, "no samples")
        assert monitor.latest is not None
        gpus = {g.index: g for g in monitor.latest.gpus}
        assert sorted(gpus) == list(range(8))
        name = gpus[3].name
        assert name is not None and name == "NVIDIA " + "X" * (NAME_MAX_CHARS - 7) + "..."
        assert gpus[3].memory_total_mib == 97887 and gpus[3].power_w == 80.5  # after the name
        assert gpus[2].name == gpus[4].name == "NVIDIA RTX PRO 6000"
        said = [text for _, text in monitor.alerts.notes() if "name cut" in text]
        assert len(said) == 1 and said[0].startswith("GPU 3: nvidia-smi printed a line of 100,")
    finally:
        await monitor.stop()
