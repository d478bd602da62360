"""The words the ``gpumon`` command knows, and "did you mean" for a word that is none of
them.

A first word that is not a subcommand is a host to open the dashboard on; a typo of a
subcommand (``gpumon snapshto demo``) would then SSH to a host called "snapshto". So a
word close to a subcommand that is not a host gpumon knows (configured, built in, an
``~/.ssh/config`` alias, or written as an SSH target: ``user@host``, ``host:port``, a dotted
name) is answered with the subcommand it resembles instead. The subcommands are the
table's (``subcommands``): a new one is suggested as soon as it has its row.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path

from gpumon.tui.cli.subcommands import names

BUILTIN_HOSTS: tuple[str, ...] = ("demo", "local")
CLOSE_ENOUGH = 0.75  # difflib ratio: "snapshto" -> snapshot (0.875), "chek" -> check (0.89)


def ssh_config_path() -> Path:
    """The ssh client config gpumon's SSH transport reads (``$GPUMON_SSH_CONFIG`` in tests)."""
    override = os.environ.get("GPUMON_SSH_CONFIG")
    return Path(override) if override else Path.home() / ".ssh" / "config"


def ssh_aliases(path: Path | None = None) -> set[str]:
    """The literal ``Host`` names in the ssh config (patterns with ``*``/``?``/``!`` left
    out); an unreadable or missing file has none."""
    try:
        text = (path or ssh_config_path()).read_text(errors="replace")
    except OSError:
        return set()
    return set(_hosts_in(text))


def _hosts_in(text: str) -> Iterator[str]:
    for line in text.splitlines():
        parts = line.strip().replace("=", " ", 1).split()
        if len(parts) >= 2 and parts[0].lower() == "host":
            yield from (p for p in parts[1:] if not set(p) & set("*?!"))


def looks_like_ssh_target(word: str) -> bool:
    """``user@host``, ``host:port``, ``[v6]:port``, a dotted name or an IP: a host, not a
    mistyped word."""
    return any(c in word for c in "@:.[")


def suggestion(
    word: str, hosts: Collection[str], *, aliases: Collection[str] | None = None
) -> str | None:
    """The subcommand ``word`` is a typo of, or None: when it is one, is not close to any,
    is a configured host in ``hosts``, a built-in host, an ssh config alias or written as
    an SSH target."""
    commands = names()
    if word in commands or word in hosts or word in BUILTIN_HOSTS:
        return None
    if word.startswith("-") or looks_like_ssh_target(word):
        return None
    import difflib  # only for a word that is neither a command nor a host

    close = difflib.get_close_matches(word, commands, n=1, cutoff=CLOSE_ENOUGH)
    if not close:
        return None
    if word in (ssh_aliases() if aliases is None else aliases):
        return None
    return close[0]
