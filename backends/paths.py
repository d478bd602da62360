"""Where gpumon keeps its files on this machine: the XDG base directories.

``$XDG_CONFIG_HOME/gpumon`` (default ``~/.config/gpumon``) holds the config,
``$XDG_STATE_HOME/gpumon`` (default ``~/.local/state/gpumon``) what gpumon writes: the
audit log, flight recordings, the dashboard's remembered settings. A relative or empty
``$XDG_*_HOME`` is ignored, as the XDG spec says. Every function takes the environment
(``os.environ`` when None) and creates nothing: writers make their directories on demand.

(Job records on a target live in the target's ``$XDG_STATE_HOME``, found there by the job
control script, not here.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "audit_log",
    "config_dir",
    "default_config_file",
    "host_file_name",
    "open_state_db",
    "outbox_file",
    "recordings_dir",
    "state_dir",
    "ui_state_file",
    "usage_db",
    "watch_lock",
]


def _base(env: Mapping[str, str] | None, variable: str, default: str) -> Path:
    """``$variable`` when it is an absolute path, else ``$HOME/default``."""
    env = os.environ if env is None else env
    value = env.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / default


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/gpumon``, else ``~/.config/gpumon``."""
    return _base(env, "XDG_CONFIG_HOME", ".config") / "gpumon"


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/gpumon``, else ``~/.local/state/gpumon``."""
    return _base(env, "XDG_STATE_HOME", os.path.join(".local", "state")) / "gpumon"


def default_config_file(env: Mapping[str, str] | None = None) -> Path:
    """The config read when neither ``--config`` nor ``$GPUMON_CONFIG`` names one."""
    return config_dir(env) / "config.toml"


def audit_log(env: Mapping[str, str] | None = None) -> Path:
    """The audit log: one JSON line per action that changes a machine."""
    return state_dir(env) / "audit.jsonl"


def torch_seen_log(env: Mapping[str, str] | None = None) -> Path:
    """The torch each doctor run found on each host: one JSON line per run."""
    return state_dir(env) / "torch-seen.jsonl"


def recordings_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the flight recorder writes its ``*.jsonl.gz`` incidents."""
    return state_dir(env) / "recordings"


def bundles_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the dashboard's ``b`` writes incident bundles (``gpumon bundle``)."""
    return state_dir(env) / "bundles"


def outbox_file(env: Mapping[str, str] | None = None) -> Path:
    """The notifiers' outbox (SQLite): messages not yet delivered, open incidents."""
    return state_dir(env) / "outbox.sqlite3"


def usage_db(env: Mapping[str, str] | None = None) -> Path:
    """The accounting (SQLite): GPU time, idle holding and energy per host, GPU and owner."""
    return state_dir(env) / "usage.sqlite3"


def open_state_db(path: Path) -> sqlite3.Connection:
    """One of the state directory's SQLite files (the outbox, the accounting), made with
    its folder on first use, opened as every gpumon run opens them: autocommit (each
    writer says its own transactions), WAL (readers never wait on a writer) and a 10 s
    wait for another run's write."""
    import sqlite3  # here: the one-shots import this module and open no database

    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def host_file_name(host: str) -> str:
    """A host's name as a file name in the state directory (``user@host:port`` keeps its
    ``@`` and ``:``; anything a path could read otherwise is ``_``)."""
    import re  # here: the one-shots compile no pattern at import

    return re.sub(r"[^\w.@:-]", "_", host) or "_"


def watch_lock(env: Mapping[str, str] | None = None) -> Path:
    """Held (flock) by a running ``gpumon watch``: the dashboard then leaves delivery to it."""
    return state_dir(env) / "watch.lock"


def ui_state_file(env: Mapping[str, str] | None = None) -> Path:
    """What the dashboard remembers between runs (the theme)."""
    return state_dir(env) / "state.json"
