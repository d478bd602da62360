"""Scrubbing a bundle: no secret of the config or the environment leaves in it.

A bundle is handed to people outside the team (a vendor, another team's on-call), so every
file goes through ``Scrubber.text`` before it is written. Two nets, because either alone
misses things:

- the known values: every secret the config gives (a notifier's ``url``, ``routing_key``,
  ``token``, ``secret``), the value of every variable a ``*_env`` key names, and every
  environment variable whose name says it holds a secret (``*TOKEN*``, ``*SECRET*``, ...);
- the shapes of secrets wherever they come from (a job's log that prints its own token):
  credentials in a URL (``user:pass@``, ``?token=``, Slack and Discord webhook paths,
  Telegram's ``/bot<token>``), ``Authorization:`` headers and ``Bearer`` tokens, private
  key blocks, and the prefixed tokens of the common services (``ghp_``, ``hf_``, ``xoxb-``,
  ``AKIA``, ``sk-``); and the value under a name that says it is a secret
  (``masking.is_secret_name``), in any case: a flag's (``--api-key VALUE``,
  ``--password=VALUE``, ``"--api-key", "VALUE"`` in a printed argv), a key's (``key: value``
  as YAML and HTTP headers have it, ``key = value``, ``'key': 'value'``, ``"key": "value"``,
  ``key=value``, ``export NAME="value"``).

The shapes are found inside JSON strings too (the recording keeps a log's lines so: ``\\"``
is a quote there, and the strings of a list are lines), and the JSON stays valid. What
only looks like a secret stays: ``api_key=None``, a number under ``token`` (SGLang's
``#token: 38``), ``max_tokens = 512``, ``--tokenizer-path``.

Each is replaced by ``REDACTED``. Short values (under ``MIN_SECRET_LEN`` characters) are
not replaced by value: "on" or "1" would blank the whole bundle; their shapes still are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpumon.backends.masking import MASK, is_secret_name

__all__ = ["MIN_SECRET_LEN", "REDACTED", "Scrubber", "config_secrets", "env_secrets"]

REDACTED = "<redacted>"
MIN_SECRET_LEN = 6
# Environment variables whose names say they hold a secret.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|WEBHOOK|"
    r"ROUTING_?KEY|DSN|COOKIE|SESSION",
    re.IGNORECASE,
)
_NOTIFIER_SECRETS = ("url", "routing_key", "token", "secret")
# A line's end; in JSON, one escaped inside a string, or the next string of a list (the
# recording keeps a log's lines so: a key block's lines are strings of one list).
_NEWLINE = r"""(?:\r?\n|(?:\\r)?\\n|"\s*,\s*")"""
# A value that says there is no secret, kept so the file still says so (`api_key=None`
# in SGLang's ServerArgs line, `"api_key": null`), or one masked already.
_NO_SECRET = frozenset({"none", "null", "nil", "~", "true", "false", "", REDACTED, MASK})
# A quoted value: "...", '...', and \"...\" (a string inside a JSON string: a log line in
# the recording). '...' holds no ": it would run across the strings of a JSON list.
_QUOTED = r"""\\"(?:[^"\\\r\n]|\\[^"\r\n])*\\"|"(?:[^"\\\r\n]|\\.)*"|'(?:[^'"\\\r\n]|\\.)*'"""
# An unquoted value that ends at a space, a quote or a backslash (the end of a JSON
# string holding it), a bracket (a structure's end).
_WORD = r"""[^\s"'`\\,;&()\[\]{}]+"""
# A key is matched from a part every secret name holds (``token``, ``key``, ...) to the
# end of its value, and the name's start is found from there; a flag from its dash. A
# pattern tried at every word of a log ran 5x slower than all the other shapes together
# (SGLang's stats lines). `token: 38` (a number: SGLang's `#token: 38`, `#full token:
# 164000`) is a count, no secret.
_COUNTED = r"""(?!["']?[ \t]*[:=][ \t]*[\d.]+%?(?:[,;\s]|\Z))"""
# Spelled out in its three cases: (?i) made the search 5x slower.
_HINT = "(?:{})[\\w.-]*".format(
    "|".join(
        spelled + (_COUNTED if word == "token" else "")
        for word in ("pass", "secret", "key", "auth", "cred", "cookie", "dsn", "token")
        for spelled in (word, word.upper(), word.capitalize())
    )
)
# A flag and its value: `--api-key VALUE`, `--api-key=VALUE`, `-password VALUE`, and a
# printed argv's `"--api-key", "VALUE"`.
_FLAG = re.compile(
    r"""-(?<![\w-]-)(?P<name>-?[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+|\\?["']\s*,\s*\\?["'])"""
    rf"(?!-)(?P<value>{_QUOTED}|{_WORD})"
)
# A list of strings under a key, as Python prints a list-valued option: vLLM's
# `'api_key': ['sk-...', 'sk-...']` in its `non-default args` line at start
# (vllm/entrypoints/serve/utils/api_utils.py log_non_default_args), each string a secret.
# A value of ``_KEY``: each named pattern is one more scan of every file.
_LIST = r"\[[^\[\]\r\n]*\]"
# A key and its value. `name=value` (shell, kwargs, environment): the value ends at a
# space. `name: value`, `name = value` (YAML, HTTP headers, INI): at the end of the line,
# a ` #` comment or a quote (the end of a JSON string holding the line); not a structure
# (`{`, `[`: its own keys are judged). A quoted name (JSON, a Python dict) takes a quoted
# value only, so JSON stays valid.
_KEY = re.compile(
    rf"""{_HINT}(?P<q>\\"|["']?)"""
    rf"(?:(?P<tight>=)(?P<tval>{_QUOTED}|{_WORD})"
    rf"|(?P<loose>[ \t]*[:=][ \t]*)(?P<lval>{_QUOTED}|{_LIST}|"
    r"""[^\s"'#\\\[{][^\r\n"]*?(?=[ \t]+#|[ \t]*(?:[\r\n"]|\\"|\Z))))"""
)
_KEY_NAME = re.compile(r"[A-Za-z_][\w.-]*")


