"""The one checker every config table goes through, and the value checkers they share.

A table is a tuple of ``KeySpec`` rows (name, checker, expected text, default), so a new key
is one line and every error reads the same: ``FILE: dotted.key: expected X, got Y``, an
unknown key ``unknown key (did you mean "interval"?); expected one of: ...``. A checker
returns the parsed value; it raises ValueError or TypeError for "not what was expected"
(the message is built from the row's ``expected``), or ``Invalid`` for a more specific
complaint. Tables of named tables (``[hosts.NAME]``, ``[notify.NAME]``, ``[fleet.NAME]``,
``[hosts.NAME.jobs.JOB]``) go through ``named_tables``.

Standard library only; nothing here knows which table it checks. (msgspec, measured for
this: its import alone took 23-30 ms here against ~15 ms for all the config modules, and
its errors would still need this layer for the expected text and "did you mean".)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpumon.backends.config.limits import PATH_MAX, URL_MAX, show
from gpumon.backends.lazy import lazy_pattern

T = TypeVar("T")


class Invalid(Exception):
    """A bad value at ``path`` (relative to the table being checked)."""

    def __init__(self, problem: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(problem)
        self.problem, self.path = problem, path


REQUIRED: Any = object()  # a KeySpec default: the key must be present


# Rows of the schema's tables, looked up by name, never compared nor printed: no generated
# __eq__, __hash__ or __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class KeySpec:
    """One key a table may hold.

    ``default`` is the value when the key is absent (``REQUIRED``: it must be present);
    ``builtin`` says whether a host setting also applies to the built-in demo/local hosts;
    ``attr`` is the record field the value fills when it is not ``name``.
    """

    name: str
    check: Callable[[object], Any]
    expected: str
    default: Any = None
    builtin: bool = True
    attr: str | None = None


def check_table(raw: object, specs: tuple[KeySpec, ...]) -> dict[str, Any]:
    """The keys present in ``raw``, parsed, by field name (``attr`` or ``name``).

    Raises TypeError when ``raw`` is not a table, and ``Invalid`` naming the key for an
    unknown key (with the closest known one), a bad value, or a missing required key.
    """
    if not isinstance(raw, dict):
        raise TypeError
    by_name = {s.name: s for s in specs}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        spec = by_name.get(key)
        if spec is None:
            known = ", ".join(sorted(by_name))
            raise Invalid(
                f"unknown key{did_you_mean(key, by_name)}; expected one of: {known}", (key,)
            )
        out[spec.attr or key] = _checked(spec, value)
    for spec in specs:
        if spec.default is REQUIRED and spec.name not in raw:
            raise Invalid(f"missing; expected {spec.expected}", (spec.name,))
    return out


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``' (did you mean "interval"?)'``: the known word closest to ``word``; "" when none
    is close."""
    import difflib  # only for a word the config got wrong

    hint = difflib.get_close_matches(word, list(known), n=1)
    return f' (did you mean "{hint[0]}"?)' if hint else ""


def _checked(spec: KeySpec, value: object) -> Any:
    try:
        return spec.check(value)
    except Invalid as e:
        raise Invalid(e.problem, (spec.name, *e.path)) from None
    except (ValueError, TypeError):
        raise Invalid(f"expected {spec.expected}, got {show(value)}", (spec.name,)) from None


def named_tables(
    raw: object,
    name: re.Pattern[str],
    name_expected: str,
    table_expected: str,
    build: Callable[[str, dict[str, Any]], T],
) -> dict[str, T]:
    """``{NAME: build(NAME, table)}`` for a table of named tables; raises TypeError when
    ``raw`` is not a table and ``Invalid`` (path from NAME on) for a name that does not
    match ``name``, a NAME that is not a table, or what ``build`` raises."""
    if not isinstance(raw, dict):
        raise TypeError
    out: dict[str, T] = {}
    for key, table in raw.items():
        if not name.fullmatch(key):
            raise Invalid(f"expected {name_expected}", (key,))
        if not isinstance(table, dict):
            raise Invalid(f"expected {table_expected}, got {show(table)}", (key,))
        try:
            out[key] = build(key, table)
        except Invalid as e:
            raise Invalid(e.problem, (key, *e.path)) from None
        except (ValueError, TypeError):  # a build without its own message: the table's
            raise Invalid(f"expected {table_expected}", (key,)) from None
    return out


# --- value checkers ---------------------------------------------------------------------


def limited(s: str, most: int) -> str:
    """``s`` if it has at most ``most`` characters; raises Invalid saying both lengths."""
    if len(s) > most:
        raise Invalid(f"too long: {len(s)} characters; at most {most}")
    return s


def text(v: object) -> str:
    """A non-empty string of printable characters (no control or escape characters, C1
    controls and bidi overrides included), at most PATH_MAX long (paths, globs, a regex)."""
    if not isinstance(v, str) or not v.strip() or not v.isprintable():
        raise ValueError
    return limited(v, PATH_MAX)


def word(v: object) -> str:
    """``text`` that cannot be read as an option (not starting with "-"): a program,
    a path or a name put on a command line."""
    s = text(v)
    if s.startswith("-"):
        raise ValueError
    return s


def boolean(v: object) -> bool:
    if not isinstance(v, bool):
        raise TypeError
    return v


def number(lo: float, hi: float) -> Callable[[object], float]:
    """A checker for an int or float in ``lo..hi`` (never a boolean, never NaN)."""

    def check(v: object) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ValueError
        return float(v)

    return check


def integer(lo: int, hi: int) -> Callable[[object], int]:
    """A checker for an int in ``lo..hi`` (never a boolean or a float)."""

    def check(v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError
        return v

    return check


def text_list(v: object) -> tuple[str, ...]:
    """A list of ``text`` strings (a single string is refused: docs/configuration.md says a list,
    and a string is not a list of its one path)."""
    if not isinstance(v, list):
        raise TypeError
    return tuple(text(item) for item in v)


_URL = lazy_pattern(r"https?://[^\s]+")


def url(v: object) -> str:
    """An http(s) URL of printable characters without spaces, at most URL_MAX long, as
    written (an endpoint: a webhook's trailing "/" may matter to its receiver)."""
    s = limited(text(v), URL_MAX)
    if not _URL.fullmatch(s):
        raise ValueError
    return s


def base_url(v: object) -> str:
    """A ``url`` that paths are appended to (a wheel index, a Prometheus server): without
    its trailing "/"."""
    s = url(v).rstrip("/")
    if not _URL.fullmatch(s):  # "http:///" -> "http:"
        raise ValueError
    return s


_ENV_NAME = lazy_pattern(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(v: object) -> str:
    """An environment variable name (a secret is named, and read when it is needed)."""
    if not isinstance(v, str) or not _ENV_NAME.fullmatch(v):
        raise ValueError
    return limited(v, 255)
