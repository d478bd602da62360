"""How big a config may be, and how much of a bad value an error message quotes.

A real config is a few KiB. The limits leave ample room for one and stop a runaway file,
value or key before it reaches the checks, an error message, ``config check`` or a
command line on the target:

============================================  ===========  ==================================
what                                          at most      why
============================================  ===========  ==================================
the file                                      1 MiB        a config with 100 hosts is ~20 KiB
tables and arrays inside each other           16 levels    the deepest real key,
                                                           ``hosts.N.jobs.J.env.V``, is 5
entries in one table or array                 1024
a key (host, job, env, param names)           255 chars    a host name: DNS allows 253
any string                                    16 KiB       the longest real one: a start script
SSH host and user                             255 chars    DNS 253; LOGIN_NAME_MAX 256 with NUL
a path, program, log glob, progress regex     4096 chars   PATH_MAX
a URL                                         2048 chars
a command template (``start``, ``stop``)      16 KiB       a multi-line script
============================================  ===========  ==================================

An error quotes at most ``SHOWN`` characters of a value (``show``) and of each key part.
Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from gpumon.backends.untrusted import printable

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_ENTRIES = 1024
MAX_KEY = 255
MAX_STRING = 16 << 10
HOST_MAX = 255
PATH_MAX = 4096
URL_MAX = 2048
TEMPLATE_MAX = MAX_STRING
SHOWN = 60


def check_shape(doc: dict[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """The first way a parsed TOML document exceeds the limits above, as (problem, key
    path of the offending key, table or array), or None when it is within them.

    Iterative, so a document nested as deeply as the TOML reader allows is no risk here.
    """
    stack: list[tuple[tuple[str, ...], int, object]] = [((), 0, doc)]
    while stack:
        path, depth, value = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                return f"a string of {len(value)} characters; at most {MAX_STRING}", path
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            return f"tables and arrays nested more than {MAX_DEPTH} levels deep", path
        if len(value) > MAX_ENTRIES:
            return f"{len(value)} entries; at most {MAX_ENTRIES}", path
        if isinstance(value, list):
            stack.extend((path, depth + 1, item) for item in reversed(value))
            continue
        for key in reversed(value):
            if len(key) > MAX_KEY:
                return f"a key of {len(key)} characters; at most {MAX_KEY}", (*path, key)
            stack.append(((*path, key), depth + 1, value[key]))
    return None


def show(value: object) -> str:
    """A value as TOML would write it, cut to ``SHOWN`` characters: ``"fast"``, ``true``,
    ``[1, 2]``, ``a table``. Never reads more of a long value than it shows."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        parts: list[str] = []
        for item in value:
            if sum(len(p) + 2 for p in parts) > SHOWN:
                parts.append("...")
                break
            parts.append(show(item))
        text = "[" + ", ".join(parts) + "]"
    elif isinstance(value, str):
        text = printable(json.dumps(value[: SHOWN + 1], ensure_ascii=False))
    else:
        text = str(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def cut(text: str) -> str:
    """A key part or other quoted text, cut to ``SHOWN`` characters."""
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
