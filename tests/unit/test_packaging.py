"""pyproject.toml's metadata as the build backend reads it (no deprecated forms), its ranges
and the locks that pin what a fresh clone installs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


ROOT = PYPROJECT.parent
LOCK_LINE = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)(?: ;([^\\]+))?")


def _locked(name: str) -> dict[str, str]:
    """``{package: version}`` from a lock file (requirements.lock, requirements-test.lock)."""
    found: dict[str, str] = {}
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        m = LOCK_LINE.match(line)
        if m:
            found[canonicalize_name(m[1])] = m[2]
    return found


def _requirements(extra: str | None = None) -> list[Requirement]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


def test_every_runtime_dependency_is_a_range_the_lock_satisfies() -> None:
    """Ranges, not pins (gpumon installs beside other tools), with a floor and a ceiling;
    the lock holds one version of each, inside its range, in both lock files alike."""
    runtime, test = _locked("requirements.lock"), _locked("requirements-test.lock")
    for req in _requirements():
        ops = {spec.operator for spec in req.specifier}
        assert ops == {">=", "<"}, f"{req}: a floor and a ceiling, not {ops}"
        name = canonicalize_name(req.name)
        assert name in runtime, f"{name} is not in requirements.lock"
        assert req.specifier.contains(runtime[name]), f"lock {name}=={runtime[name]} vs {req}"
        assert test[name] == runtime[name], f"{name}: the two locks disagree"
    # What the runtime lock holds, the test lock holds at the same version.
    assert {k: test.get(k) for k in runtime} == runtime


def test_the_test_tools_are_pinned_as_locked() -> None:
    test = _locked("requirements-test.lock")
    for req in _requirements("test"):
        (spec,) = req.specifier
        assert spec.operator == "==", f"{req}: the test tools are pinned exactly"
        assert test[canonicalize_name(req.name)] == spec.version, req


def test_the_locks_are_hashed_and_hold_the_build_backend() -> None:
    """pip installs a hashed file with --require-hashes implied; setuptools is locked as the
    build backend pyproject names, for the editable install without build isolation."""
    build = _pyproject()["build-system"]
    assert isinstance(build, dict)
    (backend,) = [Requirement(r) for r in build["requires"]]
    for name in ("requirements.lock", "requirements-test.lock"):
        text = (ROOT / name).read_text(encoding="utf-8")
        pins = [line for line in text.splitlines() if LOCK_LINE.match(line)]
        assert pins and all(line.rstrip().endswith("\\") for line in pins), name
        assert text.count("--hash=sha256:") >= len(pins), name
        assert backend.specifier.contains(_locked(name)["setuptools"]), name


def test_ci_and_the_readme_install_from_the_locks() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -q -r requirements-test.lock" in ci
    assert "--no-deps --no-build-isolation -e ." in ci
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install -r requirements.lock" in readme


def test_the_license_file_is_mit_with_the_year_and_the_holder_pyproject_names() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license-files"] == ["LICENSE"]
    (author,) = project["authors"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert re.search(rf"^Copyright \(c\) 20[0-9]{{2}} {re.escape(author['name'])}$", text, re.M)
    assert "WITHOUT WARRANTY OF ANY KIND" in text
