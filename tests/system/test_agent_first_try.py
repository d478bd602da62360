"""The agent starts on the first choice of Python with no probe before it; a first
choice that gives no agent leaves the choice to the probes, as before. Run for real:
local transports, this interpreter, the fake NVML and the simulator's nvidia-smi."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.monitor import HostMonitor, demo_settings, make_monitor
from gpumon.backends.remote import protocol
from gpumon.backends.remote.doctor_probe_fs import GPUMON_CHECK
from gpumon.backends.sim import write_wrapper
from gpumon.backends.transport.base import ProcessStream

pytestmark = pytest.mark.system

FAKE_NVML = Path(__file__).parents[1] / "support" / "fake_nvml"


def record_starts(monitor: HostMonitor) -> list[list[str]]:
    """Every argv the monitor's transport starts, in order (the probes' included)."""
    transport = monitor.source.transport
    assert transport is not None
    started: list[list[str]] = []
    open_stream = transport.open_stream

    async def spy(argv: Sequence[str]) -> ProcessStream:
        started.append(list(argv))
        return await open_stream(argv)

    transport.open_stream = spy  # type: ignore[method-assign]
    return started


async def first_sample(host: HostConfig, timeout: float = 20) -> tuple[object, list[list[str]]]:
    """One session on ``host`` until its first sample: the sample's source and every
    argv the transport started."""
    monitor = make_monitor(host, reconnect=False)
    started = record_starts(monitor)
    monitor.start()
    try:
        deadline = time.monotonic() + timeout
        while monitor.latest is None:
            assert time.monotonic() < deadline, monitor.status
            await monitor.wait_for_update(0.5)
        return monitor.status.source, started
    finally:
        await monitor.stop()


async def test_the_first_choice_runs_the_agent_with_no_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML))
    python = tmp_path / "python3"  # not gpumon's own by name: shipped and started as any
    python.symlink_to(sys.executable)
    host = HostConfig(name="box", kind="local", python=str(python), kernel_log=False)
    source, started = await first_sample(host)
    assert source == SampleSource.AGENT_NVML
    assert len(started) == 1 and started[0][0] == str(python), started
    assert "gpumon-agent" in started[0] and GPUMON_CHECK not in started[0]


async def test_a_first_choice_that_gives_no_agent_is_probed_as_before(tmp_path: Path) -> None:
    """``python = false``: its agent says nothing; the probe then refuses it, and the
    session streams nvidia-smi directly, as when the probe came first."""
    smi = write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))
    false = shutil.which("false") or "/bin/false"
    host = HostConfig(name="box", kind="local", python=false, nvidia_smi=str(smi), kernel_log=False)
    source, started = await first_sample(host)
    assert source == SampleSource.SMI_DIRECT
    assert [argv[0] for argv in started[:3]] == [false, false, str(smi)], started
    assert "gpumon-agent" in started[0] and GPUMON_CHECK in started[1]


async def test_a_first_choice_whose_hello_names_python_3_7_is_probed_as_before(
    tmp_path: Path,
) -> None:
    """A "python" that starts the agent but is 3.7 (its Hello says so): refused as the
    probe refuses it (it answers False), and nvidia-smi is streamed directly."""
    smi = write_wrapper(tmp_path / "bin", demo_settings(demo_time=5, frozen=True))
    hello = protocol.encode(protocol.Hello(protocol.AGENT_VERSION, "agent/nvml", "3.7.17"))
    old = tmp_path / "python3.7"
    old.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *{GPUMON_CHECK}*) echo False; exit 0;; esac\n'
        f"printf '%s' '{hello}'\n"
        "exec cat >/dev/null\n"
    )
    old.chmod(0o755)
    host = HostConfig(
        name="box", kind="local", python=str(old), nvidia_smi=str(smi), kernel_log=False
    )
    source, started = await first_sample(host)
    assert source == SampleSource.SMI_DIRECT
    assert [argv[0] for argv in started[:3]] == [str(old), str(old), str(smi)], started
    assert "gpumon-agent" in started[0] and GPUMON_CHECK in started[1]
