"""The import contracts in pyproject.toml hold on this tree, and each one breaks when the
import it forbids is added (a contract that cannot fail guards nothing). scripts/test runs
the same contracts through lint-imports; this runs them on grimp's graph in process."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.configuration import configure
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from importlinter.domain.contract import Contract

from import_contracts import StandardLibraryOnlyContract

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
CONFIG: dict[str, Any] = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"][
    "importlinter"
]
TYPES: dict[str, type[Contract]] = {
    "acyclic_siblings": AcyclicSiblingsContract,
    "forbidden": ForbiddenContract,
    "layers": LayersContract,
    "standard_library_only": StandardLibraryOnlyContract,
}

# One import each contract exists to refuse (importer -> imported).
VIOLATIONS = {
    "library-without-ui": [
        ("gpumon.backends.model", "textual"),
        ("gpumon.backends.alerts.store", "gpumon.tui.views"),
        ("gpumon.backends.config.load", "gpumon.themes"),
    ],
    "remote-standard-library": [
        ("gpumon.backends.remote.agent", "gpumon.backends.untrusted"),
        ("gpumon.backends.remote.doctor_probe_fs", "asyncssh"),
    ],
    "backends-layers": [
        ("gpumon.backends.monitor.report", "gpumon.backends.actions.audit"),
        ("gpumon.backends.transport.base", "gpumon.backends.sim.smi"),
        ("gpumon.backends.alerts.rules", "gpumon.backends.monitor.state"),
        ("gpumon.backends.fleet.report", "gpumon.backends.torchenv.doctor"),
        ("gpumon.backends.model", "gpumon.backends.config.load"),
        ("gpumon.backends.notify.hub", "gpumon.backends.runtime"),
    ],
    "tui-layers": [
        ("gpumon.tui.widgets.host_section", "gpumon.tui.dashboard.screen"),
        ("gpumon.tui.views.workload_views", "gpumon.tui.widgets.workload_panes"),
        ("gpumon.tui.app", "gpumon.tui.cli.command_line"),
    ],
    "no-cycles": [
        ("gpumon.tui.cli.options", "gpumon.tui.cli.command_line"),
        ("gpumon.backends.monitor.sources.replay", "gpumon.backends.monitor.state"),
    ],
}


@pytest.fixture(scope="module")
def graph() -> Iterator[grimp.ImportGraph]:
    configure()  # import-linter's settings (its timer), as its command line does
    yield grimp.build_graph(
        *CONFIG["root_packages"],
        include_external_packages=CONFIG["include_external_packages"],
        cache_dir=None,
    )


def contract(contract_id: str) -> Contract:
    (options,) = [c for c in CONFIG["contracts"] if c["id"] == contract_id]
    session = {key: value for key, value in CONFIG.items() if key != "contracts"}
    return TYPES[options["type"]](options["name"], session, options)


def test_every_contract_has_a_violation_here() -> None:
    assert sorted(c["id"] for c in CONFIG["contracts"]) == sorted(VIOLATIONS)


@pytest.mark.parametrize("contract_id", sorted(VIOLATIONS))
def test_the_tree_keeps_the_contract(contract_id: str, graph: grimp.ImportGraph) -> None:
    check = contract(contract_id).check(copy.deepcopy(graph), verbose=False)
    assert check.kept, check.metadata
    assert check.warnings == []


@pytest.mark.parametrize(
    ("contract_id", "importer", "imported"),
    [(cid, *edge) for cid, edges in VIOLATIONS.items() for edge in edges],
)
def test_the_forbidden_import_breaks_it(
    contract_id: str, importer: str, imported: str, graph: grimp.ImportGraph
) -> None:
    broken = copy.deepcopy(graph)
    broken.add_import(importer=importer, imported=imported, line_number=1, line_contents="x")
    assert not contract(contract_id).check(broken, verbose=False).kept


def test_function_level_imports_are_in_the_graph(graph: grimp.ImportGraph) -> None:
    """The contracts see imports inside functions too (the dashboard is started from one)."""
    assert graph.direct_import_exists(
        importer="gpumon.tui.cli.command_line", imported="gpumon.tui.app"
    )
