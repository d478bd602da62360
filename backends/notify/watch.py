"""The watch lock: which gpumon delivers. ``hold_watch_lock()`` takes
``$XDG_STATE_HOME/gpumon/watch.lock`` for a ``gpumon watch`` (whose parts are the
runtime's: ``backends.runtime``); while a watch holds it, the dashboard leaves delivery to
the watch (``dashboard_delivery = "auto"``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from gpumon.backends.errors import GpumonError
from gpumon.backends.paths import watch_lock

__all__ = ["WatchLocked", "hold_watch_lock", "watch_running"]


class WatchLocked(GpumonError):
    """Another ``gpumon watch`` holds the lock (it would deliver every alert twice)."""


def hold_watch_lock(path: Path | None = None) -> IO[str]:
    """Take the watch lock (kept while the returned file stays open); raises WatchLocked
    naming the pid of the watch that has it."""
    path = path or watch_lock()
    path.parent.mkdir(parents=True, exist_ok=True)
    f = path.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise WatchLocked(f"another gpumon watch is running (pid {pid}, lock {path})") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def watch_running(path: Path | None = None) -> bool:
    """Whether a ``gpumon watch`` holds the lock now."""
    path = path or watch_lock()
    try:
        with path.open("a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return path.exists()
    return False
