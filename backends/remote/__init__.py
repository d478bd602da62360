"""Code that runs ON the target (standard library only, Python 3.8) and what ships it."""

from .agent import (
    LOG_BACKLOG_BYTES,
    LOG_FLOOD_NEWEST,
    LOG_MAX_LINES,
    LogTail,
    RowBatcher,
    bootstrap_argv,
)

__all__ = [
    "LOG_BACKLOG_BYTES",
    "LOG_FLOOD_NEWEST",
    "LOG_MAX_LINES",
    "LogTail",
    "RowBatcher",
    "bootstrap_argv",
]
