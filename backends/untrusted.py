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

__all__ = ["loads", "printable", "printable_text", "printable_tree"]

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
    if text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable():
        return text  # the common case, a multi-line body of plain text: 20x faster
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch if ch.isprintable() or ch in _KEEP_MULTILINE else _escape(ch) for ch in text)


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
