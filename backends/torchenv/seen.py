"""The torch each doctor run found: one JSON line per run in the torch-seen log.

``job_slow`` says what changed on a host since a job's baseline run (``workloads/
changes.py``). gpumon's own swaps are in the audit log; a torch changed by hand or by a new
image is known only from the doctor, which imports torch on the target. Every doctor run
that found a torch appends ``{"time", "host", "torch"}`` here (``paths.torch_seen_log``),
``torch`` the version with its local tag (``2.11.0+cu130``; a version without one gets its
variant: ``2.11.0 (cu130)``). The log keeps its last ``KEEP_LINES`` lines: a doctor run is
a person's action, so this is years of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpumon.backends.model import iso_time
from gpumon.backends.paths import torch_seen_log
from gpumon.backends.torchenv.checks import Facts

__all__ = ["KEEP_LINES", "record_seen", "seen_torch"]

KEEP_LINES = 2000


def seen_torch(facts: dict[str, Any], host: str) -> str | None:
    """The torch the probe ``facts`` found, as the log says it; None: none installed."""
    f = Facts(facts, host)
    version = f.version
    if version is None:
        return None
    if "+" not in version and f.variant:
        return f"{version} ({f.variant})"
    return version


def record_seen(
    host: str,
    facts: dict[str, Any],
    *,
    at: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """Append what the doctor found on ``host``; the log's path, or None when no torch was
    found or the log cannot be written (the doctor's answer matters more than this note)."""
    torch = seen_torch(facts, host)
    if torch is None:
        return None
    path = torch_seen_log(env)
    entry = {"time": iso_time(time.time() if at is None else at), "host": host, "torch": torch}
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        _trim(path)
    except OSError:
        return None
    return path


def _trim(path: Path) -> None:
    """Keep the last ``KEEP_LINES`` lines (rewritten whole, atomically, when longer)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) <= KEEP_LINES:
            return
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(lines[-KEEP_LINES:])
        os.replace(tmp, path)
