"""Fixtures for the integration tests: a real sshd per test, and a clean client env."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sshd_server import SSHD, SshServer


def _require_sshd() -> None:
    if not Path(SSHD).exists():
        pytest.fail(
            "OpenSSH server not installed (apt-get install openssh-server); .ci/run installs it"
        )


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    _require_sshd()
    server = SshServer(tmp_path / "sshd")
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def client_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a gpumon child: its own HOME, no ~/.ssh/config, no agent."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        GPUMON_SSH_CONFIG="",
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".state"),
    )
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("GPUMON_CONFIG", None)
    return env
