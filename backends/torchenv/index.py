"""What a PyTorch wheel index serves, asked from the target at plan time.

The built-in table (``variants``) goes stale with every torch release; the index the
install will use does not. ``read_index`` runs ``remote.index_probe`` with the venv's
interpreter through the host's Transport (so from inside the container, through the
target's network) on ``<torch_index>/<variant>/<project>/`` for torch and the companions
installed; ``IndexListing.versions`` gives the releases there are for this variant, this
interpreter (``cp311``, ``py3``, ``abi3``) and this machine (``manylinux_*_x86_64``).

Wheel file names are PEP 427's ``name-version(-build)?-python-abi-platform.whl``; on
download.pytorch.org the version carries the variant as its local label
(``torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl``, the ``+`` quoted as ``%2B``
in hrefs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from gpumon.backends import untrusted
from gpumon.backends.config.load import HostConfig
from gpumon.backends.remote.bootstrap import program_argv
from gpumon.backends.transport.base import Transport, TransportError

from .variants import index_url, split_version

__all__ = [
    "IndexListing",
    "IndexPage",
    "Wheel",
    "read_index",
    "read_variants",
    "version_key",
    "wheel_of",
]

INDEX_TIMEOUT_S = 15.0
_VERSION_KEY = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class Wheel:
    name: str  # normalised: "torch"
    public: str  # "2.12.1"
    label: str | None  # "cu130"
    python: tuple[str, ...]  # "cp312"
    abi: tuple[str, ...]  # "cp312", "abi3", "none"
    platform: tuple[str, ...]  # "manylinux_2_28_x86_64", "any"

    def runs_on(self, python_tag: str | None, machine: str | None) -> bool:
        """Whether this interpreter (``cp311``) on this machine (``x86_64``) can use it;
        unknown interpreter or machine: no claim (True)."""
        return self._python_ok(python_tag) and self._platform_ok(machine)

    def _python_ok(self, tag: str | None) -> bool:
        if not tag:
            return True
        if tag in self.python or any(p in ("py3", "py2.py3") for p in self.python):
            return True
        if "abi3" in self.abi:  # cp39-abi3: CPython 3.9 and later
            mine = _cp_tuple(tag)
            return any(mine is not None and (_cp_tuple(p) or (99,)) <= mine for p in self.python)
        return False

    def _platform_ok(self, machine: str | None) -> bool:
        if "any" in self.platform or not machine:
            return True
        return any(p.endswith(machine) and "linux" in p for p in self.platform)


def _cp_tuple(tag: str) -> tuple[int, ...] | None:
    m = re.fullmatch(r"cp(\d)(\d+)", tag)
    return (int(m.group(1)), int(m.group(2))) if m else None


def wheel_of(filename: str) -> Wheel | None:
    """The parts of a wheel's file name; None for anything else (sdists, junk)."""
    name = unquote(filename.strip())
    if not name.endswith(".whl"):
        return None
    parts = name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return None
    version = parts[1]
    public, label = split_version(version)
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc|\.dev|\.post)[0-9]+)*", public):
        return None
    return Wheel(
        name=re.sub(r"[-_.]+", "-", parts[0]).lower(),
        public=public,
        label=label,
        python=tuple(parts[-3].split(".")),
        abi=tuple(parts[-2].split(".")),
        platform=tuple(parts[-1].split(".")),
    )


def version_key(version: str) -> tuple[int, ...]:
    """Numeric order of release numbers: 2.9.1 < 2.10.0 < 2.12.1."""
    return tuple(int(n) for n in _VERSION_KEY.findall(version.split("+")[0]))


@dataclass(frozen=True, slots=True)
class IndexPage:
    url: str
    status: int | None
    error: str | None
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class IndexListing:
    """What the variant's index said, per project. ``python_tag`` / ``machine``: the
    target's interpreter and machine, as the probe saw them."""

    index_url: str  # "<torch_index>/<variant>"
    python_tag: str | None
    machine: str | None
    pages: Mapping[str, IndexPage] = field(default_factory=dict)
    error: str | None = None  # the probe itself could not run

    def page(self, project: str) -> IndexPage | None:
        return self.pages.get(project)

    def problem(self, project: str) -> str | None:
        """Why ``project``'s page could not be read; None when it was."""
        if self.error:
            return self.error
        page = self.page(project)
        if page is None:
            return "not asked"
        return page.error

    def versions(self, project: str, variant: str) -> list[str] | None:
        """Release numbers of ``project`` built for ``variant`` that this interpreter and
        machine can install, oldest first; None when the page could not be read."""
        page = self.page(project)
        if self.error or page is None or page.error:
            return None
        found = set()
        for name in page.files:
            wheel = wheel_of(name)
            if wheel is None or wheel.name != project:
                continue
            if (wheel.label or "") != variant and not (variant == "cpu" and wheel.label is None):
                continue
            if wheel.runs_on(self.python_tag, self.machine):
                found.add(wheel.public)
        return sorted(found, key=version_key)

    def for_target(self) -> str:
        """``cp311 x86_64``: what the versions were filtered for."""
        return " ".join(p for p in (self.python_tag, self.machine) if p) or "this target"


