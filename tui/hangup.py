"""Leaving quietly when the terminal goes away (tmux pane killed, SSH session dropped).

Textual writes the screen from a writer thread; once the terminal is gone that thread
dies on the first failed write and later writes block the event loop for good on its full
queue, so the app could never exit. The driver made here checks, before each write, that
the terminal is still there (one ioctl); when it is not, it drops all further output and
asks the app to exit. That works whether or not a SIGHUP arrives (nohup, wrappers).
"""

from __future__ import annotations

import os
import sys

from textual.driver import Driver


def hangup_safe(base: type[Driver]) -> type[Driver]:
    """A subclass of ``base`` that stops writing, and exits the app, once the terminal
    has hung up; ``gone = True`` on the class switches output off from outside."""
    tty = terminal_fd()

    class HangupSafeDriver(base):  # type: ignore[valid-type,misc]
        gone = False

        def write(self, data: str) -> None:
            cls = type(self)
            if cls.gone:
                return
            if terminal_gone(tty):
                cls.gone = True
                self._app.exit(0)
                return
            super().write(data)

    return HangupSafeDriver


def terminal_fd() -> int | None:
    """The file descriptor of our terminal if stdin is one, else None."""
    stdin = sys.__stdin__
    try:
        fd = stdin.fileno() if stdin is not None else -1
    except (OSError, ValueError):
        return None
    return fd if fd >= 0 and os.isatty(fd) else None


def terminal_gone(fd: int | None) -> bool:
    """Whether the terminal behind ``fd`` (from ``terminal_fd``) has hung up."""
    return fd is not None and not os.isatty(fd)
