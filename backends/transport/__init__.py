"""How gpumon runs commands on a machine: one Transport interface; SSH and local."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .base import (
        ProcessStream,
        RunResult,
        Transport,
        TransportError,
        ssh_command,
        wrap_container,
    )
    from .local import LocalTransport, kill_group
    from .ssh import SshTransport

__all__ = [
    "LocalTransport",
    "ProcessStream",
    "RunResult",
    "SshTransport",
    "Transport",
    "TransportError",
    "kill_group",
    "ssh_command",
    "wrap_container",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "LocalTransport": "local",
            "ProcessStream": "base",
            "RunResult": "base",
            "SshTransport": "ssh",
            "Transport": "base",
            "TransportError": "base",
            "kill_group": "local",
            "ssh_command": "base",
            "wrap_container": "base",
        },
    )
