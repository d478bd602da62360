"""A name that never resolved is not retried forever: the first connection's "no such
name" ends the host (FAILED) with what was tried and the configured hosts; a refused
port says to check sshd and the port.

No DNS query leaves this machine: the loop's resolver answers the one name the test
uses as a resolver answers a name it does not know (``socket.gaierror`` EAI_NONAME),
the way the simulator stands in for the GPU."""

from __future__ import annotations

import asyncio
import getpass
import socket
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import ConnState
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.transport.ssh import name_unknown

from waiting import until

pytestmark = pytest.mark.system

NAME = "nosuchhost"


def no_such_name(asked: list[str]) -> Any:
    """A loop resolver that knows no name (and counts the questions)."""

    async def getaddrinfo(host: object, *_args: object, **_kw: object) -> object:
        asked.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    return getaddrinfo


async def test_a_name_that_never_resolved_fails_once_and_says_what_was_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    cfg = tmp_path / "config.toml"
    cfg.write_text('[hosts.gpu1]\nssh = "root@127.0.0.1:9"\n[hosts.gpu2]\nssh = "gpu2"\n')
    config = load_config(cfg)
    asked: list[str] = []
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_such_name(asked))
    monitor = make_monitor(resolve_host(config, NAME))
    monitor.start()
    try:
        await until(lambda: monitor.status.state == ConnState.FAILED, 10, "FAILED, not retried")
        error = monitor.status.error or ""
        await asyncio.sleep(1.5)  # a retry's first backoff is at most 1 s
        assert monitor.status.state == ConnState.FAILED
        assert asked == [NAME]  # asked once: no retry loop
    finally:
        await monitor.stop()
    assert error.startswith(f"cannot resolve {NAME}: name or service not known")
    assert f"user {getpass.getuser()}" in error and "port 22" in error
    assert "from the command line" in error
    assert f"hosts in {cfg}: gpu1, gpu2 (built in: demo, local)" in error


def test_only_a_name_the_resolver_does_not_know_is_final() -> None:
    assert name_unknown(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    # A resolver that did not answer (DNS down) may answer later: retried as before.
    assert not name_unknown(socket.gaierror(socket.EAI_AGAIN, "Temporary failure"))
    assert not name_unknown(ConnectionRefusedError(111, "Connection refused"))


async def _failure(monitor: HostMonitor) -> str:
    """The error ``monitor``'s one connection attempt ends with."""
    monitor.start()
    try:
        await until(lambda: monitor.status.state == ConnState.FAILED, 10, "FAILED")
    finally:
        await monitor.stop()
    return monitor.status.error or ""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connection_refused_says_to_check_sshd_and_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    port = _closed_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[hosts.gpu1]\nssh = "root@127.0.0.1"\nport = {port}\n')
    for name, key in (("gpu1", "check the host's `port` key"), (f"root@127.0.0.1:{port}", "")):
        error = await _failure(make_monitor(resolve_host(load_config(cfg), name), reconnect=False))
        said = f"connection refused: is sshd running on 127.0.0.1 port {port}?"
        assert said in error, error
        assert (key or "check the port (127.0.0.1:PORT)") in error
