"""The audit log: every action that changes a machine, one JSON line each, with its outcome.

Written to ``$XDG_STATE_HOME/gpumon/audit.jsonl`` (``~/.local/state/gpumon/audit.jsonl``).
An action is recorded even when it fails or is cancelled; a failure to write the log is
reported to the caller (an unaudited change is not acceptable silently).
"""

from __future__ import annotations

import getpass
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.model import iso_time
from gpumon.backends.paths import audit_log


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in a container: the uid is still meaningful
        return str(os.getuid())


def record(
    action: str,
    host: str,
    outcome: str,
    *,
    job: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    commands: list[str] | None = None,
    pids: list[int] | None = None,
    duration_s: float | None = None,
    detail: str | None = None,
    env: Mapping[str, str] | None = None,
    bundle: str | None = None,
) -> Path:
    """Append one entry; returns the log's path. Raises OSError if it cannot be written.
    ``bundle``: the evidence kept before the action (``gpumon bundle``'s archive)."""
    entry = {
        "time": iso_time(time.time()),
        "user": local_user(),
        "action": action,
        "host": host,
        "job": job,
        "parameters": dict(parameters or {}),
        "commands": list(commands or []),
        "pids": list(pids or []),
        "outcome": outcome,
        "duration_s": None if duration_s is None else round(duration_s, 3),
        "detail": detail,
    }
    if bundle is not None:
        entry["bundle"] = bundle
    path = audit_log(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(entry, ensure_ascii=False) + "\n"
    # One write() of a short line with O_APPEND: concurrent gpumons do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return path


def read_entries(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """All entries (for tests and a future history view); unreadable lines are skipped."""
    try:
        text = audit_log(env).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(untrusted.loads(line))
        except ValueError:
            continue
    return out
