"""Secrets in a command line, masked where the command enters gpumon.

A server started as ``python -m sglang.launch_server --api-key KEY`` (vLLM's ``--api-key``,
``--hf-token``, a job's ``--password``) carries its secret in ``/proc/PID/cmdline``, and
gpumon shows that command in the dashboard, ``snapshot``, the flight recording and the
bundle. ``mask_command`` keeps the flag and replaces its value (``--api-key ****``), so the
on-call still sees that the server runs with a key, and nobody reading over a shoulder or
a bundle learns it. ``is_secret_name`` is the one judgement of which names say their value
is a secret: the flags here, and the ``key: value`` shapes the bundle's scrubber masks.

A name is split into its words (``--ssl-keyfile-password`` -> ssl, keyfile, password;
``apiKey`` -> api, key; ``X-Api-Key`` -> x, api, key) and judged by its last word, so that
the words that merely contain a secret word stay readable (``--tokenizer-path``,
``--max-new-tokens``, ``--tokens-per-step``, ``--pass-through``, ``token_env``):

- ``password``, ``passwd``, ``passphrase``, ``secret``, ``credential(s)``, ``cookie``,
  ``authorization``, ``dsn`` and a last word ending in one of them (``PGPASSWORD``);
- ``token``, except after a word that makes it a count or a tokenizer's token
  (``--max-token``, ``#new-token``, ``--eos-token``, ``time-to-first-token``);
- ``key`` after ``api``, ``access``, ``secret``, ``private``, ... (``--api-key``,
  ``aws_secret_access_key``; not ``--cache-key``, nor a JSON ``"key"``), and ``apikey``;
- ``auth`` (``--basic-auth``), and ``pass`` alone or after ``db``, ``user``, ``admin``...;
- never a switch (``--allow-credentials``, ``--no-auth``, ``--disable-auth-token``): its
  first word says it takes no value.

Short flags (``-p``) are not judged: ``-p 8080`` is as often a port as a password.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence

from gpumon.backends.lazy import lazy_pattern

__all__ = [
    "MASK",
    "is_secret_name",
    "mask_argv",
    "mask_command",
    "masked_shell_line",
    "name_words",
]

MASK = "****"

_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "apikey", "accesskey", "secretkey")
_SECRET_LAST = frozenset(
    {
        *_SECRET_WORDS,
        "apitoken",
        "accesstoken",
        "authtoken",
        "privatekey",
        "credential",
        "credentials",
        "cookie",
        "authorization",
        "dsn",
        "auth",
    }
)
# The words before "key" that make it a secret (a cache key, a sort key, a JSON "key" are
# not).
_KEY_KINDS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "auth",
        "master",
        "encryption",
        "license",
        "routing",
        "signing",
        "session",
        "client",
        "account",
        "service",
        "admin",
        "subscription",
    }
)
# The words before "token" that make it a count or a tokenizer's token (SGLang's and
# vLLM's flags and log lines: --bucket-time-to-first-token, #new-token, --eos-token).
_COUNTED_TOKEN = frozenset(
    {
        "eos",
        "bos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "image",
        "video",
        "audio",
        "new",
        "cached",
        "first",
        "last",
        "next",
        "max",
        "min",
        "num",
        "per",
        "stop",
        "start",
        "end",
        "think",
        "draft",
        "input",
        "output",
        "prompt",
        "generation",
        "decode",
        "prefill",
        "split",
    }
)
_PASS_KINDS = frozenset(
    {"db", "user", "admin", "root", "smtp", "proxy", "http", "basic", "login", "mail", "redis"}
)
# A first word that makes a flag a switch: it takes no value (--allow-credentials).
_SWITCH = frozenset({"no", "disable", "enable", "allow", "skip", "require", "without", "ignore"})
_CAMEL = lazy_pattern(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = lazy_pattern(r"[^a-z0-9]+")
# NAME=value as a command line's word: an environment (`env HF_TOKEN=... python`) or an
# override (`trainer.wandb.api_key=...`).
_ASSIGNMENT = lazy_pattern(r"[A-Za-z_][\w.-]*")


def name_words(name: str) -> list[str]:
    """``--ssl-keyfile-password`` -> ssl, keyfile, password; ``apiKey`` -> api, key."""
    return [w for w in _SPLIT.split(_CAMEL.sub("_", name).lower()) if w]


@functools.lru_cache(maxsize=1024)
def is_secret_name(name: str) -> bool:
    """Whether a flag, a key or a variable called ``name`` holds a secret (the module's
    rules); leading dashes are ignored."""
    words = name_words(name)
    if not words or (len(words) > 1 and words[0] in _SWITCH):
        return False
    last = words[-1]
    before = words[-2] if len(words) > 1 else ""
    if last in _SECRET_LAST or last.endswith(_SECRET_WORDS):
        return True
    if last == "token":
        return before not in _COUNTED_TOKEN
    if last == "key":
        return before in _KEY_KINDS
    if last == "pass":
        return not before or before in _PASS_KINDS
    return False


def _option(word: str) -> bool:
    return len(word) > 1 and word.startswith("-")


def _mask(words: Sequence[str], *, joined: bool) -> list[str]:
    """``words`` with the values of secret flags and assignments replaced by ``MASK``.
    ``joined``: the words came from a command line joined by spaces, where a value's own
    spaces cannot be told from the command's: a secret flag's value then runs to the next
    word that is an option, so no part of it is left."""
    out = list(words)
    masking = False  # joined: inside a secret flag's value
    for i, word in enumerate(out):
        if masking and not _option(word):
            out[i] = MASK if word else word  # "": two spaces in a row
            continue
        masking = False
        name, eq, value = word.partition("=")
        if _option(word) and is_secret_name(name):
            if eq:
                out[i] = f"{name}={MASK}" if value else word
                masking = joined
            elif i + 1 < len(out) and not _option(out[i + 1]):
                out[i + 1] = MASK if out[i + 1] else out[i + 1]
                masking = joined
        elif eq and value and _ASSIGNMENT.fullmatch(name) and is_secret_name(name):
            out[i] = f"{name}={MASK}"
    return out


def mask_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with each secret flag's value (the next word, or after ``=``) and each
    secret ``NAME=value`` word's value replaced by ``MASK``."""
    return _mask(argv, joined=False)


