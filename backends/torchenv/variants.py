"""The built-in table of PyTorch CUDA wheel variants (``data/torch_variants.toml``, held
against what the indexes and the wheels say by tests/unit/test_torch_table.py) and the rules
read from it: which variants exist for a torch release, their driver floors, whether they
carry code for a GPU's compute capability, and the torchvision/torchaudio versions paired
with each torch release.

Pure functions over strings; no I/O except loading the table.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

# The variants offered to choose from (the dashboard's list); swap-torch accepts any cuNNN
# the host's index serves (swap_plan.variant_ok), these are only the usual ones.
VARIANT_NAMES = ("cu126", "cu128", "cu129", "cu130", "cu132", "cpu")
COMPANIONS = ("torchvision", "torchaudio")


@dataclass(frozen=True, slots=True)
class Variant:
    """One ``[[variant]]`` row: a torch series built for one CUDA (or the CPU)."""

    series: str  # "2.11"
    name: str  # "cu130"
    index_url: str
    local_tag: str  # "+cu130"
    cuda_full: str | None = None  # "13.0.2"; None for cpu
    min_driver: str | None = None  # recommended floor
    min_driver_compat: str | None = None  # hard floor (minor-version compatibility)
    pypi_default: bool = False
    status: str = "verified"  # "verified", "matrix", "observed" (the TOML's header)
    versions: tuple[str, ...] | None = None  # the series' releases built, when not all
    sass: tuple[str, ...] | None = None  # compute capabilities with cubins: "12.0"; None: unknown
    ptx: tuple[str, ...] = ()  # compute capabilities with PTX
    archs_from: str | None = None  # "wheel" (read from it), "build script" (unverified)

    @property
    def cuda(self) -> str | None:
        """``torch.version.cuda`` of this build: "13.0", "12.8"; None for cpu."""
        return variant_cuda(self.name)


@dataclass(frozen=True, slots=True)
class Release:
    """One ``[[release]]`` row: the companions released with a torch version."""

    torch: str
    torchvision: str | None
    torchaudio: str | None
    triton: str | None
    pypi_default_variant: str | None


@dataclass(frozen=True, slots=True)
class VariantTable:
    variants: tuple[Variant, ...]
    releases: tuple[Release, ...]

    def variant(self, series: str, name: str) -> Variant | None:
        return next((v for v in self.variants if v.series == series and v.name == name), None)

    def built(self, version: str, name: str) -> Variant | None:
        """The row of ``name`` for torch ``version`` ("2.12.1"), None when that release was
        not built for it (cu129 came with 2.12.1, not 2.12.0)."""
        row = self.variant(series_of(version) or "", name)
        public = split_version(version)[0]
        return None if row is None or (row.versions and public not in row.versions) else row

    def names(self, series: str) -> list[str]:
        return [v.name for v in self.variants if v.series == series]

    def series(self) -> list[str]:
        return list(dict.fromkeys(v.series for v in self.variants))

    def release(self, torch_version: str) -> Release | None:
        public = split_version(torch_version)[0]
        return next((r for r in self.releases if r.torch == public), None)


def _opt(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    return None if value is None else str(value)


def _list(row: dict[str, Any], key: str) -> tuple[str, ...] | None:
    value = row.get(key)
    return None if value is None else tuple(str(v) for v in value)


def parse_table(text: str) -> VariantTable:
    """The table from TOML text (raises ValueError on a row without its required keys)."""
    doc = tomllib.loads(text)
    try:
        variants = tuple(
            Variant(
                series=str(row["torch_series"]),
                name=str(row["variant"]),
                index_url=str(row["index_url"]),
                local_tag=str(row["local_tag"]),
                cuda_full=_opt(row, "cuda_full"),
                min_driver=_opt(row, "min_driver"),
                min_driver_compat=_opt(row, "min_driver_compat"),
                pypi_default=bool(row.get("pypi_default", False)),
                status=str(row.get("status", "verified")),
                versions=_list(row, "versions"),
                sass=_list(row, "sass"),
                ptx=_list(row, "ptx") or (),
                archs_from=_opt(row, "archs_from"),
            )
            for row in doc.get("variant", [])
        )
        releases = tuple(
            Release(
                torch=str(row["torch"]),
                torchvision=_opt(row, "torchvision"),
                torchaudio=_opt(row, "torchaudio"),
                triton=_opt(row, "triton"),
                pypi_default_variant=_opt(row, "pypi_default_variant"),
            )
            for row in doc.get("release", [])
        )
    except KeyError as e:
        raise ValueError(f"variants table: a row lacks {e.args[0]!r}") from None
    return VariantTable(variants, releases)


DATA_NAME = "torch_variants.toml"


@functools.cache
def builtin_table() -> VariantTable:
    """The table shipped as package data (``data/torch_variants.toml``). An editable install
    whose link tree predates the data file falls back to the module's real directory."""
    resource = resources.files(__package__) / "data" / DATA_NAME
    if resource.is_file():
        return parse_table(resource.read_text("utf-8"))
    return parse_table((Path(__file__).resolve().parent / "data" / DATA_NAME).read_text("utf-8"))


