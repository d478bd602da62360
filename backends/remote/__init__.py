"""Code that runs ON the target (standard library only, Python 3.8) and what ships it.

The names below resolve on first use: gpumon's own process reads the protocol of every
sample, but loads the agent's modules only where it uses them (the bootstrap that ships
them, the tests); ``snapshot local`` runs the agent's round in gpumon's own process
(``monitor.oneshot``), ``check local`` the installed agent in its own process.
The shipped copy never runs this file (``bootstrap``, ``transport.prestart``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import RowBatcher
    from .bootstrap import BOOTSTRAP, program_argv, program_tag
    from .logtail import LOG_BACKLOG_BYTES, LOG_FLOOD_NEWEST, LOG_MAX_LINES, LogTail
    from .protocol import AGENT_VERSION, MESSAGES, AgentOptions, SetInterval

__all__ = [
    "AGENT_VERSION",
    "BOOTSTRAP",
    "LOG_BACKLOG_BYTES",
    "LOG_FLOOD_NEWEST",
    "LOG_MAX_LINES",
    "MESSAGES",
    "AgentOptions",
    "LogTail",
    "RowBatcher",
    "SetInterval",
    "program_argv",
    "program_tag",
]

# Where each name is defined (gpumon.backends.lazy does this for the other packages; this
# one stays standard library only).
_WHERE = {
    "RowBatcher": "agent",
    "BOOTSTRAP": "bootstrap",
    "program_argv": "bootstrap",
    "program_tag": "bootstrap",
    "LOG_BACKLOG_BYTES": "logtail",
    "LOG_FLOOD_NEWEST": "logtail",
    "LOG_MAX_LINES": "logtail",
    "LogTail": "logtail",
    "AGENT_VERSION": "protocol",
    "MESSAGES": "protocol",
    "AgentOptions": "protocol",
    "SetInterval": "protocol",
}

# Not seen by mypy: a module __getattr__ would make every unknown name Any; mypy checks the
# names against the TYPE_CHECKING imports above instead.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
