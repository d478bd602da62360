"""Text from the watched machine, made harmless where it enters gpumon.

A watched machine is not trusted: whoever can write a log line the agent follows, name a
process or make nvidia-smi print an error chooses bytes that gpumon shows. Every string
that comes from a target passes through here once, at the boundary (the transport's
command output, the agent's decoded messages, the direct nvidia-smi stream), so no
output path (toast, table, ``snapshot``, ``check``) can forget:

- terminal control characters (ESC and with it every CSI/OSC/DCS sequence, C1 controls
  such as U+009B, BEL, backspace, carriage return) and the invisible formatting
  characters (bidi overrides, zero-width joiners, line and paragraph separators) are
  shown as ``\\x1b`` / ``\\u202e``, never passed through;
- multi-line text keeps its newlines and tabs (a traceback, a metrics page), while a
  lone carriage return, the way a progress bar redraws, becomes a newline;
- markup is not this module's business: text stays text, and the UI renders it as text
  (Rich ``Text``, ``markup=False``), never as Textual markup.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads", "printable", "printable_bounded", "printable_text", "printable_tree"]

_KEEP_MULTILINE = frozenset("\n\t")


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` on one line: every non-printable character (control characters, newlines,
    tabs, ANSI escapes, bidi overrides) shown as ``\\xNN`` / ``\\uNNNN``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def printable_text(text: str) -> str:
    """``text`` that may span lines: newlines and tabs stay, ``\\r\\n`` and a lone ``\\r``
    become ``\\n``, every other non-printable character is escaped as in ``printable``."""
    if _plain(text):
        return text  # the common case, a multi-line body of plain text: 20x faster
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(_printable_part(text[i : i + _SLICE]) for i in range(0, len(text), _SLICE))


def printable_bounded(text: str, limit: int, *, keep_end: bool = False) -> tuple[str, bool]:
    """``printable_text(text)`` cut to at most ``limit`` characters: its start, or with
    ``keep_end`` its end (a log's tail); True when something was cut. Escapes make a text
    longer (a NUL is four characters), so the cut is made on what is shown, and only as
    much of ``text`` as fits is made printable: 16 MiB of NULs never become 64 MiB."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    starts = range(0, len(text), _SLICE)
    parts: list[str] = []
    size = 0
    whole = True
    for i in reversed(starts) if keep_end else starts:
        if size >= limit:
            whole = False
            break
        part = _printable_part(text[i : i + _SLICE])
        parts.append(part)
        size += len(part)
    if keep_end:
        parts.reverse()
    out = "".join(parts)
    if len(out) > limit:
        out = out[len(out) - limit :] if keep_end else out[:limit]
        whole = False
    return out, not whole


_SLICE = 1 << 16  # characters escaped at a time: a long text's work stays this big


def _plain(text: str) -> bool:
    return text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable()


def _printable_part(part: str) -> str:
    if _plain(part):
        return part
    return "".join(ch if ch.isprintable() or ch in _KEEP_MULTILINE else _escape(ch) for ch in part)


def printable_tree(value: Any) -> Any:
    """``value`` (decoded JSON) with ``printable_text`` applied to every string in it,
    keys included; numbers, booleans and None are returned as they are."""
    if isinstance(value, str):
        return printable_text(value)
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    if isinstance(value, dict):
        return {printable_text(str(k)): printable_tree(v) for k, v in value.items()}
    return value


def loads(data: str | bytes) -> Any:
    """``json.loads`` for JSON that came from a target: JSON escapes such as ``\\u001b``
    decode to the control character they name, so the decoded strings are made printable
    here. Raises ``ValueError`` (``json.JSONDecodeError``) for text that is not JSON."""
    return printable_tree(json.loads(data))
