"""A local command's stream ends with its process: however ``ProcessStream.close`` ends
(its grace spent, or itself cancelled by an app shutting down), the child is killed and
reaped while the event loop runs, so no process or transport outlives the loop. What it
sends is bounded: a line too long is cut, ``run`` keeps at most its ``max_bytes``."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.transport import LocalTransport
from gpumon.backends.transport.base import ProcessStream

from stream_bounds import long_line_is_cut, run_keeps_its_bound
from waiting import until

pytestmark = pytest.mark.system

DEAF = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"  # ignores stdin


def gone(pid: int) -> bool:
    """Reaped: not even a zombie is left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def start_deaf() -> tuple[LocalTransport, ProcessStream, int]:
    transport = LocalTransport(resolve_host(Config(path=None), "local"))
    stream = await transport.open_stream([sys.executable, "-c", DEAF])
    pid = int(await stream.readline())
    return transport, stream, pid


async def test_a_child_that_ignores_its_stdin_is_killed_after_the_grace() -> None:
    _, stream, pid = await start_deaf()
    await stream.close(grace=0.2)
    assert gone(pid)


async def test_a_close_cancelled_during_its_grace_still_kills_and_reaps_the_child() -> None:
    _, stream, pid = await start_deaf()
    closing = asyncio.ensure_future(stream.close(grace=30))
    await until(lambda: stream._closed, 5, "the close to begin")
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert gone(pid)


async def test_a_line_longer_than_the_bound_is_cut_not_an_error() -> None:
    await long_line_is_cut(LocalTransport(resolve_host(Config(path=None), "local")))


async def test_a_run_keeps_at_most_its_bound_of_a_flood() -> None:
    await run_keeps_its_bound(LocalTransport(resolve_host(Config(path=None), "local")))
