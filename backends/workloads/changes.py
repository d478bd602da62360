"""What changed on a host since a job's baseline run: the newest torch swap in the audit log.

``job_slow`` says "since the baseline: torch swapped cu128 -> cu130 at 14:02 (audit)"
when gpumon swapped torch on the host after the baseline run started (the reference
machine's story: a swap, then a quarter of the speed). The audit log is written by
``actions.audit`` (a higher layer, which this one may not import); reading it needs only
its path (``paths.audit_log``) and its line format, one JSON object a line with ``time``
(ISO 8601 with offset), ``action``, ``host``, ``outcome`` and ``parameters`` (``from``,
``to``: ``2.11.0+cu128``). Only a swap that took (outcome ``swapped``) counts. The torch
the doctor reads now is not used: it lives in ``torchenv`` (higher too), and the audit
entry already names both the version and the variant before and after.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from pathlib import Path

from gpumon.backends import untrusted
from gpumon.backends.paths import audit_log

__all__ = ["SWAPPED", "SWAP_ACTION", "SwapReader", "swap_words"]

SWAP_ACTION = "swap-torch"  # ``torchenv.swap_run.ACTION`` is this
SWAPPED = "swapped"  # the outcome of a swap that took (``swap_run.SwapOutcome.result``)


class SwapReader:
    """The newest swap of torch on a host after a moment, from the audit log at ``path``
    (default ``paths.audit_log()``). The file is read again only when it changed (the slow
    rule asks every sample while a job is slow); an unreadable file or line is no swap."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._swaps: list[tuple[float, str, str, str]] = []  # (time, host, from, to)

    def since(self, host: str, start: float, now: float) -> str | None:
        """``torch swapped cu128 -> cu130 at 14:02 (audit)`` for the newest swap on
        ``host`` at or after epoch ``start``, or None; ``now``: the caller's clock."""
        found = [s for s in self._read() if s[1] == host and s[0] >= start]
        if not found:
            return None
        at, _, was, to = max(found)
        return swap_words(was, to, at, now)

    def _read(self) -> list[tuple[float, str, str, str]]:
        path = self.path if self.path is not None else audit_log()
        try:
            st = path.stat()
        except OSError:
            self._stamp, self._swaps = None, []
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self._swaps
        swaps = []
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in path.read_text(encoding="utf-8").splitlines():
                if SWAP_ACTION not in line:
                    continue
                swap = _swap(line)
                if swap is not None:
                    swaps.append(swap)
        self._stamp, self._swaps = stamp, swaps
        return swaps


def _swap(line: str) -> tuple[float, str, str, str] | None:
    try:
        entry = untrusted.loads(line)  # a file anyone may edit
        if entry.get("action") != SWAP_ACTION or entry.get("outcome") != SWAPPED:
            return None
        params = entry.get("parameters") or {}
        at = dt.datetime.fromisoformat(str(entry["time"])).timestamp()
        return at, str(entry["host"]), str(params["from"]), str(params["to"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def swap_words(was: str, to: str, at: float, now: float) -> str:
    """``2.11.0+cu128`` -> ``2.11.0+cu130`` at epoch ``at``: ``torch swapped cu128 -> cu130
    at 14:02 (audit)`` (only the variants when the version is the same; the date too when
    it was not in the last day, local time)."""
    base_was, _, var_was = was.partition("+")
    base_to, _, var_to = to.partition("+")
    if base_was == base_to and var_was and var_to:
        was, to = var_was, var_to
    when = time.localtime(at)
    clock = time.strftime("%H:%M", when)
    if abs(now - at) >= 86400:
        clock = time.strftime("%Y-%m-%d %H:%M", when)
    return f"torch swapped {was} -> {to} at {clock} (audit)"