def project_url(base: str, variant: str, project: str) -> str:
    """The PEP 503 project page: ``<torch_index>/<variant>/<project>/``."""
    return f"{index_url(base, variant)}/{project}/"


def parse_probe(index: str, raw: Any, projects: Sequence[str]) -> IndexListing:
    """The probe's JSON object, never trusted: wrong shapes become errors."""
    if not isinstance(raw, dict):
        return IndexListing(index, None, None, error="the index probe printed no object")
    pages: dict[str, IndexPage] = {}
    got = raw.get("pages")
    rows: list[Any] = got if isinstance(got, list) else []
    for project, row in zip(projects, rows, strict=False):
        if not isinstance(row, dict):
            continue
        status = row.get("status")
        listed = row.get("files")
        files: list[Any] = listed if isinstance(listed, list) else []
        pages[project] = IndexPage(
            url=str(row.get("url") or ""),
            status=status if isinstance(status, int) and not isinstance(status, bool) else None,
            error=None if row.get("error") is None else str(row.get("error")),
            files=tuple(str(f) for f in files),
        )
    tag, machine = raw.get("python_tag"), raw.get("machine")
    return IndexListing(
        index,
        str(tag) if isinstance(tag, str) and tag else None,
        str(machine) if isinstance(machine, str) and machine else None,
        pages,
    )


async def read_index(
    transport: Transport, host: HostConfig, python: str, variant: str, projects: Iterable[str]
) -> IndexListing:
    """Ask ``host.torch_index`` from the target which files it serves for ``variant``.
    Never raises: a probe that cannot run is the listing's ``error``."""
    names = list(dict.fromkeys(projects))
    index = index_url(host.torch_index, variant)
    raw, error = await _probe(
        transport, python, [project_url(host.torch_index, variant, p) for p in names]
    )
    if error is not None:
        return IndexListing(index, None, None, error=error)
    return parse_probe(index, raw, names)


async def read_variants(
    transport: Transport, host: HostConfig, python: str, variants: Iterable[str], project: str
) -> dict[str, IndexListing]:
    """``project``'s page under each of ``variants`` (one probe): variant -> listing.
    Never raises: a probe that cannot run is every listing's ``error``."""
    names = list(dict.fromkeys(variants))
    raw, error = await _probe(
        transport, python, [project_url(host.torch_index, v, project) for v in names]
    )
    if error is not None:
        return {
            v: IndexListing(index_url(host.torch_index, v), None, None, error=error) for v in names
        }
    by_variant = parse_probe(host.torch_index, raw, names)  # pages keyed by variant here
    out = {}
    for v in names:
        page = by_variant.page(v)
        pages = {project: page} if page is not None else {}
        out[v] = IndexListing(
            index_url(host.torch_index, v), by_variant.python_tag, by_variant.machine, pages
        )
    return out


async def _probe(transport: Transport, python: str, urls: list[str]) -> tuple[Any, str | None]:
    """Run ``remote.index_probe`` on ``urls``: (its JSON object, None) or (None, why not)."""
    options = {"urls": urls, "timeout": INDEX_TIMEOUT_S}
    argv, data = program_argv(python, "index_probe", args=[json.dumps(options)])
    limit = INDEX_TIMEOUT_S * (len(urls) + 1) + 30
    try:
        res = await transport.run(argv, input=data, timeout=limit)
    except TransportError as e:
        return None, str(e)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.exit_code != 0 or not lines:
        tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-2:]) or "no output"
        return None, f"the index probe failed: {tail}"
    try:
        return untrusted.loads(lines[-1]), None
    except ValueError as e:
        return None, f"unreadable index probe output ({e})"
