"""gpumon imports plotext without its documentation browser (``widgets.plot.plotext``):
in fresh interpreters, the plots it draws are byte for byte those of a full import, and
the dashboard does not load plotext until a plot is drawn."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.system

DRAW = """
import sys
{first}
from rich.console import Console
from gpumon.tui.widgets.plot import PlotSpec, build_plot
spec = PlotSpec(title="memory GiB", xs=(-50.0, -40.0, -20.0, -1.0, 0.0),
                ys=(10.0, None, 30.0, 40.0, 45.0), window=60.0, y_max=96.0,
                colour=(230, 160, 10), frame=(120, 120, 120), gap_s=3.0)
console = Console(file=sys.stdout, width=80, color_system="truecolor", force_terminal=True)
for size in ((40, 10), (78, 18), (120, 30)):
    console.print(build_plot(spec, *size))
print("docs loaded:", "plotext._doc.sections" in " ".join(sys.modules))
"""


def _draw(first: str) -> str:
    code = DRAW.format(first=first)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plots_are_those_of_a_full_plotext_import() -> None:
    lean = _draw("")
    full = _draw("import plotext")  # the whole package first, documentation and all
    assert lean.rsplit("\n", 2)[-2] == "docs loaded: False"
    assert full.rsplit("\n", 2)[-2] == "docs loaded: True"
    plots, full_plots = lean.rsplit("docs loaded", 1)[0], full.rsplit("docs loaded", 1)[0]
    assert "memory GiB" in plots and "\x1b[38;2;230;160;10m" in plots  # drawn, in colour
    assert plots == full_plots


def test_the_dashboard_starts_without_plotext() -> None:
    code = "import sys, gpumon.tui.app; print('plotext' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
