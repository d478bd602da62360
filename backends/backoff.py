"""The one backoff: how long to wait before trying again after failures in a row
(reconnecting to a host, delivering to a notifier, restarting a crashed job)."""

from __future__ import annotations

__all__ = ["backoff_s"]

# 2**64 times any first wait is far past any cap; a larger power overflows a float.
_MAX_DOUBLINGS = 64


def backoff_s(earlier: int, *, first: float, cap: float) -> float:
    """Seconds to wait after a failure that follows ``earlier`` failures in a row:
    ``first`` after the first one (``earlier`` 0), doubling with each, at most ``cap``.
    Any ``earlier`` is fine, however many failures a long outage counts."""
    return min(cap, first * 2.0 ** min(max(earlier, 0), _MAX_DOUBLINGS))
