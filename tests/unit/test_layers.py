"""What runs on the target stays runnable there. Which package may import which is the
import-linter contracts' job (pyproject.toml, tests/unit/test_import_contracts.py), what a
start-up really loads tests/system/test_import_hygiene.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).parents[2]
REMOTE = REPO_ROOT / "backends" / "remote"


@pytest.mark.parametrize("path", sorted(REMOTE.glob("*.py")), ids=lambda p: p.name)
def test_remote_code_is_python_3_8(path: Path) -> None:
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))


def test_the_doctor_knows_the_tags_of_gpumons_own_programs() -> None:
    """The swap refuses while processes use the venv; gpumon's agent must not count."""
    from gpumon.backends.remote import doctor_probe_fs, program_tag

    names = ("agent", "doctor_probe")
    assert tuple(program_tag(n) for n in names) == doctor_probe_fs.GPUMON_PROGRAMS


PACKAGES = sorted(
    ".".join(["gpumon", *p.parent.relative_to(REPO_ROOT).parts])
    for top in ("backends", "tui")
    for p in (REPO_ROOT / top).rglob("__init__.py")
    if "lazy_exports" in p.read_text(encoding="utf-8")
)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_to_what_the_type_checker_was_told(package: str) -> None:
    """A package's names are resolved on first use; mypy reads them from the package's
    TYPE_CHECKING imports. Both must name the same objects, from the same modules."""
    import importlib

    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    promised = {
        alias.asname or alias.name: f"{package}.{node.module}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    assert sorted(promised) == sorted(module.__all__)
    for name, where in promised.items():
        value = getattr(module, name)
        assert value is getattr(importlib.import_module(where), name), name