def _masked(value: str) -> str:
    """``value`` replaced by REDACTED, its quotes kept; as it is when it says there is
    no secret."""
    quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), "")
    inner = value[len(quote) : len(value) - len(quote)] if quote else value
    if inner.strip().rstrip(",;").lower() in _NO_SECRET:
        return value
    if quote and inner.lstrip()[:1] in (",", ":", "]", "}"):
        return value  # the quotes are two JSON strings' ends: the value was empty
    return f"{quote}{REDACTED}{quote}"


def _name_start(text: str, at: int, floor: int) -> int:
    """Where the name holding ``text[at]`` begins (not before ``floor``)."""
    while at > floor and (text[at - 1].isalnum() or text[at - 1] in "_.-"):
        at -= 1
    return at


def _flag(text: str, m: re.Match[str], floor: int) -> tuple[int, str] | None:
    if not is_secret_name(m["name"]):
        return None
    return m.start(), f"-{m['name']}{m['sep']}{_masked(m['value'])}"


def _key(text: str, m: re.Match[str], floor: int) -> tuple[int, str] | None:
    quote = m["q"]
    start = _name_start(text, m.start(), floor)
    name = text[start : m.start("q")]
    if not _KEY_NAME.fullmatch(name) or not is_secret_name(name):
        return None
    if text[max(start - len(quote), 0) : start] != quote:
        return None  # `token": ...`: the end of a string, not a quoted name
    start -= len(quote)
    value = m["tval"] or m["lval"]
    head = f"{quote}{name}{quote}"
    if m["tight"]:
        return start, f"{head}={_masked(value)}"
    if value.startswith("["):  # each string of the list
        return start, f"{head}{m['loose']}{re.sub(_QUOTED, lambda s: _masked(s[0]), value)}"
    if quote and value[0] not in "\\\"'":
        return None  # a JSON number, null, an object: not a secret's string
    return start, f"{head}{m['loose']}{_masked(value)}"


Fix = Callable[[str, re.Match[str], int], tuple[int, str] | None]
# A secret under its name: a flag's value, a key's (NAME=value of an environment, YAML, a
# header, a JSON or a Python dict's string).
_NAMED: tuple[tuple[re.Pattern[str], Fix], ...] = ((_FLAG, _flag), (_KEY, _key))


def _sub_named(pattern: re.Pattern[str], fix: Fix, text: str) -> str:
    """Each match of ``pattern`` that ``fix`` finds a secret in replaced, from where
    ``fix`` says its name starts; one it finds none in (None) is searched again after the
    hint: its value may hold the secret (a JSON list of log lines, a YAML line inside one
    JSON string)."""
    out: list[str] = []
    done = at = 0
    while (m := pattern.search(text, at)) is not None:
        found = fix(text, m, done)
        if found is None:
            at = m.start() + 1
            continue
        start, fixed = found
        out += [text[done:start], fixed]
        done = at = m.end()
    return "".join(out) + text[done:] if out else text


