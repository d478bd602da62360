"""The library layer stays free of the UI: backends/ never imports Textual or gpumon.tui."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKENDS = Path(__file__).parents[2] / "backends"
FORBIDDEN = ("textual", "rich", "gpumon.tui", "tui", "plotext")


@pytest.mark.parametrize("path", sorted(BACKENDS.rglob("*.py")), ids=lambda p: p.name)
def test_backend_module_imports_no_ui(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.append(node.module)
    bad = [m for m in imported if m.split(".")[0] in FORBIDDEN or m.startswith("gpumon.tui")]
    assert bad == [], f"{path.name} imports UI modules: {bad}"


def test_the_doctor_knows_the_tags_of_gpumons_own_programs() -> None:
    """The swap refuses while processes use the venv; gpumon's agent must not count."""
    from gpumon.backends.remote import doctor_probe_fs, program_tag

    names = ("agent", "doctor_probe")
    assert tuple(program_tag(n) for n in names) == doctor_probe_fs.GPUMON_PROGRAMS