# --- versions and labels ---------------------------------------------------------------

_VERSION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)*)([^+\s]*)(?:\+([A-Za-z0-9.]+))?\s*")


def split_version(version: str) -> tuple[str, str | None]:
    """``"2.11.0+cu130"`` -> ``("2.11.0", "cu130")``; no label -> ``(version, None)``."""
    public, _, local = version.strip().partition("+")
    return public, (local or None)


def series_of(version: str) -> str | None:
    """``"2.11.0+cu130"`` -> ``"2.11"``; None when it is not a version."""
    m = _VERSION.fullmatch(version)
    if m is None:
        return None
    parts = m.group(1).split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def variant_cuda(name: str | None) -> str | None:
    """``"cu130"`` -> ``"13.0"``, ``"cu128"`` -> ``"12.8"``; cpu/unknown -> None."""
    m = re.fullmatch(r"cu([0-9]{2,3})", name or "")
    if m is None:
        return None
    digits = m.group(1)
    return f"{int(digits[:-1])}.{digits[-1]}"


def cuda_major(cuda: str | None) -> int | None:
    """``"13.0"`` -> 13; None stays None."""
    if not cuda:
        return None
    head = cuda.split(".")[0]
    return int(head) if head.isdigit() else None


def variant_from(version: str | None, cuda: str | None, hip: str | None = None) -> str | None:
    """The variant a build is: its local label when it has one (``cu130``, ``cpu``), else
    derived from ``torch.version.cuda`` (a PyPI wheel carries no label): ``"13.0"`` ->
    ``cu130``; no CUDA and no HIP -> ``cpu``; a ROCm build -> None."""
    label = split_version(version)[1] if version else None
    if label:
        return label
    if cuda:
        major, _, minor = cuda.partition(".")
        return f"cu{major}{(minor or '0')[:1]}"
    if hip:
        return None
    return "cpu" if version else None


def index_url(base: str, variant: str) -> str:
    """The PEP 503 index for ``variant`` under the host's ``torch_index`` base URL."""
    return f"{base.rstrip('/')}/{variant}"


# --- drivers and compute capabilities --------------------------------------------------


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``"580.95.05"`` -> ``(580, 95, 5)``; None when it has no leading number."""
    if not text:
        return None
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def driver_at_least(driver: str, floor: str) -> bool:
    d, f = version_tuple(driver), version_tuple(floor)
    if d is None or f is None:
        return True  # unknown: no claim
    width = max(len(d), len(f))
    return d + (0,) * (width - len(d)) >= f + (0,) * (width - len(f))


def sm_name(cc: str) -> str:
    """``"12.0"`` -> ``"sm_120"``."""
    major, _, minor = cc.partition(".")
    return f"sm_{major}{minor or '0'}"


def _cc_tuple(cc: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*([0-9]+)\.([0-9]+)\s*", cc)
    return (int(m.group(1)), int(m.group(2))) if m else None


_ARCH = re.compile(r"(sm|compute)_([0-9]+)([0-9])([af]?)")


def arch_covers(arch_list: Iterable[str], cc: str) -> bool:
    """Whether code in ``arch_list`` (``sm_120``, ``sm_90a``, ``compute_120`` ...) runs on a
    GPU of compute capability ``cc`` ("12.0"): a cubin for the same major with a minor not
    above the GPU's ("a" cubins only on exactly that capability), or PTX at or below it."""
    want = _cc_tuple(cc)
    if want is None:
        return False
    for arch in arch_list:
        m = _ARCH.fullmatch(arch.strip())
        if m is None:
            continue
        kind, major, minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "sm":
            if suffix == "a" and (major, minor) == want:
                return True
            if suffix != "a" and major == want[0] and minor <= want[1]:
                return True
        elif suffix != "a" and (major, minor) <= want:
            return True
    return False


def table_archs(row: Variant) -> list[str] | None:
    """The arch list of a row (``sm_75 ... compute_120``, as torch.cuda.get_arch_list()
    says it); None when the table does not know it."""
    if row.sass is None:
        return None
    return [sm_name(cc) for cc in row.sass] + ["compute_" + sm_name(cc)[3:] for cc in row.ptx]


def table_covers(variant: Variant, cc: str) -> bool | None:
    """Whether ``variant`` can run on capability ``cc``; None when the table does not say
    (a CPU build, or a row without an arch list)."""
    if variant.cuda is None:
        return None
    archs = table_archs(variant)
    return None if archs is None else arch_covers(archs, cc)


def gpu_compute_caps(gpus: Sequence[dict[str, Any]]) -> list[str]:
    """The distinct compute capabilities of ``gpus`` (probe rows), in order."""
    caps = [str(g.get("compute_cap") or "").strip() for g in gpus]
    return list(dict.fromkeys(c for c in caps if _cc_tuple(c) is not None))
