"""The doctor's CUDA 12 fix from a real index: the index probe runs through the local
transport against a PEP 503 index served on 127.0.0.1 laid out as download.pytorch.org is
after torch 2.11 (2.12 built for cu126, not cu128; no cu129 page at all)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpumon.backends.config.load import HostConfig
from gpumon.backends.torchenv.doctor import cuda12_offers, evaluate
from gpumon.backends.transport.local import LocalTransport

from torch_index import IndexServer, Spec, build_index, matrix_files

pytestmark = pytest.mark.system


def _facts_below_580(offers: dict[str, object]) -> dict[str, object]:
    """torch 2.12.1+cu130 on a 570 driver and an RTX PRO 6000 (sm_120)."""
    gpus = [{"index": "0", "name": "RTX PRO 6000", "compute_cap": "12.0"}]
    return {
        "torch": {
            "installed": True,
            "version": "2.12.1+cu130",
            "version_py": {"version": "2.12.1+cu130", "cuda": "13.0", "hip": None},
        },
        "runtime": {"ok": True, "version": "2.12.1+cu130", "cuda": "13.0", "available": False},
        "gpu": {"smi": "ok", "gpus": gpus, "driver": "570.172.08"},
        "index_cuda12": offers,
    }


async def test_the_cuda12_fix_names_only_a_build_the_index_serves(tmp_path: Path) -> None:
    live = {
        "cu126": [Spec("2.12.1+cu126", "12.6", listed=matrix_files("torch", ["2.12.0"], "cu126"))],
        "cu128": [Spec("2.11.0+cu128", "12.8", listed=matrix_files("torch", ["2.10.0"], "cu128"))],
    }
    root = build_index(tmp_path / "index", {"live": live})
    with IndexServer(root) as server:
        host = HostConfig(
            name="box",
            kind="local",
            python=sys.executable,
            torch_index=f"{server.url}/live",
            kernel_log=False,
        )
        offers = await cuda12_offers(LocalTransport(host), host, sys.executable)
    assert offers == {
        "cu129": [],  # no page (404): none offered
        "cu128": ["2.10.0", "2.11.0"],
        "cu126": ["2.12.0", "2.12.1"],
    }
    checks = {c.name: c for c in evaluate(_facts_below_580(offers), host="box")}
    assert checks["driver"].fix == (
        "upgrade the driver to >= 580.95.05, or gpumon swap-torch box cu128 --version 2.11.0"
    )


async def test_an_index_that_cannot_be_read_is_said_not_guessed(tmp_path: Path) -> None:
    host = HostConfig(
        name="box",
        kind="local",
        python=sys.executable,
        torch_index="http://127.0.0.1:9/nothing",  # discard port: refused
        kernel_log=False,
    )
    offers = await cuda12_offers(LocalTransport(host), host, sys.executable)
    assert set(offers) == {"error"}
    fix = {c.name: c for c in evaluate(_facts_below_580(offers), host="box")}["driver"].fix
    # The built-in table knows 2.12.1's cu129 build (PyTorch's index listing,
    # tests/fixtures/upstream/torch-index): the fix may name it, but says where it came
    # from and that the index was not read, never as if the index had offered it.
    assert fix is not None
    assert fix.startswith("upgrade the driver to >= 580.95.05, or gpumon swap-torch box cu129")
    assert "(a build the built-in table knows; the index could not be read: " in fix
