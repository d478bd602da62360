"""swap-torch asks the index (issue 17 point 18): the project pages as download.pytorch.org
lays them out (tests/support/torch_index.py writes them) and as PEP 691 JSON, the
versions there are per variant, interpreter and machine, and the plans built on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.remote.index_probe import files_of, on_disk, read_page
from gpumon.backends.torchenv.index import IndexListing, IndexPage, version_key, wheel_of
from gpumon.backends.torchenv.swap_plan import build_plan, index_problem_text, table_verdict

from torch_index import build_index, release_bases


def facts(version: str = "2.11.0+cu128", torchvision: str | None = "0.26.0+cu128") -> Any:
    dists = {"torch": {"name": "torch", "version": version}}
    if torchvision:
        dists["torchvision"] = {"name": "torchvision", "version": torchvision}
    venv = "/root/venv"
    return {
        "python": {
            "executable": f"{venv}/bin/python",
            "prefix": venv,
            "is_venv": True,
            "pip": True,
        },
        "dists": dists,
        "torch": {"installed": True, "version": version, "version_py": {"version": version}},
        "gpu": {
            "smi": "ok",
            "driver": "590.48.01",
            "gpus": [{"index": "0", "name": "RTX PRO 6000", "compute_cap": "12.0"}],
        },
        "procs": [],
        "disk": [{"path": venv, "free": 100 << 30}],
    }


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], list[str]]:
    """(variant, project) -> the file names its page lists, read as the probe reads them."""
    root = build_index(tmp_path_factory.mktemp("index"), release_bases()) / "current"
    out = {}
    for page in root.glob("*/*/index.html"):
        out[(page.parent.parent.name, page.parent.name)] = files_of(page.read_text(), "text/html")
    return out


def listing(pages: dict[tuple[str, str], list[str]], variant: str, **kw: Any) -> IndexListing:
    base = "http://127.0.0.1:1/current"
    found = {
        project: IndexPage(f"{base}/{variant}/{project}/", 200, None, tuple(files))
        for (v, project), files in pages.items()
        if v == variant
    }
    return IndexListing(
        f"{base}/{variant}", kw.get("tag", "cp311"), kw.get("machine", "x86_64"), found
    )


def host() -> HostConfig:
    return HostConfig(
        name="ct200",
        kind="ssh",
        python="/root/venv/bin/python",
        torch_index="http://127.0.0.1:1/current",
    )


def test_pages_in_the_real_layout(pages: dict[tuple[str, str], list[str]]) -> None:
    """The anchor text is the file name (the href is /BASE/VARIANT/FILE with %2B)."""
    names = pages[("cu132", "torch")]
    assert "torch-2.12.1+cu132-cp311-cp311-manylinux_2_28_x86_64.whl" in names
    assert "torch-2.13.0+cu132-py3-none-any.whl" in names  # the installable stand-in
    wheel = wheel_of("torch-2.12.1%2Bcu132-cp311-cp311-manylinux_2_28_aarch64.whl")
    assert wheel is not None and (wheel.public, wheel.label) == ("2.12.1", "cu132")
    assert not wheel.runs_on("cp311", "x86_64") and wheel.runs_on("cp311", "aarch64")
    assert wheel_of("torch-2.12.1.tar.gz") is None and wheel_of("junk.whl") is None
    assert sorted(["2.10.0", "2.9.1", "2.12.1"], key=version_key) == ["2.9.1", "2.10.0", "2.12.1"]


def test_versions_per_variant_interpreter_and_machine(
    pages: dict[tuple[str, str], list[str]],
) -> None:
    cu128 = listing(pages, "cu128")
    assert cu128.versions("torch", "cu128") == ["2.9.0", "2.9.1", "2.10.0", "2.11.0"]
    cu132 = listing(pages, "cu132")
    assert cu132.versions("torch", "cu132") == ["2.12.0", "2.12.1", "2.13.0"]
    assert cu132.versions("torchvision", "cu132") == ["0.28.0"]
    py314 = listing(pages, "cu132", tag="cp314")  # only the py3 stand-in fits
    assert py314.versions("torch", "cu132") == ["2.13.0"]


def test_a_current_torch_plans_against_what_the_index_serves(
    pages: dict[tuple[str, str], list[str]],
) -> None:
    """torch 2.13.0 for cu132, on the index: the plan runs with the torchvision the table
    pairs with 2.13.0 (0.28, as the index's 0.(13+15) would be), and the table says what an
    index cannot (no arch list for cu132 2.13: a warning; the CUDA 13 driver floor 580
    holds for 590.48.01)."""
    plan = build_plan(host(), facts(), "cu132", version="2.13.0", index=listing(pages, "cu132"))
    assert plan.ok, plan.refusals
    assert plan.pins == ("torch==2.13.0+cu132", "torchvision==0.28.0+cu132")
    assert plan.index_url == "http://127.0.0.1:1/current/cu132"
    assert "the table does not say whether cu132 runs on sm_120" in plan.warnings


def test_a_pair_the_index_does_not_have_is_refused_naming_what_it_has(
    pages: dict[tuple[str, str], list[str]],
) -> None:
    plan = build_plan(host(), facts(), "cu128", version="2.16.0", index=listing(pages, "cu128"))
    refusal, companion = plan.refusals
    assert companion.reason.startswith("no known torchvision release pairs with torch 2.16.0")
    assert refusal.reason == (
        "torch 2.16.0+cu128 is not on http://127.0.0.1:1/current/cu128 (cp311 x86_64): "
        "2.9.0, 2.9.1, 2.10.0, 2.11.0"
    )
    assert not refusal.overridable
    forced = build_plan(
        host(), facts(), "cu128", version="2.16.0", index=listing(pages, "cu128"), force=True
    )
    assert forced.refusals == plan.refusals  # --force cannot install what is not there


def test_an_unreadable_index_leaves_the_table_in_charge() -> None:
    broken = IndexListing("http://127.0.0.1:1/current/cu130", None, None, error="URLError: refused")
    plan = build_plan(host(), facts(), "cu130", version="2.11.0", index=broken)
    assert plan.ok
    assert plan.warnings[0].startswith("the index http://127.0.0.1:1/current/cu130 could not")
    untabled = build_plan(host(), facts(), "cu132", version="2.11.0", index=broken)
    assert untabled.refusals[0].reason.startswith("no cu132 build of torch 2.11 in the table")
    later = build_plan(host(), facts(), "cu130", version="2.16.0", index=broken)
    assert later.refusals[0].reason.startswith("torch 2.16 is not in the built-in")
    # cu129 came with 2.12.1, not 2.12.0: the table says so per release
    only = build_plan(host(), facts(), "cu129", version="2.12.0", index=broken)
    assert only.refusals[0].reason.startswith(
        "no cu129 build of torch 2.12.0 (only 2.12.1) in the table: cu126, cu129, cu130, cu132"
    )
    assert build_plan(host(), facts(), "cu129", version="2.12.1", index=broken).ok
    gone = IndexListing(
        "http://x/cu999",
        "cp311",
        "x86_64",
        {"torch": IndexPage("http://x/cu999/torch/", 404, "HTTP 404")},
    )
    plan = build_plan(host(), facts(), "cu999", version="2.13.0", index=gone)
    assert "http://127.0.0.1:1/current/cu999 has no torch (HTTP 404)" in plan.refusals[0].reason


def test_an_unreadable_index_is_said_in_words_with_what_the_table_decided() -> None:
    """The demo's swap plan showed Python's error ("URLError: <urlopen error [Errno 21] Is
    a directory: …>"): the plan says why in words and what the table decided."""
    raw = "URLError: <urlopen error [Errno 21] Is a directory: '/tmp/sim/index/whl/cu130/torch/'>"
    broken = IndexListing("file:///tmp/sim/index/whl/cu130", None, None, error=raw)
    plan = build_plan(host(), facts(), "cu130", version="2.11.0", index=broken)
    [warning] = [w for w in plan.warnings if "index" in w]
    assert "URLError" not in warning and "Errno" not in warning, warning
    assert "(it is a directory without an index.html), so the built-in table decides: " in warning
    assert "torch 2.11 has a cu130 build (CUDA 13.0" in warning, warning
    assert "driver" in warning and "or newer)" in warning
    assert index_problem_text("URLError: <urlopen error [Errno 111] Connection refused>") == (
        "connection refused"
    )
    assert index_problem_text("URLError: <urlopen error [Errno 99] odd thing>") == "odd thing"
    assert index_problem_text("HTTP 503") == "HTTP 503"
    assert table_verdict(None, "2.11", "cu132") == "it lists no cu132 build of torch 2.11"


def test_a_local_directory_index_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    """pip reads a file: URL of a directory as its index.html; the probe does the same
    (the demo's index is such a directory, and the probe failed on it)."""
    page = tmp_path / "cu130" / "torch"
    page.mkdir(parents=True)
    wheel = "torch-2.11.0+cu130-py3-none-any.whl"
    (page / "index.html").write_text(f'<a href="{wheel}">{wheel}</a>', encoding="utf-8")
    url = page.as_uri() + "/"
    assert on_disk(url) == url + "index.html"
    assert on_disk(page.as_uri()) == url + "index.html"
    assert on_disk("https://download.pytorch.org/whl/cu130/torch/") == (
        "https://download.pytorch.org/whl/cu130/torch/"
    )
    read = read_page(url, timeout=5)
    assert read["error"] is None and read["files"] == [wheel], read
    missing = read_page((tmp_path / "nothing").as_uri() + "/", timeout=5)
    assert missing["error"] and missing["files"] == []


def test_pep_691_json_pages() -> None:
    page = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [
            {"filename": "torch-2.13.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "x"},
            {
                "filename": "torch-2.12.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl",
                "yanked": "bad",
            },
        ],
    }
    files = files_of(json.dumps(page), "application/vnd.pypi.simple.v1+json")
    assert files == ["torch-2.13.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl"]
    wheel = "/whl/cu132/torch-2.12.0%2Bcu132-cp311-cp311-linux_x86_64.whl"
    html = f'<a href="{wheel}" data-yanked="">x</a>'
    assert files_of(html.replace(">x<", "><"), "text/html") == []  # yanked: left out
    assert files_of(
        '<a href="/whl/cu132/torch-2.12.0%2Bcu132-py3-none-any.whl#sha256=1"></a>', ""
    ) == ["torch-2.12.0+cu132-py3-none-any.whl"]
