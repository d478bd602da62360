"""What changed on a host since a job's baseline run: a torch swap in the audit log, else a
torch the doctor found changed.

``job_slow`` and ``gpu_idle_held`` say "torch cu128 -> cu130 at 14:02 (swap by gpumon)"
when gpumon swapped torch on the host before the job went slow or idle (the reference
machine's story: a swap, then a quarter of the speed); the swap is the alert's fact
(``alerts.facts.TorchSwap``), whose incident offers ``d`` to check and ``w`` to swap back.
The audit log is written by ``actions.audit`` (a higher layer, which this one may not
import); reading it needs only its path (``paths.audit_log``) and its line format, one
JSON object a line with ``time`` (ISO 8601 with offset), ``action``, ``host``, ``outcome``
and ``parameters`` (``from``, ``to``: ``2.11.0+cu128``). Only a swap that took (outcome
``swapped``) counts.

A torch changed outside gpumon (``uv pip install`` by hand, a new image) leaves no audit
entry. Every doctor run (``gpumon doctor``, the dashboard's ``d``, a swap's verification)
writes what it found to the torch-seen log (``paths.torch_seen_log``, written by
``torchenv.seen``: ``time``, ``host``, ``torch``, one JSON object a line); ``SeenReader``
compares the last torch seen at or before the baseline run's start with the newest seen
since: ``torch 2.11.0+cu128 (doctor 09:10) -> 2.11.0+cu130 (doctor 14:02), not by
gpumon``. Both times are said: the change happened between them, which may be before the
baseline run started when no doctor ran in between.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.alerts.facts import TorchSwap, clock_words
from gpumon.backends.paths import audit_log, torch_seen_log

__all__ = ["SWAPPED", "SWAP_ACTION", "SeenReader", "SwapReader"]

SWAP_ACTION = "swap-torch"  # ``torchenv.swap_run.ACTION`` is this
SWAPPED = "swapped"  # the outcome of a swap that took (``swap_run.SwapOutcome.result``)


class _JsonLines:
    """A JSON-lines file read again only when it changed (the slow rule asks every sample
    while a job is slow); an unreadable file is empty, an unreadable line is skipped."""

    def __init__(self, path: Path | None, default: Callable[[], Path]) -> None:
        self.path = path
        self._default = default
        self._stamp: tuple[int, int] | None = None
        self._entries: list[Any] = []

    def entries(self, keep: Callable[[str], Any]) -> list[Any]:
        """``keep(line)`` of every line, those that are not None."""
        path = self.path if self.path is not None else self._default()
        try:
            st = path.stat()
        except OSError:
            self._stamp, self._entries = None, []
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self._entries
        found = []
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in path.read_text(encoding="utf-8").splitlines():
                entry = keep(line)
                if entry is not None:
                    found.append(entry)
        self._stamp, self._entries = stamp, found
        return found


class SwapReader:
    """The newest swap of torch on a host after a moment, from the audit log at ``path``
    (default ``paths.audit_log()``). The file is read again only when it changed (the slow
    rule asks every sample while a job is slow); an unreadable file or line is no swap."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lines = _JsonLines(path, audit_log)

    def latest(self, host: str, start: float) -> TorchSwap | None:
        """The newest swap on ``host`` at or after epoch ``start``, or None."""
        found = [s for s in self._read() if s[1] == host and s[0] >= start]
        if not found:
            return None
        at, _, was, to = max(found)
        return TorchSwap(was, to, at)

    def _read(self) -> list[tuple[float, str, str, str]]:
        return self._lines.entries(lambda line: _swap(line) if SWAP_ACTION in line else None)


class SeenReader:
    """The torch the doctor found on a host before and after a moment, from the
    torch-seen log at ``path`` (default ``paths.torch_seen_log()``)."""

    def __init__(self, path: Path | None = None) -> None:
        self._lines = _JsonLines(path, torch_seen_log)

    def since(self, host: str, start: float, now: float) -> str | None:
        """``torch 2.11.0+cu128 (doctor 09:10) -> 2.11.0+cu130 (doctor 14:02), not by
        gpumon`` when the newest torch seen on ``host`` after epoch ``start`` differs from
        the last seen at or before it; None when either is unknown or they agree."""
        seen = sorted(e for e in self._lines.entries(_seen) if e[1] == host)
        before = [e for e in seen if e[0] <= start]
        after = [e for e in seen if e[0] > start]
        if not before or not after or before[-1][2] == after[-1][2]:
            return None
        (was_at, _, was), (at, _, to) = before[-1], after[-1]
        was_when, when = clock_words(was_at, now), clock_words(at, now)
        return f"torch {was} (doctor {was_when}) -> {to} (doctor {when}), not by gpumon"


def _seen(line: str) -> tuple[float, str, str] | None:
    try:
        entry = untrusted.loads(line)  # a file anyone may edit
        at = dt.datetime.fromisoformat(str(entry["time"])).timestamp()
        torch = entry["torch"]
        if not isinstance(torch, str) or not torch:
            return None
        return at, str(entry["host"]), untrusted.printable(torch)[:64]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


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
