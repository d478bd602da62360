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
  ``AKIA``, ``sk-``).

Each is replaced by ``REDACTED``. Short values (under ``MIN_SECRET_LEN`` characters) are
not replaced by value: "on" or "1" would blank the whole bundle; their shapes still are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

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
# (pattern, replacement): the shapes. Replacements keep what is not secret (the scheme
# and host of a URL, the header's name), so the file still reads.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    (
        re.compile(r"(?i)\b(authorization|proxy-authorization)(\"?\s*[:=]\s*\"?)[^\r\n\"]+"),
        rf"\1\2{REDACTED}",
    ),
    (
        re.compile(r"(?i)\b(bearer|basic|token)\s+(?=[A-Za-z._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"),
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
    # NAME=value as an environment or a shell line shows it (upper-case names only: a
    # JSON key such as "expect_tokens_per_s" is not one), and a JSON string under a key
    # that names a secret (a string only, so the JSON stays valid).
    (
        re.compile(
            r"\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ROUTING_KEY)[A-Z0-9_]*"
            r"=)(?!<redacted>)[^\s\"',]{4,}"
        ),
        rf"\1{REDACTED}",
    ),
    (
        re.compile(
            r"(?i)(\"(?:[a-z0-9_]*_)?(?:token|secret|password|passwd|api_?key|routing_key)\""
            r"\s*:\s*\")(?!<redacted>\")[^\"]+\""
        ),
        rf'\1{REDACTED}"',
    ),
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

    def text(self, text: str) -> str:
        """``text`` with every known secret and every secret shape replaced."""
        for value in sorted(self.secrets, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        return text

    def data(self, data: bytes) -> bytes:
        """``text`` on bytes read as UTF-8 (undecodable bytes are replaced: a bundle's
        files are text)."""
        return self.text(data.decode("utf-8", "replace")).encode("utf-8")

    def found(self, text: str) -> list[str]:
        """The known secrets still in ``text`` (for tests and a last check)."""
        return [v for v in self.secrets if v in text]