def secret_values(argv: Sequence[str]) -> list[str]:
    """The secrets ``argv`` holds: what ``mask_command`` would mask in it (each secret
    flag's words up to the next option, each secret ``NAME=value``'s value), so that
    wherever else they appear (a server's log that prints its own arguments) they are
    known by value."""
    out = []
    for word, masked in zip(argv, _mask(argv, joined=True), strict=True):
        if word != masked:
            out.append(word.partition("=")[2] if masked.endswith(f"={MASK}") else word)
    return [v for v in out if v]


def masked_shell_line(argv: Sequence[str]) -> str:
    """``argv`` masked (``mask_argv``) as one shell-quoted line, the masks unquoted
    (``--api-key ****``, not ``'****'``)."""
    words = []
    for word in mask_argv(argv):
        head = word.removesuffix(MASK)
        words.append(shlex.quote(word) if head == word else shlex.quote(head) * bool(head) + MASK)
    return " ".join(words)


def mask_command(command: str) -> str:
    """A command line (its words joined by spaces, as ``/proc/PID/cmdline`` reaches
    gpumon) with its secret values replaced by ``MASK``: ``--api-key KEY``, ``--api-key=KEY``
    (and the words after it up to the next option: a value may hold spaces), and
    ``HF_TOKEN=...``. A command without a secret is returned as it is."""
    if "=" not in command and " -" not in command:
        return command
    return " ".join(_mask(command.split(" "), joined=True))
