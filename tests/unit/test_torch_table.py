"""The wheel table (backends/torchenv/data/torch_variants.toml) against what the indexes and
the wheels said: tests/fixtures/upstream/torch-index/listing.json, written by
``scripts/capture-upstream torch-index`` (its README: the command, the day, and which
indexes could not be read). Every release PyPI serves from 2.9 on has its row, with the
CUDA its wheel requires as the PyPI default, its triton pin, and the arch list compiled into
it; a row the table calls verified is in the listing; an index the capture could read lists
exactly the table's rows for its variant."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from gpumon.backends.torchenv.index import version_key
from gpumon.backends.torchenv.variants import (
    VariantTable,
    builtin_table,
    series_of,
    table_archs,
)

LISTING = Path(__file__).parents[1] / "fixtures" / "upstream" / "torch-index" / "listing.json"


def listing() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(LISTING.read_text())
    return doc


def cuda_variant(requires: dict[str, str]) -> str:
    """The variant a wheel's requirements make it: ``cuda-toolkit==13.0.2`` -> cu130,
    ``nvidia-cuda-runtime-cu12==12.8.90`` -> cu128, neither -> cpu."""
    for name, spec in requires.items():
        if name == "cuda-toolkit" or name.startswith("nvidia-cuda-runtime"):
            major, minor = re.findall(r"[0-9]+", spec)[:2]
            return f"cu{major}{minor}"
    return "cpu"


def admits(spec: str | None, version: str) -> bool:
    """Whether a companion's torch requirement (``==2.12.1``, ``>=2.14.0``, none) admits
    ``version``."""
    if not spec:
        return True
    op, bound = re.fullmatch(r"(==|>=)\s*(\S+)", spec.strip()).groups()  # type: ignore[union-attr]
    return version == bound if op == "==" else version_key(version) >= version_key(bound)


def disagreements(table: VariantTable, doc: dict[str, Any]) -> list[str]:
    """Every way the table and the listing disagree, in words (empty: none)."""
    out: list[str] = []
    pypi: dict[str, Any] = doc["pypi"]
    oldest = doc["oldest"]
    listed = set(pypi)
    tabled = {r.torch for r in table.releases if version_key(r.torch) >= version_key(oldest)}
    out += [f"PyPI has torch {v}, the table has no release row" for v in listed - tabled]
    out += [f"the table has torch {v}, PyPI does not" for v in tabled - listed]
    defaults: dict[str, set[str]] = {}
    for version, wheel in pypi.items():
        release = table.release(version)
        if release is None or "requires" not in wheel:
            continue
        default = cuda_variant(wheel["requires"])
        series = series_of(version) or ""
        defaults.setdefault(series, set()).add(default)
        if release.pypi_default_variant != default:
            out.append(
                f"{version}: PyPI's wheel is {default}, the table says "
                f"{release.pypi_default_variant}"
            )
        pin = wheel["requires"].get("triton", "")
        if (release.triton or "") != pin.removeprefix("=="):
            out.append(f"{version}: the wheel pins triton {pin}, the table says {release.triton}")
        row = table.variant(series, default)
        if row is None:
            out.append(f"{version}: no {default} row for PyPI's build")
            continue
        if not row.pypi_default or row.status != "verified":
            out.append(f"{version}: the {default} row is PyPI's build, verified by the listing")
        toolkit = wheel["requires"].get("cuda-toolkit")
        if toolkit and row.cuda_full != toolkit.removeprefix("=="):
            out.append(
                f"{version}: the wheel needs cuda-toolkit {toolkit}, the row says {row.cuda_full}"
            )
        if "archs" in wheel and (row.archs_from != "wheel" or table_archs(row) != wheel["archs"]):
            out.append(
                f"{version}: the wheel carries {wheel['archs']}, the row says "
                f"{table_archs(row)} ({row.archs_from})"
            )
    index_rows = _index_rows(doc)
    for row in table.variants:
        if row.pypi_default and row.name not in defaults.get(row.series, set()):
            out.append(
                f"{row.series} {row.name}: marked PyPI's default, PyPI's is "
                f"{sorted(defaults.get(row.series, set()))}"
            )
        confirmed = (
            row.name in defaults.get(row.series, set()) or (row.series, row.name) in index_rows
        )
        if row.status == "verified" and not confirmed:
            out.append(f"{row.series} {row.name}: verified, but not in the listing")
    for variant, index in doc["indexes"].items():
        if index["error"]:
            continue  # nothing read: nothing confirmed or denied
        served = {(series_of(v) or "", v) for v in index["versions"]}
        for series, version in served:
            if table.built(version, variant) is None and series in table.series():
                out.append(f"{variant} serves torch {version}, the table has no such row")
        for row in table.variants:
            releases = [r.torch for r in table.releases if series_of(r.torch) == row.series]
            for version in row.versions or releases:
                if row.name == variant and (row.series, version) not in served:
                    out.append(f"the table has {version}+{variant}, {variant}'s index does not")
    for key, wheel in doc["index_builds"].items():
        public, _, variant = key.partition("+")
        row = table.built(public, variant)
        if row is not None and "archs" in wheel and table_archs(row) != wheel["archs"]:
            out.append(
                f"{key}: the wheel carries {wheel['archs']}, the row says {table_archs(row)}"
            )
    out += _companion_disagreements(table, doc)
    return out


def _index_rows(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (series_of(v) or "", variant)
        for variant, index in doc["indexes"].items()
        if not index["error"]
        for v in index["versions"]
    }


def _companion_disagreements(table: VariantTable, doc: dict[str, Any]) -> list[str]:
    """A companion named for a torch release admits it and came out the same day; none is
    named only when none came out with it."""
    out = []
    for release in table.releases:
        uploaded = doc["pypi"].get(release.torch, {}).get("uploaded")
        if uploaded is None:
            continue
        for name in ("torchvision", "torchaudio"):
            rows = doc["companions"][name]["releases"]
            with_it = sorted(
                (
                    v
                    for v, r in rows.items()
                    if r.get("uploaded") == uploaded and admits(r.get("torch"), release.torch)
                ),
                key=version_key,
            )
            named = getattr(release, name)
            if named is None and with_it:
                out.append(
                    f"{release.torch}: {name} {with_it[-1]} came with it, the table has none"
                )
            elif named is not None and named not in with_it:
                out.append(f"{release.torch}: the table pairs {name} {named}, PyPI: {with_it}")
    return out


def test_the_table_agrees_with_the_stored_listing() -> None:
    doc = listing()
    assert doc["read"] and doc["pypi"], "an empty listing checks nothing"
    assert disagreements(builtin_table(), doc) == []


def test_the_listing_holds_what_the_audit_found() -> None:
    """Issue 33 point 7 against the wheels themselves: 2.12.1+cu130 (PyPI's) has SASS for
    sm_75 to sm_120 and no PTX; PyPI's default stays CUDA 13.0 through 2.14.1 (cuda-toolkit
    13.0.3) and is CUDA 13.2 from 2.15.0 (13.2.2), not from 2.14 as the audit said."""
    pypi = listing()["pypi"]
    assert pypi["2.12.1"]["archs"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert [cuda_variant(pypi[v]["requires"]) for v in ("2.14.0", "2.14.1", "2.15.0")] == [
        "cu130",
        "cu130",
        "cu132",
    ]
    table = builtin_table()
    row = table.variant("2.12", "cu130")
    assert row is not None and row.ptx == () and row.archs_from == "wheel"


def test_a_listing_that_disagrees_fails() -> None:
    """The comparison can fail: each of these listings, one change from the stored one,
    gives its disagreement."""
    table = builtin_table()
    base = listing()

    def changed(edit: Any) -> list[str]:
        doc = copy.deepcopy(base)
        edit(doc)
        return disagreements(table, doc)

    def newer_default(doc: dict[str, Any]) -> None:
        doc["pypi"]["2.14.1"]["requires"]["cuda-toolkit"] = "==13.2.2"

    def ptx(doc: dict[str, Any]) -> None:
        doc["pypi"]["2.12.1"]["archs"].append("compute_120")

    def new_release(doc: dict[str, Any]) -> None:
        doc["pypi"]["2.15.1"] = {**doc["pypi"]["2.15.0"], "uploaded": "2026-12-01"}

    def cu129_index(doc: dict[str, Any]) -> None:
        doc["indexes"]["cu129"] = {"url": "x", "error": None, "versions": ["2.12.0", "2.12.1"]}

    def vision(doc: dict[str, Any]) -> None:
        doc["companions"]["torchvision"]["releases"]["0.28.0"]["uploaded"] = "2026-07-09"

    assert changed(newer_default)[0] == "2.14.1: PyPI's wheel is cu132, the table says cu130"
    assert any("2.12.1: the wheel carries" in d for d in changed(ptx))
    assert "PyPI has torch 2.15.1, the table has no release row" in changed(new_release)
    cu129 = changed(cu129_index)
    assert "cu129 serves torch 2.12.0, the table has no such row" in cu129
    assert "the table has 2.9.0+cu129, cu129's index does not" in cu129
    assert changed(vision) == ["2.13.0: the table pairs torchvision 0.28.0, PyPI: []"]
