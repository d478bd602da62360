"""The job-control scripts as real files: shipped as package data, and an unknown one an
error. Assembled and run by sh: tests/system/test_job_scripts_run.py."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from gpumon.backends.remote.scripts import job_script

ROOT = Path(__file__).parents[2]
REMOTE = ROOT / "backends" / "remote"


def test_every_shell_script_is_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["gpumon.backends.remote"]
    files = sorted(p.relative_to(REMOTE).as_posix() for p in REMOTE.rglob("*.sh"))
    assert files, "no job scripts found"
    assert [f for f in files if not any(fnmatch(f, g) for g in globs)] == []


def test_an_unknown_script_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        job_script("nope")
