"""The project's own Python files, each parsed once per test process: the fast lane's
AST scans (test_alert_facts, test_alert_kinds, test_untrusted, test_paths) read the same
200-odd files, and parsing them was a tenth of its time. Callers only read the trees."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))
