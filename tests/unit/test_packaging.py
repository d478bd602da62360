"""pyproject.toml's metadata as the build backend reads it: no deprecated forms."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _pyproject() -> dict[str, object]:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def test_the_license_is_an_spdx_expression_and_the_backend_accepts_it() -> None:
    """setuptools 77 warns that ``license = { text = ... }`` is deprecated (PEP 639) and
    takes the SPDX string; an older setuptools would refuse the string, so the build
    requirement says 77.0.3 (the first without 77.0's license-file errors)."""
    data = _pyproject()
    project = data["project"]
    assert isinstance(project, dict)
    assert project["license"] == "MIT"
    classifiers = project.get("classifiers", [])
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: not both
    requires = data["build-system"]
    assert isinstance(requires, dict)
    (setuptools,) = [r for r in requires["requires"] if r.startswith("setuptools")]
    m = re.fullmatch(r"setuptools>=([0-9]+)\.([0-9]+)\.([0-9]+)", setuptools)
    assert m is not None, setuptools
    assert tuple(map(int, m.groups())) >= (77, 0, 3)
