"""Local files the config names (``identity``, ``known_hosts``, ``outbox``, a terminal
notifier's ``tty``): refused at load when they are not what they must be, and read with a
bound.

``known_hosts = "/dev/zero"`` once passed ``config check`` and then grew ``snapshot`` to
17 GB as the SSH library read it to the end; a FIFO would block the read for ever. So:
``regular_file`` is the checker of the files gpumon reads or keeps (a path that exists must
be a regular file, following links; a missing one is left to the command that uses it,
which names it), ``terminal`` that of the tty it writes to, and ``read_bounded`` is how a
command reads one: opened without blocking, refused unless it is a regular file, never more
than ``most`` bytes read.

Standard library only.
"""

from __future__ import annotations

import os
import stat

from gpumon.backends.config.limits import show
from gpumon.backends.config.schema import Invalid, word
from gpumon.backends.errors import GpumonError

IDENTITY_MAX = 1 << 20  # a 16384-bit RSA private key is ~13 KiB; a key with a cert ~30 KiB
KNOWN_HOSTS_MAX = 64 << 20  # ~400,000 lines of hashed entries


class FileRefused(GpumonError):
    """A local file that cannot be read as the key's file; ``str()`` names the key, the
    file and why (``known_hosts /dev/zero: not a regular file (a character device)``)."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words: "a FIFO", "a regular file"."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((what for test, what in _KINDS if test(mode)), "something else")


def _not_regular(mode: int) -> str | None:
    """Why a file of ``mode`` is refused, or None for a regular file."""
    return None if stat.S_ISREG(mode) else f"not a regular file ({_kind(mode)})"


def _kind_of(path: str) -> str | None:
    """Why ``path`` is refused as the key's file, or None (regular, or cannot be stat'ed)."""
    try:
        return _not_regular(os.stat(path).st_mode)
    except OSError:
        return None


def regular_file(v: object) -> str:
    """A checker: a path (``~`` expanded) that is a regular file or does not exist (yet).

    Raises ``Invalid`` for a device, FIFO, socket or directory, naming what it is.
    """
    path = os.path.expanduser(word(v))
    why = _kind_of(path)  # None also when missing: the command that reads it says so
    if why is not None:
        raise Invalid(f"{show(path)}: {why}")
    return path


def terminal(v: object) -> str:
    """A checker for a terminal to write to (``[notify.NAME] tty``): a path that is a
    character device, a regular file, or does not exist; a FIFO (whose opening would wait
    for a reader for ever), socket or directory is refused."""
    path = os.path.expanduser(word(v))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if not stat.S_ISCHR(mode) and not stat.S_ISREG(mode):
        raise Invalid(f"{show(path)}: not a terminal or a regular file ({_kind(mode)})")
    return path


def read_bounded(path: str, most: int, key: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``most`` of them.

    Raises ``FileRefused`` naming ``key`` and the file when it is missing, unreadable, not
    a regular file or larger than ``most``; never blocks on a FIFO, never reads a device.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileRefused(f"{key} {path}: no such file") from None
    except OSError as e:  # a socket cannot be opened: say what it is, not ENXIO
        problem = _kind_of(path) or f"cannot read: {e.strerror or e}"
        raise FileRefused(f"{key} {path}: {problem}") from None
    with os.fdopen(fd, "rb") as f:
        why = _not_regular(os.fstat(fd).st_mode)
        if why is not None:
            raise FileRefused(f"{key} {path}: {why}")
        try:
            data = f.read(most + 1)
        except OSError as e:
            raise FileRefused(f"{key} {path}: cannot read: {e.strerror or e}") from None
    if len(data) > most:
        raise FileRefused(f"{key} {path}: larger than {most >> 20} MiB; not read")
    return data
