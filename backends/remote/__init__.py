"""Code that runs ON the target (standard library only, Python 3.8) and what ships it."""

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