# (pattern, replacement): the shapes. Replacements keep what is not secret (the scheme
# and host of a URL, the header's name, the flag), so the file still reads.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        # Its lines (base64, RFC 1421's two headers) and its END line; a cut block ends
        # at its last such line.
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----"
            rf"(?:{_NEWLINE}(?:(?:Proc-Type|DEK-Info):[^\r\n\"\\]*|[A-Za-z0-9+/=]*)"
            r"(?=[\r\n\"]|\\[rn]|\Z))*"
            rf"(?:{_NEWLINE}?-----END \1PRIVATE KEY-----)?"
        ),
        REDACTED,
    ),
    (
        re.compile(r"(?i)\b(authorization|proxy-authorization)(\"?\s*[:=]\s*\"?)[^\r\n\"]+"),
        rf"\1\2{REDACTED}",
    ),
    (
        # On its line, a word of its own: not SGLang's option list's `--...-first-token`
        # and the next line's `--c128-page-size`.
        re.compile(
            r"(?i)(?<![\w-])(bearer|basic|token)[ \t]+(?=[A-Za-z._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"
        ),
        rf"\1 {REDACTED}",
    ),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), rf"\1{REDACTED}@"),
    (
        re.compile(
            r"(?i)([?&;](?:access_?token|token|key|api_?key|apikey|secret|sig|signature|"
            r"password|passwd|pass|auth|code|routing_key)=)[^&\s\"'#]+"
        ),
        rf"\1{REDACTED}",
    ),
    (
        re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+"),
        rf"\1{REDACTED}",
    ),
    (re.compile(r"(?i)(/api/webhooks/\d+/)[A-Za-z0-9._-]+"), rf"\1{REDACTED}"),
    (re.compile(r"(/bot)\d+:[A-Za-z0-9_-]{20,}"), rf"\1{REDACTED}"),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), REDACTED),
)


def env_secrets(env: Mapping[str, str]) -> set[str]:
    """The values of the variables whose names say they hold a secret."""
    return {value for name, value in env.items() if _SECRET_NAME.search(name) and value}


def config_secrets(notifiers: Iterable[Any], env: Mapping[str, str]) -> set[str]:
    """The secrets the notifiers' tables give or name (``url``, ``routing_key``, ``token``,
    ``secret`` and the values of the variables their ``*_env`` keys name). ``notifiers``:
    ``NotifierConfig`` objects (any dataclass with those fields)."""
    found: set[str] = set()
    for notifier in notifiers:
        for f in fields(notifier):
            value = getattr(notifier, f.name)
            if not isinstance(value, str) or not value:
                continue
            if f.name in _NOTIFIER_SECRETS:
                found.add(value)
            elif f.name.endswith("_env") and env.get(value):
                found.add(env[value])
    return found


@dataclass(frozen=True)
class Scrubber:
    """Replaces ``secrets`` (by value, longest first) and the shapes of secrets by
    ``REDACTED``."""

    secrets: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *groups: Iterable[str]) -> Scrubber:
        values = {v for group in groups for v in group if len(v) >= MIN_SECRET_LEN}
        return cls(frozenset(values))

    def knowing(self, values: Iterable[str]) -> Scrubber:
        """This scrubber that knows ``values`` too (the short ones left out, as ``of``)."""
        return Scrubber.of(self.secrets, values)

    def text(self, text: str) -> str:
        """``text`` with every known secret and every secret shape replaced."""
        for value in sorted(self.secrets, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        for pattern, fix in _NAMED:
            text = _sub_named(pattern, fix, text)
        return text

    def data(self, data: bytes) -> bytes:
        """``text`` on bytes read as UTF-8 (undecodable bytes are replaced: a bundle's
        files are text)."""
        return self.text(data.decode("utf-8", "replace")).encode("utf-8")

    def binary(self, data: bytes) -> bytes | None:
        """``data`` as it is when scrubbing finds nothing in it, else None: a binary file
        (a flight-recorder dump, a pickle) cannot be scrubbed without breaking it, so one
        that holds a secret is left out. Read as Latin-1: every byte is one character,
        and a secret's ASCII is itself."""
        text = data.decode("latin-1")
        return data if self.text(text) == text else None

    def found(self, text: str) -> list[str]:
        """The known secrets still in ``text`` (for tests and a last check)."""
        return [v for v in self.secrets if v in text]
