"""What runs on the target stays runnable there. Which package may import which is the
import-linter contracts' job (pyproject.toml, tests/unit/test_import_contracts.py), what a
start-up really loads tests/system/test_import_hygiene.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REMOTE = Path(__file__).parents[2] / "backends" / "remote"


@pytest.mark.parametrize("path", sorted(REMOTE.glob("*.py")), ids=lambda p: p.name)
def test_remote_code_is_python_3_8(path: Path) -> None:
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))


def test_the_doctor_knows_the_tags_of_gpumons_own_programs() -> None:
    """The swap refuses while processes use the venv; gpumon's agent must not count."""
    from gpumon.backends.remote import doctor_probe_fs, program_tag

    names = ("agent", "doctor_probe")
    assert tuple(program_tag(n) for n in names) == doctor_probe_fs.GPUMON_PROGRAMS
