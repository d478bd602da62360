"""The one schema checker (config/schema.py): every table says an unknown key, a bad value
and a missing key the same way, and the config modules import each other without a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpumon.backends.config import ConfigError, load_config
from gpumon.backends.config.schema import (
    REQUIRED,
    Invalid,
    KeySpec,
    base_url,
    check_table,
    integer,
    named_tables,
    url,
)

CONFIG_DIR = Path(__file__).parents[2] / "backends" / "config"

SPECS = (
    KeySpec("interval", integer(1, 10), "an integer 1..10"),
    KeySpec("node_label", str, "a label", attr="node_labels"),
    KeySpec("kind", str, "a kind", REQUIRED),
)


def test_a_table_gives_its_values_by_field_name() -> None:
    assert check_table({"kind": "a", "node_label": "x", "interval": 3}, SPECS) == {
        "kind": "a",
        "node_labels": "x",
        "interval": 3,
    }


@pytest.mark.parametrize(
    ("raw", "path", "problem"),
    [
        (
            {"kind": "a", "intervall": 1},
            ("intervall",),
            'unknown key (did you mean "interval"?); expected one of: interval, kind, node_label',
        ),
        (
            {"kind": "a", "zzz": 1},
            ("zzz",),
            "unknown key; expected one of: interval, kind, node_label",
        ),
        ({"kind": "a", "interval": 11}, ("interval",), "expected an integer 1..10, got 11"),
        ({"kind": "a", "interval": True}, ("interval",), "expected an integer 1..10, got true"),
        ({}, ("kind",), "missing; expected a kind"),
    ],
)
def test_refusals_read_the_same_for_every_table(
    raw: dict[str, object], path: tuple[str, ...], problem: str
) -> None:
    with pytest.raises(Invalid) as caught:
        check_table(raw, SPECS)
    assert (caught.value.path, caught.value.problem) == (path, problem)


def test_named_tables_put_the_name_in_the_path() -> None:
    def build(name: str, table: dict[str, object]) -> dict[str, object]:
        return check_table(table, SPECS)

    args = (re.compile(r"[a-z]+"), "a lower-case name", "a table of things", build)
    assert named_tables({"a": {"kind": "k"}}, *args) == {"a": {"kind": "k"}}
    for raw, path, problem in [
        ({"A": {}}, ("A",), "expected a lower-case name"),
        ({"a": 3}, ("a",), "expected a table of things, got 3"),
        ({"a": {"kind": "k", "interval": 0}}, ("a", "interval"), "expected an integer 1..10"),
    ]:
        with pytest.raises(Invalid) as caught:
            named_tables(raw, *args)
        assert caught.value.path == path and caught.value.problem.startswith(problem)
    with pytest.raises(TypeError):
        named_tables([], *args)


def test_one_url_checker_base_urls_lose_their_trailing_slash() -> None:
    # An endpoint as written (a webhook's "/" may matter to its receiver); a base that
    # paths are appended to without it.
    assert url("https://hooks.example/x/") == "https://hooks.example/x/"
    assert base_url("https://download.pytorch.org/whl/") == "https://download.pytorch.org/whl"
    for bad in ("ftp://x", "http://a b", "https://", " http://x", 3):
        with pytest.raises(ValueError):
            url(bad)
    with pytest.raises(ValueError):
        base_url("http:///")


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        # unknown keys in every kind of table now come with the closest known one
        ("[hosts.h.jobs.j]\ngpu = [1]", "hosts.h.jobs.j.gpu", 'did you mean "gpus"?'),
        ("[hosts.h.sglang]\nport = 1", "hosts.h.sglang.port", 'did you mean "ports"?'),
        ('[notify.a]\nkind = "terminal"\nttl = "x"', "notify.a.ttl", 'did you mean "tty"?'),
        ("[watch]\nmetric_port = 1", "watch.metric_port", 'did you mean "metrics_port"?'),
        ('[fleet.f]\nprometheus = "http://p"\ntimout = 5', "fleet.f.timout", '"timeout"?'),
        (
            '[fleet.f]\nprometheus = "http://p"\nbasic_auth = { usr = "a", password_env = "P" }',
            "fleet.f.basic_auth.usr",
            'did you mean "user"?',
        ),
        # a table where a table of tables is expected says which
        ("[hosts.h.jobs]\nj = 3", "hosts.h.jobs.j", "expected a table of job settings, got 3"),
        ("[fleet]\nf = 3", "fleet.f", "expected a table of fleet settings, got 3"),
        # required keys, one way
        (
            '[fleet.f]\nbasic_auth = { user = "a", password_env = "P" }',
            "fleet.f.prometheus",
            "missing; expected an http(s) URL",
        ),
        (
            '[fleet.f]\nprometheus = "http://p"\nbasic_auth = { user = "a" }',
            "fleet.f.basic_auth.password_env",
            "missing; expected an environment variable name",
        ),
        ("[notify.a]\nmin_severity = 'critical'", "notify.a.kind", "missing; expected one of"),
    ],
)
def test_every_table_goes_through_the_one_checker(
    tmp_path: Path, text: str, key: str, says: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{path}: {key}: ") and says in str(caught.value)


def _imports(path: Path) -> set[str]:
    """The config modules ``path`` imports, at any level (function bodies included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else f"gpumon.backends.config.{node.module}"
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        prefix = "gpumon.backends.config."
        found |= {n[len(prefix) :].split(".")[0] for n in names if n.startswith(prefix)}
    return found - {path.stem}


def test_the_config_modules_import_each_other_without_a_cycle() -> None:
    """load -> notify -> files -> schema -> limits, never back (load.py and notify.py were
    a cycle through a function-level import)."""
    graph = {p.stem: _imports(p) for p in CONFIG_DIR.glob("*.py") if p.stem != "__init__"}
    order: list[str] = []
    while graph:
        leaves = sorted(m for m, deps in graph.items() if not deps - set(order))
        assert leaves, f"an import cycle among {sorted(graph)}"
        order += leaves
        for m in leaves:
            del graph[m]
    assert order.index("schema") < order.index("notify") < order.index("load")
