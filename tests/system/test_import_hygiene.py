"""What a start-up really loads, measured in a fresh interpreter (``sys.modules``): the
headless commands start without Textual, Rich or asyncssh, and the library never loads
the UI, not even through an import made at run time (which import-linter cannot see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.backends.monitor.oneshot import OFF_PATH

pytestmark = pytest.mark.system

UI = ("textual", "rich", "plotext")
SSH = ("asyncssh",)

IMPORT_EVERY_BACKEND_MODULE = """
import importlib, pkgutil
import gpumon.backends
for info in pkgutil.walk_packages(gpumon.backends.__path__, "gpumon.backends."):
    importlib.import_module(info.name)
"""


def modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The names in ``sys.modules`` once ``code`` has run in a new interpreter."""
    report = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code + report], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def loaded_after(code: str) -> set[str]:
    """The top-level names in ``sys.modules`` once ``code`` has run in a new interpreter."""
    return {m.split(".")[0] for m in modules_after(code)}


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


# The parts of the runtime a one-shot does not ask for (backends/runtime.py builds each
# on the first ask): delivery, the exporter, the action session; the simulator off the demo.
UNASKED = (
    "gpumon.backends.notify",
    "gpumon.backends.exporter",
    "gpumon.backends.actions.session",
    "prometheus_client",
)


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["check", "demo"], UNASKED),
        (["snapshot", "demo", "--json"], UNASKED),
        (
            ["--config", "{config}", "check", "local", "--timeout", "5"],
            (*UNASKED, "gpumon.backends.sim"),
        ),
    ],
    ids=["check-demo", "snapshot-demo", "check-local"],
)
def test_a_one_shot_builds_only_the_parts_it_runs(
    argv: list[str], absent: tuple[str, ...], tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"  # local without nvidia-smi: an answer in a moment
    config.write_text('[defaults]\nnvidia_smi = "/nonexistent"\n')
    argv = [a.format(config=config) for a in argv]
    loaded = modules_after(f"from gpumon.tui.cli import main\nmain({argv!r})")
    assert "gpumon.backends.runtime" in loaded  # the measurement sees the runtime
    assert sorted(m for m in loaded if m.startswith(absent)) == []


# What `gpumon snapshot local` must not load on its fast path (CI prints the same check
# with the import time: bench/bench_importtime.py --check, over the bench's NVML shim).
# ... nor what only other commands use (issue 41's second round): the fleet's config, and
# statistics with fractions and decimal (the medians of a running dashboard and watch);
# difflib, whose suggestions only a misspelt command, config key or rule key asks for.
# ... nor what only a host with jobs, servers or a decoded fact uses (issue 41's third
# round): the flight recorder's parser (and pickle), a job's trackers, verdicts and
# baselines (the progress presets, the collective scanner), the SGLang and vLLM trackers
# and parsers (only the vLLM line filter every agent is told: ``parsers.vllm_filter``).
ONE_SHOT_UNUSED = (
    "gpumon.backends.config.fleet",
    "statistics",
    "fractions",
    "decimal",
    "difflib",
    *OFF_PATH,
)
ONE_SHOT_FORBIDDEN = (*UI, *SSH, *UNASKED, *ONE_SHOT_UNUSED, "gpumon.backends.sim")
FAKE_NVML = Path(__file__).parents[1] / "support" / "fake_nvml"
PACKAGES = tuple(f"{m}." for m in ONE_SHOT_FORBIDDEN)


def test_snapshot_local_over_nvml_loads_neither_the_ui_nor_the_simulator(tmp_path: Path) -> None:
    """The whole one-shot on the local host's GPUs (the fake NVML: the agent's NVML path,
    its round run in gpumon's own process), not only its start."""
    config = tmp_path / "config.toml"
    config.write_text("")
    env = {**os.environ, "PYTHONPATH": str(FAKE_NVML), "GPUMON_CONFIG": str(config)}
    code = "from gpumon.tui.cli import main\nassert main(['snapshot', 'local']) == 0"
    loaded = modules_after(code, env)
    assert "gpumon.backends.monitor.state" in loaded  # the measurement sees the sample
    # a module or its package's modules: parsers.vllm_filter is not parsers.vllm
    assert sorted(m for m in loaded if m in ONE_SHOT_FORBIDDEN or m.startswith(PACKAGES)) == []
    # the agent's round ran in this process (monitor.oneshot), without an event loop
    assert "gpumon.backends.remote.agent" in loaded
    assert sorted(m for m in loaded if m == "asyncio" or m.startswith("asyncio.")) == []


def test_the_measurement_sees_the_dashboard_load_textual() -> None:
    """The check above can fail: the dashboard module does load Textual."""
    assert {"textual", "rich"} <= loaded_after("import gpumon.tui.app")


# What a dashboard loads only when a dialog opens: the doctor's and the swap's brought
# torchenv and the agent's own modules (its process is another) into every dashboard.
DIALOGS_ONLY = (
    "gpumon.backends.torchenv",
    "gpumon.backends.remote.agent",
    "gpumon.tui.screens.doctor",
    "gpumon.tui.screens.swap",
    "gpumon.tui.screens.kill",
    "gpumon.tui.screens.job_action",
)


def test_the_dashboard_loads_its_dialogs_when_one_opens() -> None:
    loaded = modules_after("import gpumon.tui.app")
    assert "gpumon.tui.dashboard.actions" in loaded  # the measurement sees the key handlers
    assert sorted(m for m in loaded if m.startswith(DIALOGS_ONLY)) == []


# The modules `gpumon snapshot local` imports before its first sample (the bench's
# bench_oneshot_floor.GPUMON_IMPORTS, and the report it prints).
ONE_SHOT_MODULES = (
    "gpumon.tui.cli.launch",
    "gpumon.tui.cli.command_line",
    "gpumon.backends.runtime",
    "gpumon.backends.monitor.compose",
    "gpumon.backends.monitor.report",
)
COMPILES_AT_IMPORT = """
import re, sys
compiled = []
real_compile = re.compile
def compile(pattern, flags=0):
    compiled.append((sys._getframe(1).f_globals.get("__name__", "?"), str(pattern)[:60]))
    return real_compile(pattern, flags)
re.compile = compile
import {modules}
print(json.dumps(compiled))
"""


def test_the_one_shot_compiles_no_pattern_of_gpumon_at_import() -> None:
    """A module-level pattern on the one-shot's path is a ``lazy_pattern``, compiled when
    first used: a snapshot that reads no SGLang page, training log or kernel line compiles
    none of their patterns (about 60, a quarter of the imports' regex work). The shipped
    agent's modules (``backends/remote``, standard library only) keep ``re.compile``."""
    code = "import json\n" + COMPILES_AT_IMPORT.format(modules=", ".join(ONE_SHOT_MODULES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    compiled = json.loads(out.stdout.splitlines()[-1])
    assert any(not m.startswith("gpumon.") for m, _ in compiled)  # it sees the stdlib's
    ours = [
        (m, p)
        for m, p in compiled
        if m.startswith("gpumon.") and not m.startswith("gpumon.backends.remote.")
    ]
    assert ours == []
