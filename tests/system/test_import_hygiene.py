"""What a start-up really loads, measured in a fresh interpreter (``sys.modules``): the
headless commands start without Textual, Rich or asyncssh, and the library never loads
the UI, not even through an import made at run time (which import-linter cannot see)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system

UI = ("textual", "rich", "plotext")
SSH = ("asyncssh",)

IMPORT_EVERY_BACKEND_MODULE = """
import importlib, pkgutil
import gpumon.backends
for info in pkgutil.walk_packages(gpumon.backends.__path__, "gpumon.backends."):
    importlib.import_module(info.name)
"""


def loaded_after(code: str) -> set[str]:
    """The top-level names in ``sys.modules`` once ``code`` has run in a new interpreter."""
    report = "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-c", code + report], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        # what the `gpumon` console script runs before it parses the command line
        ("from gpumon.tui.cli import main", UI + SSH),
        ("from gpumon.tui.cli import main\nassert main(['check', 'demo']) in (0, 1)", UI + SSH),
        ("from gpumon.tui.cli import main\nmain(['snapshot', 'demo', '--json'])", UI + SSH),
        ("import gpumon.backends.parsers.nvidia_smi", UI + SSH),
        (IMPORT_EVERY_BACKEND_MODULE, UI),
    ],
    ids=["cli", "check-demo", "snapshot-demo", "nvidia-smi-parser", "every-backend-module"],
)
def test_start_up_does_not_load(code: str, absent: tuple[str, ...]) -> None:
    assert sorted(loaded_after(code) & set(absent)) == []


def test_the_measurement_sees_the_dashboard_load_textual() -> None:
    """The check above can fail: the dashboard module does load Textual."""
    assert {"textual", "rich"} <= loaded_after("import gpumon.tui.app")
