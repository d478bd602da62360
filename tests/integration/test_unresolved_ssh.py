"""A host that connected once and whose name then stops resolving (a DNS outage) keeps
retrying, as any lost host does: only a name that never resolved is given up on
(tests/system/test_unresolved_host.py). A real sshd on 127.0.0.1; the loop's resolver
answers the test's name with 127.0.0.1, then as a resolver that no longer knows it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import ConnState
from gpumon.backends.monitor import make_monitor

from sshd_server import SshServer
from waiting import until

pytestmark = pytest.mark.integration

NAME = "gpu-a.test"


async def test_a_host_that_once_connected_keeps_retrying_when_its_name_fails(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    known = {"now": True}

    async def resolver(host: Any, *args: Any, **kw: Any) -> Any:
        if host == NAME and known["now"]:
            return await real("127.0.0.1", *args, **kw)
        if host == NAME:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return await real(host, *args, **kw)

    monkeypatch.setattr(loop, "getaddrinfo", resolver)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{NAME}]:{sshd.port} ssh-ed25519 {sshd.host_key_pub}\n")
    cfg = tmp_path / "config.toml"
    text = sshd.config_toml(container=200, interval=0.5).replace("127.0.0.1", NAME)
    cfg.write_text(text.replace(str(sshd.known_hosts), str(known_hosts)))
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"), record=False)
    monitor.start()
    try:
        await until(lambda: monitor.samples >= 1, 30, "a first sample over SSH")
        known["now"] = False
        sshd.kill()  # the session ends; the next connection finds no such name
        await until(
            lambda: "name or service not known" in (monitor.status.error or ""),
            30,
            lambda: f"the failed lookup said ({monitor.status})",
        )
        said = monitor.status
        assert said.state == ConnState.RECONNECTING
        assert "cannot connect to gpu-a.test" in (said.error or "")
        await asyncio.sleep(1.5)
        assert monitor.status.state in (ConnState.RECONNECTING, ConnState.CONNECTING)
    finally:
        await monitor.stop()
