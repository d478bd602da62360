"""Where a monitor's data comes from: the agent over a transport, nvidia-smi direct, a replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.backends.lazy import lazy_exports

if TYPE_CHECKING:
    from .agent import AgentSource
    from .base import AGENT, DIRECT_SMI, REPLAY, Capabilities, Sink, Source
    from .connection import TransportSource, backoff_delay
    from .direct import DirectSmiSource
    from .replay import SPEEDS, ReplaySource

__all__ = [
    "AGENT",
    "DIRECT_SMI",
    "REPLAY",
    "SPEEDS",
    "AgentSource",
    "Capabilities",
    "DirectSmiSource",
    "ReplaySource",
    "Sink",
    "Source",
    "TransportSource",
    "backoff_delay",
]

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks
# the names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:
    __getattr__ = lazy_exports(
        __name__,
        {
            "AGENT": "base",
            "AgentSource": "agent",
            "Capabilities": "base",
            "DIRECT_SMI": "base",
            "DirectSmiSource": "direct",
            "REPLAY": "base",
            "ReplaySource": "replay",
            "SPEEDS": "replay",
            "Sink": "base",
            "Source": "base",
            "TransportSource": "connection",
            "backoff_delay": "connection",
        },
    )
