"""What a machine sends over SSH is bounded as it is locally (tests/support/stream_bounds):
a 10 MiB line comes cut to ``LINE_MAX`` (asyncssh's ``readline`` has no bound of its own),
``run`` keeps at most its ``max_bytes`` of a 100 MiB flood."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.transport import SshTransport

from sshd_server import SshServer
from stream_bounds import long_line_is_cut, run_keeps_its_bound

pytestmark = pytest.mark.integration


@pytest.fixture
async def ssh(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SshTransport]:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    config = tmp_path / "config.toml"
    config.write_text(sshd.config_toml())
    transport = SshTransport(resolve_host(load_config(str(config)), "ct200"))
    try:
        yield transport
    finally:
        await transport.dispose()


async def test_a_line_longer_than_the_bound_is_cut(ssh: SshTransport) -> None:
    await long_line_is_cut(ssh)


async def test_a_run_keeps_at_most_its_bound(ssh: SshTransport) -> None:
    await run_keeps_its_bound(ssh)
