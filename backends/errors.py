"""The one base of the errors gpumon reports to its user.

Each part raises its own subclass (``ConfigError``, ``TransportError``, ``JobError``, ...),
so a caller can catch one part's refusals; the command line catches ``GpumonError`` once.
``str()`` of any of them is the whole message for the user, made printable where it
quotes a machine.
"""

from __future__ import annotations

__all__ = ["GpumonError"]


class GpumonError(Exception):
    """Something gpumon could not do, said for the user (``str()`` is the message)."""
