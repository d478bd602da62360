"""Where in the config file a key is: the line a refusal names (``... (line 12)``).

tomllib gives values without positions, so the checked tables cannot say where a bad key
was written. This finds it in the text: the ``key = value`` line, or the ``[table]`` header,
whose dotted key is the longest beginning of the refused key's path (a bad ``user`` inside
``basic_auth = { ... }`` names the ``basic_auth`` line; a missing key names its table's
header). A line scan, not a second parser: multi-line strings and arrays are not followed,
so a line inside one that looks like ``key = ...`` could be taken; None when nothing matches.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon.backends.lazy import lazy_pattern

__all__ = ["key_line", "toml_error_line"]

_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = lazy_pattern(rf"^\s*\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = lazy_pattern(rf"^\s*({_DOTTED})\s*=")
_ONE_PART = lazy_pattern(_PART)
_TOML_AT = lazy_pattern(r"\(at line ([0-9]+), column [0-9]+\)$")


def _parts(dotted: str) -> tuple[str, ...]:
    """``hosts."my host".port`` -> ``("hosts", "my host", "port")``."""
    out: list[str] = []
    for m in _ONE_PART.finditer(dotted):
        part = m.group(0)
        if part.startswith(('"', "'")):
            import tomllib  # only a quoted part, only when a config is read

            try:  # the string as TOML reads it (escapes included)
                part = str(tomllib.loads(f"k = {part}")["k"])
            except tomllib.TOMLDecodeError:
                part = part[1:-1]
        out.append(part)
    return tuple(out)


def key_line(text: str, path: Sequence[str]) -> int | None:
    """The 1-based line of ``text`` that sets the dotted key ``path``, or the nearest of
    its parents written there; None when no line does."""
    want = tuple(path)
    if not want:
        return None
    table: tuple[str, ...] = ()
    best, line = 0, None
    for number, text_line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(text_line)
        if header is not None:
            table = _parts(header.group(1))
            here = table
        else:
            assign = _ASSIGN.match(text_line)
            if assign is None:
                continue
            here = table + _parts(assign.group(1))
        if len(here) > best and want[: len(here)] == here:
            best, line = len(here), number
            if best == len(want):
                return line  # the key itself (a key is set once in valid TOML)
    return line


def toml_error_line(message: str) -> int | None:
    """The line in tomllib's message (``... (at line 3, column 5)``), None if it has none."""
    m = _TOML_AT.search(message)
    return int(m.group(1)) if m else None
