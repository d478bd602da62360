"""Stand-in torch wheels and a local PEP 503 package index: the demo's simulated venv
(``sim.venv``) and the swap tests.

The wheels are pure Python, built with ``zipfile`` (METADATA, WHEEL, RECORD with sha256),
without dependencies: ``torch`` whose ``torch/version.py`` and ``torch.__version__`` say
which variant it is and whose ``torch.cuda`` reports no GPU, and a ``torchvision`` with the
same label. ``build_index`` lays them out as ``<root>/<base>/<variant>/<project>/index.html``
(pip reads it from a ``file://`` URL or over HTTP).
"""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TORCH_INIT = """\
# Stand-in torch for gpumon's tests.
from . import cuda, version

__version__ = {version!r}
"""

TORCH_VERSION = """\
from typing import Optional

__all__ = ["__version__", "cuda", "git_version", "hip"]
__version__ = {version!r}
git_version = "stand-in"
cuda: Optional[str] = {cuda!r}
hip: Optional[str] = None
"""

TORCH_CUDA = """\
def is_available():
    return False


def device_count():
    return 0


def get_arch_list():
    return {arch_list!r}


def get_device_capability(device=0):
    raise RuntimeError("no CUDA GPUs are available")
"""

# the demo's: the simulated CT200's eight SM120 GPUs, as torch would see them
TORCH_CUDA_SIM = """\
def is_available():
    return True


def device_count():
    return {gpus}


def get_arch_list():
    return {arch_list!r}


def get_device_capability(device=0):
    return (12, 0)
"""


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(dest: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """A py3-none-any wheel of ``files`` (path -> text) with proper dist-info."""
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    contents = dict(files)
    contents[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: stand-in\n"
    )
    contents[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: gpumon-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [
        f"{path},sha256={_digest(text.encode())},{len(text.encode())}"
        for path, text in contents.items()
    ]
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in contents.items():
            z.writestr(path, text)
    return wheel


def torch_wheel(
    dest: Path, version: str, cuda: str | None, arch_list: Iterable[str] = (), gpus: int = 0
) -> Path:
    """A stand-in ``torch`` whose version.py says ``cuda`` (which may contradict its label);
    with ``gpus``, its ``torch.cuda`` sees that many SM120 GPUs (the demo's)."""
    arch = list(arch_list)
    cuda_py = (
        TORCH_CUDA_SIM.format(gpus=gpus, arch_list=arch)
        if gpus
        else TORCH_CUDA.format(arch_list=arch)
    )
    files = {
        "torch/__init__.py": TORCH_INIT.format(version=version),
        "torch/version.py": TORCH_VERSION.format(version=version, cuda=cuda),
        "torch/cuda/__init__.py": cuda_py,
    }
    return build_wheel(dest, "torch", version, files)


def torchvision_wheel(dest: Path, version: str) -> Path:
    files = {"torchvision/__init__.py": f"__version__ = {version!r}\n"}
    return build_wheel(dest, "torchvision", version, files)


def broken_wheel(dest: Path, name: str, version: str) -> Path:
    """A file named like a wheel that is not a zip: pip fails to install it."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    wheel.write_bytes(b"this is not a zip archive\n" * 8)
    return wheel


def write_project_page(
    project_dir: Path, listed: Iterable[str] = (), *, absolute: bool = True
) -> None:
    """``index.html`` listing the wheels in ``project_dir`` the way download.pytorch.org's
    project pages do (PEP 503): ``<h1>Links for NAME</h1>``, then one
    ``<a href="/whl/VARIANT/FILE#sha256=...">FILE</a><br/>`` per wheel, the href absolute
    from the server's root with ``+`` quoted as ``%2B``, the text the plain file name.
    ``listed``: names of wheels the page lists that are not there (other releases, other
    interpreters and machines, for plan-time tests: never installed). ``absolute=False``:
    hrefs relative to the page, for an index read as ``file://`` (the demo's)."""
    root_path = "/" + "/".join(project_dir.parts[-3:-1])  # /<base>/<variant>
    links = []
    rows = [(w.name, hashlib.sha256(w.read_bytes()).hexdigest()) for w in project_dir.glob("*.whl")]
    rows += [(name, hashlib.sha256(name.encode()).hexdigest()) for name in listed]
    for name, sha in sorted(rows):
        where = f"{root_path}/{project_dir.name}/" if absolute else ""
        href = f"{where}{urllib.parse.quote(name)}#sha256={sha}"
        links.append(f'    <a href="{href}">{html.escape(name)}</a><br/>')
    head = ["<!DOCTYPE html>", "<html>", "  <body>", f"    <h1>Links for {project_dir.name}</h1>"]
    body = "\n".join([*head, *links, "  </body>", "</html>", ""])
    (project_dir / "index.html").write_text(body)


@dataclass(frozen=True)
class Spec:
    """What one variant directory of one index base serves."""

    torch: str  # "2.11.0+cu128"
    cuda: str | None  # what its version.py claims
    torchvision: str | None = None
    broken: bool = False  # the torch wheel is not a zip
    gpus: int = 0  # GPUs its torch.cuda sees (0: none)
    arch_list: tuple[str, ...] = ()
    listed: tuple[str, ...] = ()  # torch wheels the page names that are not there


def matrix_files(
    project: str, versions: Iterable[str], variant: str, pythons: Iterable[str] = ("310", "311")
) -> tuple[str, ...]:
    """Wheel names as download.pytorch.org spells them, for each version x interpreter,
    on x86_64 and aarch64 Linux: ``torch-2.13.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl``."""
    return tuple(
        f"{project}-{v}+{variant}-cp{py}-cp{py}-manylinux_2_28_{machine}.whl"
        for v in versions
        for py in pythons
        for machine in ("x86_64", "aarch64")
    )


def build_index(
    root: Path, bases: Mapping[str, Mapping[str, Iterable[Spec]]], *, absolute: bool = True
) -> Path:
    """``bases``: base name -> variant -> specs. Returns ``root``. ``absolute``: hrefs as
    download.pytorch.org writes them (from the server's root); False for a file:// index."""
    for base, variants in bases.items():
        for variant, specs in variants.items():
            vdir = root / base / variant
            for spec in specs:
                tdir = vdir / "torch"
                if spec.broken:
                    broken_wheel(tdir, "torch", spec.torch)
                else:
                    torch_wheel(tdir, spec.torch, spec.cuda, spec.arch_list, spec.gpus)
                if spec.torchvision:
                    torchvision_wheel(vdir / "torchvision", spec.torchvision)
            listed = [name for spec in specs for name in spec.listed]
            for project in vdir.iterdir():
                write_project_page(
                    project, listed if project.name == "torch" else (), absolute=absolute
                )
            names = sorted(p.name for p in vdir.iterdir() if p.is_dir())
            links = "".join(f'<a href="{n}/">{n}</a><br>' for n in names)
            (vdir / "index.html").write_text(f"<html><body>{links}</body></html>\n")
    return root


def standard_bases() -> dict[str, dict[str, list[Spec]]]:
    """good: torch + torchvision 2.11.0 for cu126, cu128 and cu130; badverify: its cu130 torch
    claims CUDA 12.8; badinstall: its cu130 torch wheel is not a zip."""
    cu128 = [Spec("2.11.0+cu128", "12.8", "0.26.0+cu128")]
    return {
        "good": {
            "cu126": [Spec("2.11.0+cu126", "12.6", "0.26.0+cu126")],
            "cu128": cu128,
            "cu130": [Spec("2.11.0+cu130", "13.0", "0.26.0+cu130")],
        },
        "badverify": {"cu128": cu128, "cu130": [Spec("2.11.0+cu130", "12.8", "0.26.0+cu130")]},
        "badinstall": {
            "cu128": cu128,
            "cu130": [Spec("2.11.0+cu130", "13.0", "0.26.0+cu130", broken=True)],
        },
    }


def release_bases() -> dict[str, dict[str, list[Spec]]]:
    """current: the index after 2.11 as issue 17 describes it: 2.12 and 2.13 are built for
    cu126/cu130/cu132, no longer for cu128. Installable stand-ins: 2.11.0 for cu128 and
    cu130, 2.13.0+cu132 with torchvision 0.28.0+cu132; every other release is only named on
    the page (real wheel names, two interpreters, two machines)."""
    older = ["2.9.0", "2.9.1", "2.10.0"]
    newer = ["2.12.0", "2.12.1"]
    return {
        "current": {
            "cu128": [
                Spec(
                    "2.11.0+cu128",
                    "12.8",
                    "0.26.0+cu128",
                    listed=matrix_files("torch", older, "cu128"),
                )
            ],
            "cu130": [
                Spec(
                    "2.11.0+cu130",
                    "13.0",
                    "0.26.0+cu130",
                    listed=matrix_files("torch", [*older, *newer, "2.13.0"], "cu130"),
                )
            ],
            "cu132": [
                Spec(
                    "2.13.0+cu132",
                    "13.2",
                    "0.28.0+cu132",
                    listed=matrix_files("torch", newer, "cu132"),
                )
            ],
        }
    }
