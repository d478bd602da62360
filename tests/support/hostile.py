"""Hostile strings a watched machine can put in front of the operator: Textual markup that
acts (``@click``), links, unbalanced closing tags, terminal escape sequences (OSC 52
clipboard, OSC 0 title, CSI clear, DCS, C1 CSI), bidi overrides, NULs, invalid UTF-8 (as
the agent decodes it) and a 10,000-character line."""

from __future__ import annotations

# (label, text). No ", " inside: nvidia-smi's CSV separator (a separate issue).
CORPUS: tuple[tuple[str, str], ...] = (
    ("click-quit", "[@click=app.quit]click me[/]"),
    ("click-screenshot", "[@click=app.screenshot('owned.svg','/tmp')]save[/]"),
    ("link", "[link=https://example.invalid/x]a link[/link]"),
    ("close-bold", "[/bold] after"),
    ("close-all", "before [/]"),
    ("style", "[bold red on white]styled[/bold red on white]"),
    ("osc52", "\x1b]52;c;b3duZWQ=\x07clipboard"),
    ("osc0", "\x1b]0;pwned title\x07title"),
    ("csi-clear", "\x1b[2J\x1b[Hcleared"),
    ("dcs", "\x1bP1$qm\x1b\\dcs"),
    ("c1-csi", "\x9b2Jc1"),
    ("bidi", "abc\u202edcba\u2066x"),
    ("nul-bs-del", "a\x00b\x08c\x7fd"),
    ("bell", "ring\x07ring"),
    ("invalid-utf8", b"bad \xff\xfe\xc3( bytes".decode("utf-8", "replace")),
    ("long", "L" * 10_000),
)

# Characters that must never reach the terminal from target text.
FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\n"]
    + [chr(0x7F)]
    + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u202e", "\u2066", "\u200b"]
)


def forbidden_in(text: str) -> list[str]:
    """The forbidden characters in ``text``, as ``\\xNN`` names (empty when clean)."""
    return sorted({f"\\x{ord(ch):02x}" for ch in text if ch in FORBIDDEN})
