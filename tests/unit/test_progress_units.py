"""Numbers as logs print them: SI suffixes, rates and durations."""

from __future__ import annotations

import pytest

from gpumon.backends.parsers import Rate, parse_duration, parse_number, parse_rate

# ------------------------------------------------------------------------------ units


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12.8K", 12800.0),
        ("12.8k", 12800.0),
        ("1.2M", 1.2e6),
        ("5.2B", 5.2e9),
        ("12,800", 12800.0),
        ("2.0e-04", 2e-4),
        (".5", 0.5),
        ("Ktok/s", None),
        ("1,2", None),
        ("nan", None),
        ("1e400", None),
        ("", None),
    ],
)
def test_parse_number(text: str, value: float | None) -> None:
    assert parse_number(text) == (pytest.approx(value) if value is not None else None)


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("12.8 Ktok/s", Rate(12800.0, "tok")),
        ("12.8Ktok/s", Rate(12800.0, "tok")),
        ("1,200 tokens/s", Rate(1200.0, "tokens")),
        ("12.8 Tokens/s", Rate(12.8, "tokens")),  # "T" of Tokens is not tera
        ("5.41it/s", Rate(5.41, "it")),
        ("3.2s/it", Rate(0.3125, "it")),
        ("41.3 prompts/s", Rate(41.3, "prompts")),
        ("12.3kit/s", Rate(12300.0, "it")),
        ("?it/s", None),
        ("tok/s=12800", None),  # a key, not a value
        ("loss=2.31 tok/s=12800", None),
    ],
)
def test_parse_rate(text: str, rate: Rate | None) -> None:
    got = parse_rate(text)
    if rate is None:
        assert got is None
    else:
        assert got is not None and got.unit == rate.unit
        assert got.per_second == pytest.approx(rate.per_second)


def test_parse_rate_picks_the_kind_asked_for() -> None:
    line = "done=1200 40.0 prompts/s 173.3 Ktok/s"
    assert parse_rate(line, tokens=True) == Rate(173300.0, "tok")
    assert parse_rate(line, tokens=False) == Rate(40.0, "prompts")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("01:40", 100.0),
        ("1:02:03", 3723.0),
        ("2d, 01:02:03", 2 * 86400 + 3723.0),
        ("3m20s", 200.0),
        ("1h 5m", 3900.0),
        ("5 min", 300.0),
        ("100s", 100.0),
        ("100", 100.0),
        ("00:00", 0.0),
        ("?", None),
        ("inf", None),
        ("-5", None),
        ("soon", None),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds
