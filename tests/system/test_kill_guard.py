"""``K``'s PID-reuse guard against a real process of this machine whose command name is
built to fool a naive parser of ``/proc/PID/stat``: spaces, parentheses and digits in it
(the name is what ``prctl``/``/proc/self/comm`` says, up to 15 bytes). The guard reads the
start time after the last ``)``: one tick off signals nothing, the listed one ends it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.actions import audit
from gpumon.backends.actions.kill import REUSED_EXIT, kill_plan, send_signal, wait_gone
from gpumon.backends.config import HostConfig
from gpumon.backends.model import GpuProcess, ProcessSource
from gpumon.backends.remote import host_procs, procfacts
from gpumon.backends.transport.local import LocalTransport

pytestmark = pytest.mark.system

TRICKY = "x) S 1 2 3 (y"  # 13 bytes: a fake state and numbers after a ')' of its own
HOLDER = f"open('/proc/self/comm', 'w').write({TRICKY!r}); import time; time.sleep(60)"


@pytest.fixture
def tricky() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != TRICKY:
            assert time.monotonic() < deadline, "the process did not rename itself"
            time.sleep(0.02)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def listed(pid: int) -> GpuProcess:
    """The process as the collector describes it (its record's start_ticks)."""
    [rec] = host_procs.describe("/proc", [pid], procfacts.CpuClock())
    assert rec["start_ticks"] is not None and f"({TRICKY})" in Path(f"/proc/{pid}/stat").read_text()
    return GpuProcess(
        pid=pid,
        name="python3",
        memory_mib=100,
        host_pid=pid,
        start_ticks=rec["start_ticks"],
        source=ProcessSource.HOST.value,
    )


async def test_the_guard_reads_the_start_time_after_the_last_parenthesis(
    tricky: subprocess.Popen[bytes], state_home: Path
) -> None:
    transport = LocalTransport(HostConfig(name="box", kind="local"))
    process = listed(tricky.pid)
    assert process.start_ticks is not None
    off = replace(process, start_ticks=process.start_ticks + 1)
    wrong = kill_plan("box", off, host_access=True, container=None)
    res = await transport.run(wrong.command("TERM"), on_host=True)
    assert res.exit_code == REUSED_EXIT
    assert f"started at tick {process.start_ticks}, not {off.start_ticks}" in res.stderr
    outcome = await send_signal(transport, wrong, "TERM")
    assert outcome.reused and outcome.message.startswith(
        f"PID {tricky.pid} is now a different process; not killed"
    )
    time.sleep(0.2)
    assert tricky.poll() is None  # nothing reached it

    right = kill_plan("box", process, host_access=True, container=None)
    outcome = await send_signal(transport, right, "TERM")
    assert outcome.ok, outcome.message
    assert tricky.wait(timeout=10) == -15
    assert await wait_gone(transport, right, timeout=5)
    assert [e["outcome"] for e in audit.read_entries()] == ["refused", "ok"]
