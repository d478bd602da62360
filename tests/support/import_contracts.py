"""An import-linter contract type for code that runs on the target machine.

``standard_library_only``: every module in ``source_modules`` imports only the standard
library, modules of its own package and the ``allowed_modules`` (optional third-party
modules it imports inside a ``try``). Anything else, gpumon's own library included, is a
broken contract: the target has none of it. Registered in pyproject.toml
(``[tool.importlinter] contract_types``); lint-imports finds it through PYTHONPATH.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.imports import Module

__all__ = ["StandardLibraryOnlyContract", "is_standard_library"]


def is_standard_library(module: str) -> bool:
    """Whether the top-level package of ``module`` ships with this Python."""
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top == "__future__"


class StandardLibraryOnlyContract(Contract):
    """Options: ``source_modules`` (packages, checked with all their modules) and
    ``allowed_modules`` (top-level names allowed besides the standard library)."""

    type_name = "standard_library_only"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = cast("list[Module]", self.source_modules)  # a field, parsed by Contract
        allowed = set(cast("list[str] | None", self.allowed_modules) or [])
        violations: list[dict[str, Any]] = []
        for source in sources:
            modules = {source.name} | graph.find_descendants(source.name)
            for importer in sorted(modules):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if imported in modules or is_standard_library(imported):
                        continue
                    if imported.split(".")[0] in allowed:
                        continue
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = tuple(d["line_number"] for d in details)
                    violations.append(
                        {"importer": importer, "imported": imported, "line_numbers": lines}
                    )
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            where = ", ".join(f"l.{n}" for n in v["line_numbers"])
            output.print_error(
                f"{v['importer']} -> {v['imported']} ({where}): not in the standard library",
                bold=False,
            )
            output.new_line()
