"""Numbers as training and batch logs print them: "12.8K", "1.2M", "12,800", "2.0e-04",
rates ("12.8 Ktok/s", "5.41it/s", "3.2s/it") and durations ("01:40", "1:02:03", "3m20s").

Every function returns None for text it cannot read; none of them raises.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gpumon.backends.lazy import lazy_pattern

_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER = lazy_pattern(rf"\s*({NUMBER})\s*([kKMGBT]?)\s*")
# Item words a rate can be counted in; "tok..." words make it a token rate.
UNIT_WORDS = (
    r"tok(?:en)?s?|it(?:em)?s?|steps?|prompts?|samples?|req(?:uest)?s?|seqs?|"
    r"examples?|rows?|records?|batch(?:es)?|ex"
)
_PER_SECOND = lazy_pattern(
    rf"({NUMBER})\s*(?:([kKMGBT])\s*)?((?i:{UNIT_WORDS}))\s*/\s*s(?:ec(?:ond)?)?\b(?!\s*[:=])"
)
_SECONDS_PER = lazy_pattern(rf"({NUMBER})\s*s(?:ec)?\s*/\s*((?i:{UNIT_WORDS}))\b")
_CLOCK = lazy_pattern(r"\s*(?:(\d+)\s*d(?:ays?)?,?\s*)?(?:(\d+):)?(\d{1,2}):(\d{2}(?:\.\d+)?)\s*")
_PARTS = lazy_pattern(
    r"(\d+(?:\.\d+)?)\s*(d|days?|h|hrs?|hours?|m|mins?|minutes?|s|secs?|seconds?)(?![A-Za-z])"
)
_PART_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def parse_number(text: str) -> float | None:
    """``"12.8K"`` -> 12800.0, ``"1.2M"``, ``"5.2B"`` (billions), ``"12,800"``, ``"2.0e-04"``.

    The whole text must be one number with an optional SI suffix (k/K, M, G/B, T).
    """
    m = _NUMBER.fullmatch(text)
    if m is None or not any(ch.isdigit() for ch in m[1]):
        return None
    try:
        value = float(m[1].replace(",", "")) * _SCALE[m[2]]
    except ValueError:
        return None
    return _finite(value)


class Rate(NamedTuple):
    per_second: float  # items (or tokens) per second
    unit: str  # the item word as printed, lower case: "tok", "it", "prompts", ...

    @property
    def is_tokens(self) -> bool:
        return self.unit.startswith("tok")


def parse_rates(text: str) -> list[Rate]:
    """Every rate in ``text``, in order: ``"12.8 Ktok/s"`` -> Rate(12800.0, "tok"),
    ``"5.41it/s"`` -> Rate(5.41, "it"), ``"3.2s/it"`` -> Rate(0.3125, "it")."""
    found: list[tuple[int, Rate]] = []
    if "/" not in text:
        return []
    for m in _PER_SECOND.finditer(text):
        if any(ch.isdigit() for ch in m[1]):  # "tok/s=12800": a key, not a value
            value = float(m[1].replace(",", "")) * _SCALE[m[2] or ""]
            if math.isfinite(value):
                found.append((m.start(), Rate(value, m[3].lower())))
    for m in _SECONDS_PER.finditer(text):
        if any(ch.isdigit() for ch in m[1]):
            seconds = float(m[1].replace(",", ""))
            if seconds > 0 and math.isfinite(seconds):
                found.append((m.start(), Rate(1.0 / seconds, m[2].lower())))
    return [rate for _, rate in sorted(found)]


def parse_rate(text: str, tokens: bool | None = None) -> Rate | None:
    """The first rate in ``text`` (only token rates, or only non-token rates, when
    ``tokens`` says so)."""
    for rate in parse_rates(text):
        if tokens is None or rate.is_tokens == tokens:
            return rate
    return None


def parse_duration(text: str) -> float | None:
    """Seconds in ``"01:40"``, ``"1:02:03"``, ``"2d, 01:02:03"``, ``"3m20s"``, ``"1h 5m"``,
    ``"100s"`` or a bare number of seconds. None for ``"?"``, ``"inf"`` and the like."""
    text = text.strip()
    m = _CLOCK.fullmatch(text)
    if m is not None:
        days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
        return days * 86400 + hours * 3600 + minutes * 60 + seconds
    plain = parse_number(text) if "," not in text else None
    if plain is not None and not text[-1:].isalpha():
        return plain if plain >= 0 else None
    parts = _PARTS.findall(text)
    if not parts or _PARTS.sub("", text).strip(" ,") != "":
        return None
    total = 0.0
    for number, unit in parts:
        total += float(number) * _PART_SECONDS[unit[0]]
    return _finite(total)


def duration_words(seconds: float) -> str:
    """``45 s``, ``6 min``, ``2.5 h``: how long a condition has held, to a headline's
    precision (the one way to say it: the alerts' and the flight recorder's)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
