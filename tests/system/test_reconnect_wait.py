"""The reconnect loop's wait: a machine seen down and then answering again (a real TCP
listener on 127.0.0.1 that goes away and comes back) ends the wait at once; one that
stays down, or answers all along while its sessions fail, keeps the full backoff; and
one that accepts and never answers (a hung sshd) is probed on the outage's schedule,
not every second."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from hung_sshd import HungSshd

from gpumon.backends.config import HostConfig
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources import DirectSmiSource
from gpumon.backends.monitor.sources.connection import ProbeSchedule
from gpumon.backends.transport import LocalTransport, SshTransport

from waiting import until

pytestmark = pytest.mark.system


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _source(port: int) -> DirectSmiSource:
    host = HostConfig(name="box", kind="ssh", ssh_host="127.0.0.1", port=port)
    return DirectSmiSource(SshTransport(host))


async def _listen(port: int) -> asyncio.Server:
    async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    return await asyncio.start_server(accept, "127.0.0.1", port)


async def test_a_host_that_comes_back_ends_the_wait_at_once() -> None:
    port = _free_port()
    source = _source(port)
    started = time.monotonic()
    wait = asyncio.create_task(source.wait_to_retry(30.0))
    await asyncio.sleep(1.5)  # down: the probes are refused
    assert not wait.done()
    server = await _listen(port)
    try:
        assert await asyncio.wait_for(wait, 5.0) is True
        assert time.monotonic() - started < 3.5  # the next probe (1 s apart) saw it
    finally:
        server.close()


async def test_a_host_that_stays_down_keeps_the_backoff() -> None:
    source = _source(_free_port())
    started = time.monotonic()
    assert await source.wait_to_retry(2.5) is False
    assert time.monotonic() - started >= 2.4


async def test_a_host_that_answers_all_along_keeps_the_backoff() -> None:
    """sshd is up but sessions fail (a broken agent, say): no tight retry loop."""
    port = _free_port()
    server = await _listen(port)
    try:
        started = time.monotonic()
        assert await _source(port).wait_to_retry(2.5) is False
        assert time.monotonic() - started >= 2.4
    finally:
        server.close()


async def test_a_transport_that_cannot_tell_sleeps_the_backoff() -> None:
    host = HostConfig(name="box", kind="local")
    started = time.monotonic()
    assert await DirectSmiSource(LocalTransport(host)).wait_to_retry(0.5) is False
    assert time.monotonic() - started >= 0.45


async def test_a_host_that_accepts_and_never_answers_is_probed_on_the_schedule() -> None:
    """Issue 34 point 10, on a short schedule: the probes back off across the outage's
    waits while the SSH attempts go on at the reconnects' backoff. Before, a probe went
    every second of every wait (637 connections in 15 minutes with the real one)."""
    schedule = ProbeSchedule(fast_s=2.0, cap_s=8.0)
    async with HungSshd() as hung:
        host = HostConfig(
            name="box", kind="ssh", ssh_host="127.0.0.1", port=hung.port, connect_timeout=1.0
        )
        source = DirectSmiSource(SshTransport(host))
        source.probes = schedule
        monitor = HostMonitor(host, source, record=False)
        started = time.monotonic()
        monitor.start()
        try:
            await until(lambda: len(hung.attempts) >= 5, 90, "five SSH attempts")
        finally:
            await monitor.stop()
        took = time.monotonic() - started
    # At most what the schedule allows had the whole run been one wait (the outage began
    # after the first attempt's timeout, and the attempts take from the waits).
    allowed = ProbeSchedule(fast_s=2.0, cap_s=8.0)
    allowed.begin(0.0)
    most = 0
    while allowed.due <= took:
        most += 1
        allowed.probed(allowed.due)
    print(f"{took:.1f} s: {len(hung.probes)} probes (at most {most}), {len(hung.attempts)} tries")
    assert 1 <= len(hung.probes) <= most
    assert most < took - 5 * host.connect_timeout  # the 1 s probes of every wait would pass it
