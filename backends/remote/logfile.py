"""Opening a followed log on the target (standard library only, Python 3.8): shipped with
the agent (``logtail``) and the doctor's probe, which open watched logs the same way.

Only a regular file is a log. ``open()`` of a FIFO waits for a writer: one FIFO among the
watched logs hung the agent's log thread, and with it the following of every log on that
host, and held the doctor's probe to the end of its time. A device or a socket is no log
either. So the path is checked first, opened with ``O_NONBLOCK`` (a FIFO put there after
the check does not block the open) and checked again on the open descriptor.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # typing is not imported on the target (see protocol)
if TYPE_CHECKING:
    from typing import BinaryIO

NOT_REGULAR = "not a regular file"


def not_regular(path: str, mode: int) -> OSError:
    """The error said for ``path``, there with ``mode`` but no regular file: a
    directory's own, else ``NOT_REGULAR``."""
    if stat.S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return OSError(errno.EINVAL, NOT_REGULAR, path)


def open_log(path: str) -> BinaryIO:
    """``path`` open for reading (binary); OSError where it cannot be, ``NOT_REGULAR``
    its ``strerror`` for anything but a regular file or a directory."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
