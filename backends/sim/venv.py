"""The demo's simulated venv: what ``d`` (doctor) reads and ``w`` (torch swap) changes.

A real virtual environment in the simulator's folder, made without pip (fast: no
ensurepip), with gpumon's own pip visible through a ``.pth`` file naming a folder that holds
only pip (so ``python -m pip`` works there and sees nothing else of gpumon's), and a
stand-in ``torch 2.11.0+cu128`` (and torchvision) installed from the simulator's local
PEP 503 index. ``torch_index`` is that index's ``file://`` base: the swap moves torch to
cu130 and back through pip, verified, as it would on CT200. gpumon's own environment is
never touched.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

from gpumon.backends.sim.torch_index import Spec, build_index

INSTALLED = "2.11.0+cu128"
ARCHS = ("sm_80", "sm_90", "sm_100", "sm_120")  # what torch 2.11's CUDA 12.8+ builds carry
VARIANTS = {
    "cu128": [Spec("2.11.0+cu128", "12.8", "0.26.0+cu128", gpus=8, arch_list=ARCHS)],
    "cu130": [Spec("2.11.0+cu130", "13.0", "0.26.0+cu130", gpus=8, arch_list=ARCHS)],
}


def make_venv(root: Path) -> tuple[str, str]:
    """Make the venv under ``root``: returns (its python, the ``torch_index`` base URL).
    Raises OSError or subprocess.CalledProcessError when it cannot be made."""
    index = build_index(root / "index", {"whl": VARIANTS}, absolute=False) / "whl"
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    _lend_pip(root / "pip-only", site)
    for wheel in sorted((index / "cu128").glob("*/*.whl")):
        _unpack(wheel, site)
    return str(python), index.as_uri()


def _lend_pip(folder: Path, site: Path) -> None:
    """Make gpumon's pip importable in the venv, and nothing else of gpumon's (without a
    pip here the swap's plan says it has neither uv nor pip)."""
    spec = importlib.util.find_spec("pip")  # found, not imported: pip is big
    if spec is None or spec.origin is None:
        return
    package = Path(spec.origin).parent
    folder.mkdir()
    (folder / "pip").symlink_to(package)
    for info in package.parent.glob("pip-*.dist-info"):
        (folder / info.name).symlink_to(info)
    (site / "gpumon-sim-pip.pth").write_text(f"{folder}\n")


def _unpack(wheel: Path, site: Path) -> None:
    """Install a pure-Python wheel the way pip does: its files, dist-info and RECORD into
    site-packages, so pip freezes and uninstalls it like any other."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
