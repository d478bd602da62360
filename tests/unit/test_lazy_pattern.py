"""``lazy_pattern``: a module-level pattern compiled on first use (issue 41 point 2: no
work at import time), that then answers as the compiled pattern does, with no wrapper
left on the path of each call."""

from __future__ import annotations

import re

import pytest

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.parsers import oom, progress_presets, units


def test_nothing_is_compiled_until_the_pattern_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[str] = []
    real = re.compile

    def counting(pattern: str, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)  # what lazy_pattern calls on first use
    p = lazy_pattern(r"(\d+) (GiB)", re.IGNORECASE)
    assert p.pattern == r"(\d+) (GiB)" and compiled == []  # its text needs no compile
    assert (m := p.search("used 12 gib")) is not None and m.groups() == ("12", "gib")
    assert p.sub("N", "1 GiB, 2 gib") == "N, N" and p.groups == 2
    assert p.flags & re.IGNORECASE and compiled == [r"(\d+) (GiB)"]
    p.match("3 GiB")
    assert compiled == [r"(\d+) (GiB)"]  # once


def test_after_the_first_use_the_methods_are_the_compiled_patterns_own() -> None:
    p = lazy_pattern(r"x+")
    assert p.fullmatch("xxx")
    real = re.compile(r"x+")
    assert type(p.match) is type(real.match)  # a bound builtin: no Python frame per call
    assert p.findall("xx y x") == real.findall("xx y x")
    assert list(map(str, p.split("axxbxc"))) == real.split("axxbxc")


@pytest.mark.parametrize("module", [units, progress_presets, oom])
def test_the_parsers_patterns_are_lazy(module: object) -> None:
    """The modules a one-shot imports without reading a log or a progress line."""
    patterns = [v for v in vars(module).values() if isinstance(v, re.Pattern)]
    assert patterns == [], f"compiled at import: {[p.pattern for p in patterns]}"
