"""The README and docs/ kept true to the code: every relative link resolves (to a file, and
to a heading where it names one, by GitHub's anchors), every doc is reachable from the
README, the README's commands table names every subcommand, its minimal config is one
`gpumon config check` accepts, and docs/architecture.md's layers are pyproject's contracts.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.config import format_hosts, load_config
from gpumon.tui.cli.subcommands import names
from gpumon.tui.cli.words import BUILTIN_HOSTS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def prose(text: str) -> str:
    """``text`` without its code blocks: a ``[x](y)`` in a TOML or JSON example is no link."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger, as github.com renders Markdown): the
    text as rendered (code spans' and links' text, no markup), lower case, punctuation
    dropped (letters, digits, marks, ``_``, ``-`` and spaces kept), spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").lower()
    kept = (
        c
        for c in text
        if c in " -_" or unicodedata.category(c)[0] in "LMN"  # letters, marks, numbers
    )
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated one gets ``-1``, ``-2`` ... as on GitHub."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for m in HEADING.finditer(prose(text)):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> Iterator[str]:
    """The targets of the links and images of ``text``, outside code."""
    for m in LINK.finditer(CODE_SPAN.sub("", prose(text))):
        yield m.group(1)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``page`` that lead nowhere: no such file (in ``root``), or no
    such heading."""
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: - not ours to check
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_file() or not dest.is_relative_to(root):
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_file_a_missing_heading_and_a_way_out(
    tmp_path: Path,
) -> None:
    """The checker itself, on a README and a docs/ page of its own: good links pass; a
    file that is not there, a heading that is not there and a file outside the tree are
    named; a link-shaped text in code is no link."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "outside.md").write_text("# Outside\n", encoding="utf-8")
    (root / "README.md").write_text("# gpumon\n\n## Commands\n", encoding="utf-8")
    (root / "docs" / "alerts.md").write_text("# Alert kinds\n\n## Tags\n", encoding="utf-8")
    page = root / "docs" / "page.md"
    page.write_text(
        "## Here\n\n"
        "[ok](alerts.md#tags) [up](../README.md#commands) [self](#here) ![pic](alerts.md)\n"
        "[gone](nowhere.md) [no heading](alerts.md#no-such-heading) [out](../../outside.md)\n"
        "`[code](span.md)`\n```toml\n[x](block.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root.resolve()) == [
        "nowhere.md: no such file",
        "alerts.md#no-such-heading: no such heading in alerts.md",
        "../../outside.md: no such file",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("## `gpumon doctor HOST --json`", "gpumon-doctor-host---json"),
        ("## Metrics (`/metrics`)", "metrics-metrics"),
        ("# On call: `gpumon watch`", "on-call-gpumon-watch"),
        ("## Each GPU (`gpus[]`)", "each-gpu-gpus"),
        ("## What an update shows", "what-an-update-shows"),
        ("## Set up on a new machine", "set-up-on-a-new-machine"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert anchors(heading) == {anchor}


def test_a_repeated_heading_gets_a_number() -> None:
    assert anchors("## Figures\n\n## Figures\n\n## Figures\n") == {
        "figures",
        "figures-1",
        "figures-2",
    }


def test_the_readme_links_every_doc() -> None:
    linked = {
        (ROOT / t.partition("#")[0]).resolve() for t in links(README.read_text(encoding="utf-8"))
    }
    assert [d.name for d in DOCS if d.resolve() not in linked] == []


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_commands_table_names_every_subcommand() -> None:
    table = section(README.read_text(encoding="utf-8"), "Commands")
    rows = [line for line in table.splitlines() if line.startswith("| `gpumon")]
    words = {
        m.group(1)
        for row in rows
        for m in re.finditer(r"`gpumon(?: ([^ `]+))?", row.split(" | ")[0])
        if m.group(1) is not None
    }
    assert set(names()) <= words, set(names()) - words
    assert {"--version", *BUILTIN_HOSTS} - {"local"} <= words
    assert words <= {*names(), *BUILTIN_HOSTS, "HOST", "--version"}, words
    assert any(row.startswith("| `gpumon` |") for row in rows)  # no word: every host


def test_the_full_usage_names_every_subcommand() -> None:
    usage = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    block = usage[usage.index("```sh") : usage.index("```", usage.index("```sh") + 3)]
    said = set(re.findall(r"^gpumon ([a-z-]+)", block, re.M))
    assert set(names()) - said == set()


def test_the_readme_config_is_one_config_check_accepts(tmp_path: Path) -> None:
    block = section(README.read_text(encoding="utf-8"), "A minimal config")
    (toml,) = re.findall(r"```toml\n(.*?)```", block, re.S)
    path = tmp_path / "config.toml"
    path.write_text(toml, encoding="utf-8")
    config = load_config(path)
    host = config.hosts["ct200"]
    assert (host.user, host.ssh_host, host.container) == ("root", "pve1", 200)
    job = host.job("drafter")
    assert job is not None and job.gpus == (5, 6, 7) and job.start and job.log
    assert "[hosts.ct200]  ssh root@pve1" in format_hosts(config)
    assert "-> pct exec 200" in format_hosts(config)


def _contract(contract_id: str) -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["id"] == contract_id]
    layers: list[str] = contract["layers"]
    return layers


def _layers_text(layers: list[str]) -> str:
    """The contract as docs/architecture.md writes it: ``a > b | c > ...``, the last layer
    of independent leaves (``a : b``) as "the shared leaves (`a`, `b`)"."""
    said = [layer for layer in layers if " : " not in layer]
    leaves = [layer.split(" : ") for layer in layers if " : " in layer]
    said += [f"the shared leaves ({', '.join(f'`{m}`' for m in group)})" for group in leaves]
    return " > ".join(said)


ARCHITECTURE = ROOT / "docs" / "architecture.md"
CONTRACTS = [("backends", "backends-layers"), ("tui", "tui-layers")]


@pytest.mark.parametrize(
    ("top", "contract_id"), [("backends", "backends-layers"), ("tui", "tui-layers")]
)
def test_the_architecture_doc_says_the_layers_contract(top: str, contract_id: str) -> None:
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    (line,) = re.findall(rf"^- `{top}`: (.*)$", doc, re.M)
    assert line == _layers_text(_contract(contract_id))


@pytest.mark.parametrize(
    ("top", "contract_id"), [("backends", "backends-layers"), ("tui", "tui-layers")]
)
def test_the_layers_table_has_every_layer_and_package(top: str, contract_id: str) -> None:
    doc = ARCHITECTURE.read_text(encoding="utf-8")
    table = section(doc, "The layers")
    rows = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
    members = {m for layer in _contract(contract_id) for m in re.split(r" [|:] ", layer)}
    packages = {p.parent.name for p in (ROOT / top).glob("*/__init__.py")}
    missing = [
        name
        for name in sorted(members | packages)
        if f"{top}/{name}/" not in rows and f"{top}/{name}.py" not in rows
    ]
    assert missing == [], f"not in the layers table of docs/architecture.md: {missing}"


def _table_keys(doc: str, title: str | None) -> set[str]:
    """The keys (first column) of the table under heading ``title`` (None: the first)."""
    part = doc if title is None else section(doc, title)
    table = part[part.index("\n| key |") :]
    table = table[: table.find("\n\n")] if "\n\n" in table else table
    return {
        k
        for cell in re.findall(r"^\| ([^|]+) \|", table, re.M)
        for k in re.findall(r"`([^`]+)`", cell)
    }


def test_the_json_reference_has_every_key_snapshot_writes() -> None:
    """A snapshot of one GPU with one process: every key of the object, of the GPU and of
    the process is a row of docs/json.md's tables."""
    from gpumon.backends.config import HostConfig
    from gpumon.backends.model import GpuProcess, GpuSample, HostSample
    from gpumon.backends.monitor import HostMonitor, snapshot_json
    from gpumon.backends.monitor.sources import AgentSource
    from gpumon.backends.transport import LocalTransport

    from waiting import FakeClock

    t0 = 1_800_000_000.0
    host = HostConfig(name="box", kind="local", kernel_log=False)
    monitor = HostMonitor(
        host, AgentSource(LocalTransport(host)), clock=FakeClock(t0).time, record=False
    )
    gpu = GpuSample(index=0, uuid="GPU-0", name="NVIDIA H200", memory_used_mib=1024)
    proc = GpuProcess(pid=861, name="python3", memory_mib=1024, gpu_uuid="GPU-0")
    monitor.ingest_sample(HostSample("box", t0, None, (gpu,), (proc,)))
    snap = snapshot_json(monitor, t0)
    (gpu_json,) = snap["gpus"]
    (proc_json,) = gpu_json["processes"]
    doc = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    assert set(snap) - _table_keys(doc, None) == set()
    assert set(gpu_json) - _table_keys(doc, "Each GPU (`gpus[]`)") == set()
    assert set(proc_json) - _table_keys(doc, "Each process (`gpus[].processes[]`)") == set()
