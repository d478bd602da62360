"""The doctor: checks from fact dicts (every status path) and the probe's own readers. The
probe run for real (its bootstrap, /proc, a real CPU torch) is tests/system/test_doctor_probe.py."""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.remote import doctor_probe, doctor_probe_fs
from gpumon.backends.sim.doctor import simulated_facts, simulated_probe_output
from gpumon.backends.torchenv import (
    STATUSES,
    DoctorReport,
    arch_covers,
    builtin_table,
    driver_at_least,
    evaluate,
    format_report,
    series_of,
    table_covers,
    variant_cuda,
    variant_from,
)
from gpumon.backends.torchenv.checks import CUDA12_VARIANTS, Check

ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
SITE = "/root/venv/lib/python3.12/site-packages"


def ct200() -> dict[str, Any]:
    """Facts of a healthy CT200 on torch 2.11.0+cu130 (what the probe would print)."""
    gpus = [
        {"index": str(i), "name": GPU, "compute_cap": "12.0", "driver": "580.95.05"}
        for i in range(8)
    ]
    return {
        "probe": 1,
        "errors": {},
        "python": {
            "executable": "/root/venv/bin/python",
            "version": "3.12.3",
            "prefix": "/root/venv",
            "is_venv": True,
            "purelib": SITE,
            "pip": False,
            "uv": "/root/.local/bin/uv",
            "user": "root",
        },
        "dists": {
            "torch": {"name": "torch", "version": "2.11.0+cu130"},
            "torchvision": {"name": "torchvision", "version": "0.26.0+cu130"},
            "sglang-kernel": {"name": "sglang-kernel", "version": "0.4.2.post2+cu130"},
        },
        "nvidia": [
            {"name": "nvidia-cudnn-cu13", "version": "9.19.0.56", "major": 13, "shared": True},
            {"name": "nvidia-cuda-nvcc", "version": "13.0.88", "major": 13, "shared": False},
        ],
        "torch": {
            "installed": True,
            "version": "2.11.0+cu130",
            "version_py": {"version": "2.11.0+cu130", "cuda": "13.0", "hip": None},
        },
        "runtime": {
            "ok": True,
            "version": "2.11.0+cu130",
            "cuda": "13.0",
            "available": True,
            "device_count": 8,
            "arch_list": ARCHS,
            "import_s": 2.5,
            "torchvision": {"ok": True, "version": "0.26.0+cu130"},
            "torchaudio": {"ok": False, "missing": True, "error": "No module named 'torchaudio'"},
            "warnings": [],
        },
        "gpu": {
            "smi": "ok",
            "gpus": gpus,
            "driver": "580.95.05",
            "driver_source": "/proc",
            "driver_proc": "580.95.05",
            "driver_smi": "580.95.05",
            "libcuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
        },
        "extras": {
            "env": {"CUDA_HOME": f"{SITE}/nvidia/cu13", "CUDA_VISIBLE_DEVICES": None},
            "sgl_kernel": {
                "installed": True,
                "import_ok": True,
                "libs": [
                    {"path": f"{SITE}/sgl_kernel/sm100/common_ops.abi3.so", "archs": ["sm_120a"]},
                    {"path": f"{SITE}/sgl_kernel/sm90/flash_ops.abi3.so", "archs": ["sm_90a"]},
                ],
            },
            "nvcc": {
                "venv": [f"{SITE}/nvidia/cu13/bin/nvcc"],
                "versions": {f"{SITE}/nvidia/cu13/bin/nvcc": "13.0"},
            },
            "cuda_home": {"path": f"{SITE}/nvidia/cu13", "nvcc": True, "default_nvcc": False},
            "nvrtc": {"loaded": {"libnvrtc.so.13": True}, "files": []},
        },
        "caches": [
            {
                "name": "inductor",
                "path": "/root/.cache/ti",
                "env": "TORCHINDUCTOR_CACHE_DIR",
                "exists": True,
                "bytes": 353 << 20,
                "files": 1200,
            },
            {"name": "triton", "path": "/root/.cache/ti/triton", "exists": False},
            {"name": "flashinfer", "path": "/root/.cache/flashinfer", "exists": False},
        ],
        "disk": [{"path": "/root/venv", "free": 400 << 30, "total": 900 << 30}],
        "procs": [],
    }


def by_name(facts: dict[str, Any]) -> dict[str, Check]:
    return {c.name: c for c in evaluate(facts, host="ct200")}


def test_healthy_ct200_has_no_problem_and_every_status_is_known() -> None:
    checks = evaluate(ct200(), host="ct200")
    bad = [c for c in checks if c.status in ("problem", "warning")]
    assert bad == []
    assert {c.status for c in checks} <= set(STATUSES)
    names = [c.name for c in checks]
    assert len(names) == len(set(names))
    for name in ("torch", "torch.version.cuda", "cuda available", "arch list", "driver"):
        assert by_name(ct200())[name].status == "ok", name
    report = DoctorReport("ct200", "/root/venv/bin/python", tuple(checks))
    assert report.exit_code == 0
    data = report.to_json()
    assert set(data) == {"host", "python", "checks"}
    assert set(data["checks"][0]) == {"name", "status", "evidence", "fix"}


Mut = Callable[[dict[str, Any]], object]


def _rt(**kw: Any) -> Mut:
    return lambda d: d["runtime"].update(kw)


def _gpu(**kw: Any) -> Mut:
    return lambda d: d["gpu"].update(kw)


def _no_smi(d: dict[str, Any]) -> None:
    d["gpu"].update(smi="missing", gpus=[], driver=None, driver_smi=None, driver_proc=None)


def _smi_error(d: dict[str, Any]) -> None:
    d["gpu"].update(smi="error", gpus=[], error="Failed to initialize NVML")


def _cpu(d: dict[str, Any]) -> None:
    d["torch"].update(version="2.11.0+cpu", version_py={"version": "2.11.0+cpu", "cuda": None})
    d["runtime"].update(version="2.11.0+cpu", cuda=None, available=False, arch_list=[])
    d["dists"]["torch"]["version"] = "2.11.0+cpu"
    d["dists"]["torchvision"]["version"] = "0.26.0+cpu"


def _variant(label: str, cuda: str, archs: list[str], version: str = "2.11.0") -> Mut:
    def mutate(d: dict[str, Any]) -> None:
        v = f"{version}+{label}"
        d["torch"].update(version=v, version_py={"version": v, "cuda": cuda})
        d["runtime"].update(version=v, cuda=cuda, arch_list=archs)
        d["dists"]["torch"]["version"] = v
        d["dists"]["torchvision"]["version"] = f"0.26.0+{label}"

    return mutate


def _all(*fns: Mut) -> Mut:
    return lambda d: [fn(d) for fn in fns]


def _set(path: str, value: Any) -> Mut:
    def mutate(d: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node = d
        for key in head:
            node = node[key]
        node[last] = value

    return mutate


def _not_installed(d: dict[str, Any]) -> None:
    d["torch"] = {"installed": False}
    d["runtime"] = {"ok": False, "error": "ModuleNotFoundError: No module named 'torch'"}


def _nv(*rows: tuple[str, int, bool]) -> Mut:
    return _set(
        "nvidia", [{"name": n, "version": "1", "major": m, "shared": s} for n, m, s in rows]
    )


SGL_ABI = (
    "ImportError: [sgl_kernel] CRITICAL: Could not load any common_ops library!\n"
    " - ImportError: /x/sgl_kernel/sm100/common_ops.abi3.so: "
    "undefined symbol: _ZNK3c106SymInt6sym_neERKS0_"
)

CASES: list[tuple[str, Mut, str, str, str]] = [
    # (id, mutation, check, status, evidence contains)
    (
        "py-not-venv",
        _set("python.is_venv", False),
        "python",
        "warning",
        "not a virtual environment",
    ),
    ("gpus-missing", _no_smi, "gpus", "n/a", "nvidia-smi not found"),
    ("gpus-error", _smi_error, "gpus", "problem", "Failed to initialize NVML"),
    ("gpus-ok", lambda d: None, "gpus", "ok", "8 x NVIDIA RTX PRO 6000"),
    ("torch-missing", _not_installed, "torch", "problem", "not installed"),
    ("torch-no-version-py", _set("torch.version_py", None), "torch", "warning", "unreadable"),
    ("torch-half", _set("torch.version_py.version", "2.11.0+cu128"), "torch", "problem", "half"),
    (
        "torch-pypi",
        _all(
            _set("torch.version", "2.11.0"),
            _set("torch.version_py.version", "2.11.0"),
            _rt(version="2.11.0"),
        ),
        "torch",
        "ok",
        "PyPI build, cu130",
    ),
    ("import-na", _not_installed, "torch import", "n/a", "not installed"),
    (
        "import-timeout",
        _rt(ok=False, timed_out=True, error="import torch took over 90s"),
        "torch import",
        "problem",
        "90s",
    ),
    (
        "import-error",
        _rt(ok=False, error="Traceback\nOSError: libcudnn.so.9: cannot open"),
        "torch import",
        "problem",
        "libcudnn.so.9",
    ),
    ("import-shadow", _rt(version="2.9.1+cu128"), "torch import", "problem", "shadows"),
    ("import-ok", lambda d: None, "torch import", "ok", "imported in 2.5 s"),
    ("cuda-na", _not_installed, "torch.version.cuda", "n/a", "not installed"),
    (
        "cuda-mismatch",
        _rt(cuda="12.8"),
        "torch.version.cuda",
        "problem",
        "torch/version.py says '13.0'",
    ),
    ("cuda-cpu-with-gpu", _cpu, "torch.version.cuda", "problem", "CPU build on a machine with 8"),
    ("cuda-cpu-no-gpu", _all(_cpu, _no_smi), "torch.version.cuda", "ok", "CPU build"),
    (
        "cuda-rocm",
        _all(_cpu, _set("torch.version_py.hip", "6.2")),
        "torch.version.cuda",
        "ok",
        "ROCm",
    ),
    (
        "cuda-label",
        _variant("cu130", "12.8", ARCHS),
        "torch.version.cuda",
        "problem",
        "labelled +cu130",
    ),
    (
        "cuda-static",
        _rt(ok=False, error="boom"),
        "torch.version.cuda",
        "ok",
        "from torch/version.py",
    ),
    ("avail-no-import", _rt(ok=False, error="boom"), "cuda available", "n/a", "did not import"),
    ("avail-cpu", _cpu, "cuda available", "n/a", "CPU build"),
    ("avail-ok", lambda d: None, "cuda available", "ok", "True"),
    ("avail-gpu", _rt(available=False), "cuda available", "problem", "nvidia-smi lists 8"),
    ("avail-nogpu", _all(_rt(available=False), _no_smi), "cuda available", "n/a", "no NVIDIA GPU"),
    (
        "avail-smierr",
        _all(_rt(available=False), _smi_error),
        "cuda available",
        "problem",
        "nvidia-smi failed",
    ),
    ("count-nogpu", _no_smi, "device count", "n/a", "nvidia-smi not found"),
    ("count-unavail", _rt(available=False), "device count", "n/a", "not available"),
    ("count-ok", lambda d: None, "device count", "ok", "8 (nvidia-smi: 8)"),
    (
        "count-visible",
        _all(_rt(device_count=2), _set("extras.env.CUDA_VISIBLE_DEVICES", "0,1")),
        "device count",
        "ok",
        "CUDA_VISIBLE_DEVICES=0,1",
    ),
    ("count-short", _rt(device_count=4), "device count", "warning", "torch sees 4"),
    ("arch-nogpu", _no_smi, "arch list", "n/a", "nvidia-smi"),
    ("arch-cpu", _cpu, "arch list", "n/a", "not a CUDA build"),
    ("arch-ok", lambda d: None, "arch list", "ok", "sm_120 covered"),
    ("arch-missing", _rt(arch_list=ARCHS[:-1]), "arch list", "problem", "no code for sm_120"),
    (
        "arch-table-cu126",
        _all(_variant("cu126", "12.6", []), _rt(available=False)),
        "arch list",
        "problem",
        "per the variants table",
    ),
    (
        "arch-table-cu128",
        _all(_variant("cu128", "12.8", []), _rt(available=False)),
        "arch list",
        "ok",
        "cu128 covers sm_120",
    ),
    (
        "arch-table-unknown",
        _variant("cu130", "13.0", [], "2.16.0"),  # a release after the table's
        "arch list",
        "n/a",
        "does not say",
    ),
    ("driver-cpu", _cpu, "driver", "n/a", "not a CUDA build"),
    ("driver-none", _gpu(driver=None), "driver", "n/a", "no NVIDIA driver"),
    ("driver-old", _gpu(driver="575.57.08"), "driver", "problem", "below 580"),
    ("driver-soft", _gpu(driver="580.65.06"), "driver", "warning", "below 580.95.05"),
    ("driver-ok", lambda d: None, "driver", "ok", "580.95.05 (/proc) >= 580.95.05 for cu130"),
    ("driver-cu128", _variant("cu128", "12.8", ARCHS), "driver", "ok", "for cu128"),
    ("us-na", _all(_no_smi, _gpu(libcuda=None)), "driver userspace", "n/a", "fewer than two"),
    (
        "us-mismatch",
        _gpu(libcuda="/usr/lib/x86_64-linux-gnu/libcuda.so.575.57.08"),
        "driver userspace",
        "problem",
        "libcuda 575.57.08",
    ),
    ("us-ok", lambda d: None, "driver userspace", "ok", "kernel module 580.95.05"),
    ("tv-na", lambda d: d["dists"].pop("torchvision"), "torchvision", "n/a", "not installed"),
    ("tv-no-torch", _not_installed, "torchvision", "warning", "without torch"),
    (
        "tv-import",
        _rt(
            torchvision={
                "ok": False,
                "error": "RuntimeError: Detected that PyTorch and torchvision were "
                "compiled with different CUDA major versions",
            }
        ),
        "torchvision",
        "problem",
        "different CUDA major",
    ),
    (
        "tv-label",
        _set("dists.torchvision.version", "0.26.0+cu128"),
        "torchvision",
        "problem",
        "but torch is 2.11.0+cu130",
    ),
    (
        "tv-pair",
        _set("dists.torchvision.version", "0.25.0+cu130"),
        "torchvision",
        "problem",
        "pairs with torchvision 0.26.0",
    ),
    ("tv-ok", lambda d: None, "torchvision", "ok", "matches torch"),
    ("ta-na", lambda d: None, "torchaudio", "n/a", "not installed"),
    ("nv-none", _set("nvidia", []), "nvidia packages", "n/a", "no nvidia-*"),
    (
        "nv-mixed",
        _nv(
            ("nvidia-cudnn-cu13", 13, True),
            ("nvidia-cudnn-cu12", 12, True),
            ("nvidia-nccl-cu12", 12, True),
        ),
        "nvidia packages",
        "problem",
        "mixed CUDA majors",
    ),
    (
        "nv-wrong",
        _nv(("nvidia-cudnn-cu12", 12, True)),
        "nvidia packages",
        "problem",
        "runtime set is CUDA 12",
    ),
    (
        "nv-cpu-mixed",
        _all(_cpu, _nv(("a-cu13", 13, False), ("b-cu12", 12, False))),
        "nvidia packages",
        "warning",
        "not a CUDA build",
    ),
    ("nv-ok", lambda d: None, "nvidia packages", "ok", "CUDA 13: 2 packages"),
    (
        "sgl-na",
        _set("extras.sgl_kernel", {"installed": False}),
        "sgl_kernel",
        "n/a",
        "not installed",
    ),
    ("sgl-ok", lambda d: None, "sgl_kernel", "ok", "0.4.2.post2+cu130 imports"),
    (
        "sgl-timeout",
        _set("extras.sgl_kernel", {"installed": True, "import_ok": False, "timed_out": True}),
        "sgl_kernel",
        "warning",
        "timed out",
    ),
    (
        "sgl-abi",
        _set("extras.sgl_kernel", {"installed": True, "import_ok": False, "error": SGL_ABI}),
        "sgl_kernel",
        "problem",
        "ABI mismatch",
    ),
    (
        "sgl-major",
        _set(
            "extras.sgl_kernel",
            {
                "installed": True,
                "import_ok": False,
                "error": "OSError: libcudart.so.12: cannot open shared object file",
            },
        ),
        "sgl_kernel",
        "problem",
        "CUDA runtime mismatch",
    ),
    (
        "sgl-other",
        _set(
            "extras.sgl_kernel",
            {"installed": True, "import_ok": False, "error": "x\nValueError: bad"},
        ),
        "sgl_kernel",
        "problem",
        "ValueError: bad",
    ),
    (
        "sgla-nolibs",
        _set("extras.sgl_kernel.libs", []),
        "sgl_kernel archs",
        "n/a",
        "no sgl_kernel library",
    ),
    ("sgla-nogpu", _no_smi, "sgl_kernel archs", "n/a", "nvidia-smi"),
    (
        "sgla-lacking",
        _set(
            "extras.sgl_kernel.libs",
            [{"path": "/s/sgl_kernel/sm100/common_ops.so", "archs": ["sm_90", "sm_100a"]}],
        ),
        "sgl_kernel archs",
        "warning",
        "no code for sm_120",
    ),
    ("sgla-ok", lambda d: None, "sgl_kernel archs", "ok", "sm_120 in 2 libraries"),
    ("nvcc-cpu", _cpu, "nvcc", "n/a", "not a CUDA build"),
    (
        "nvcc-stub",
        _set("dists.nvidia-cuda-nvcc-cu13", {"name": "nvidia-cuda-nvcc-cu13", "version": "0.0.1"}),
        "nvcc",
        "warning",
        "stub",
    ),
    ("nvcc-none", _set("extras.nvcc", {"venv": [], "versions": {}}), "nvcc", "warning", "no nvcc"),
    (
        "nvcc-major",
        _set("extras.nvcc.versions", {"/usr/local/cuda/bin/nvcc": "12.8"}),
        "nvcc",
        "warning",
        "not CUDA 13",
    ),
    ("nvcc-ok", lambda d: None, "nvcc", "ok", "nvidia/cu13/bin/nvcc (release 13.0)"),
    ("nvrtc-cpu", _cpu, "libnvrtc", "n/a", "not a CUDA build"),
    ("nvrtc-ok", lambda d: None, "libnvrtc", "ok", "libnvrtc.so.13"),
    (
        "nvrtc-path",
        _set(
            "extras.nvrtc",
            {
                "loaded": {"libnvrtc.so.13": "cannot open"},
                "files": [f"{SITE}/nvidia/cu13/lib/libnvrtc.so.13"],
            },
        ),
        "libnvrtc",
        "warning",
        "not on the loader path",
    ),
    (
        "nvrtc-none",
        _set("extras.nvrtc", {"loaded": {"libnvrtc.so.13": "cannot open"}, "files": []}),
        "libnvrtc",
        "warning",
        "not loadable",
    ),
    ("ch-cpu", _cpu, "CUDA_HOME", "n/a", "not a CUDA build"),
    ("ch-ok", lambda d: None, "CUDA_HOME", "ok", "has bin/nvcc"),
    ("ch-bad", _set("extras.cuda_home.nvcc", False), "CUDA_HOME", "problem", "has no bin/nvcc"),
    (
        "ch-default",
        _set("extras.cuda_home", {"path": None, "default_nvcc": True}),
        "CUDA_HOME",
        "ok",
        "/usr/local/cuda",
    ),
    (
        "ch-venv",
        _set("extras.cuda_home", {"path": None, "default_nvcc": False}),
        "CUDA_HOME",
        "warning",
        "will not find",
    ),
    (
        "ch-none",
        _all(_set("extras.cuda_home", {"path": None}), _set("extras.nvcc", {})),
        "CUDA_HOME",
        "warning",
        "no nvcc anywhere",
    ),
    ("ind-ok", lambda d: None, "inductor cache", "ok", "353 MiB in 1200 files"),
    (
        "ind-tmp",
        _set("caches.0.env", None),
        "inductor cache",
        "warning",
        "TORCHINDUCTOR_CACHE_DIR unset",
    ),
    (
        "ind-cold",
        _all(_no_smi, _set("caches.0", {"name": "inductor", "path": "/tmp/ti", "exists": False})),
        "inductor cache",
        "ok",
        "not created yet",
    ),
    ("disk-na", _set("disk", []), "disk", "n/a", "not readable"),
    ("disk-low", _set("disk.0.free", 1 << 29), "disk", "problem", "512 MiB free"),
    ("disk-warn", _set("disk.0.free", 3 << 30), "disk", "warning", "needs about 5 GiB"),
    ("disk-ok", lambda d: None, "disk", "ok", "400.0 GiB free"),
    ("procs-na", _set("procs", None), "venv processes", "n/a", "not read"),
    ("procs-none", lambda d: None, "venv processes", "ok", "none"),
    (
        "procs-some",
        _set(
            "procs", [{"pid": 42, "argv": ["/root/venv/bin/python", "-m", "sglang.launch_server"]}]
        ),
        "venv processes",
        "ok",
        "pid 42: /root/venv/bin/python -m sglang",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "name", "status", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_check_status_paths(mutate: Mut, name: str, status: str, text: str) -> None:
    facts = ct200()
    _index_paths(facts)
    mutate(facts)
    _unindex_paths(facts)
    check = by_name(facts)[name]
    assert (check.status, text in check.evidence) == (status, True), check


def _index_paths(d: dict[str, Any]) -> None:
    """Lists become {"0": ...} dicts so _set can address "caches.0.env"."""
    for key in ("caches", "disk"):
        d[key] = {str(i): v for i, v in enumerate(d[key])}


def _unindex_paths(d: dict[str, Any]) -> None:
    for key in ("caches", "disk"):
        if isinstance(d.get(key), dict):
            d[key] = list(d[key].values())


def test_fixes_name_the_host_and_a_runnable_variant() -> None:
    facts = ct200()
    _cpu(facts)
    check = by_name(facts)["torch.version.cuda"]
    assert check.fix == "gpumon swap-torch ct200 cu130 --version 2.11.0"
    facts["gpu"]["driver"] = "570.172.08"
    assert (
        by_name(facts)["torch.version.cuda"].fix == "gpumon swap-torch ct200 cu128 --version 2.11.0"
    )
    mixed = ct200()
    _nv(("nvidia-cudnn-cu13", 13, True), ("nvidia-nccl-cu12", 12, True))(mixed)
    fix = by_name(mixed)["nvidia packages"].fix or ""
    assert fix.endswith("uninstall --python /root/venv/bin/python nvidia-nccl-cu12")


def _on_torch_2_12_below_580(facts: dict[str, Any], cap: str = "12.0") -> dict[str, Any]:
    """torch 2.12.1+cu130 on a 570 driver: CUDA 13 cannot run, a CUDA 12 build must."""
    for key in ("dists.torch", "torch", "torch.version_py", "runtime"):
        _set(f"{key}.version", "2.12.1+cu130")(facts)
    facts["runtime"].update(available=False, arch_list=[])
    facts["gpu"]["driver"] = "570.172.08"
    for g in facts["gpu"]["gpus"]:
        g["compute_cap"] = cap
    return facts


def table_offers() -> dict[str, list[str]]:
    """What the built-in table says the index serves for CUDA 12, per variant: cu126 up to
    2.14.1, cu128 up to 2.11.0, cu129 for 2.9-2.11 and 2.12.1 (not 2.12.0), none for 2.15."""
    table = builtin_table()
    return {
        v: [r.torch for r in table.releases if table.built(r.torch, v)] for v in CUDA12_VARIANTS
    }


def test_below_580_the_cuda12_fix_is_a_build_the_index_offers() -> None:
    """torch 2.12 has no cu128: the fix never names ``cu128 --version 2.12.1``; 2.12.1 has
    cu129 again, with sm_120: the same release, through minor-version compatibility."""
    assert table_offers()["cu129"] == ["2.9.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1"]
    facts = _on_torch_2_12_below_580(ct200())
    facts["index_cuda12"] = table_offers()
    checks = by_name(facts)
    assert checks["driver"].fix == (
        "upgrade the driver to >= 580.95.05, or gpumon swap-torch ct200 cu129 --version 2.12.1"
    )
    ampere = _on_torch_2_12_below_580(ct200(), cap="8.6")
    ampere["index_cuda12"] = table_offers()
    fix = by_name(ampere)["driver"].fix or ""
    assert fix.endswith("gpumon swap-torch ct200 cu126 --version 2.12.1")  # same version
    missing = ct200()
    missing["gpu"]["driver"] = "570.172.08"
    _not_installed(missing)  # no index read: the newest release the table has for CUDA 12
    assert by_name(missing)["torch"].fix == "gpumon swap-torch ct200 cu128 --version 2.11.0"


def test_below_580_with_no_cuda12_build_for_the_gpu_the_fix_is_the_driver() -> None:
    facts = _on_torch_2_12_below_580(ct200())
    facts["index_cuda12"] = {"cu126": ["2.12.1"], "cu128": [], "cu129": []}
    assert by_name(facts)["driver"].fix == (
        "upgrade the driver to >= 580.95.05 (the index offers no CUDA 12 build of torch for"
        " sm_120 on this driver)"
    )
    unread = _on_torch_2_12_below_580(ct200())
    for key in ("dists.torch", "torch", "torch.version_py", "runtime"):
        _set(f"{key}.version", "2.12.0+cu130")(unread)  # cu129 came with 2.12.1 only
    unread["index_cuda12"] = {"error": "the index probe failed: timed out"}
    assert by_name(unread)["driver"].fix == (
        "upgrade the driver to >= 580.95.05 (the built-in table knows no CUDA 12 build of"
        " torch 2.12.0 for sm_120 on this driver; the index could not be read: the index"
        " probe failed: timed out)"
    )


# An RTX PRO 6000 (sm_120) on torch 2.15.0+cu132 (PyPI's build: CUDA 13.2.2, driver
# 595.58.03 recommended, 580 through minor-version compatibility) in each driver band,
# with the index serving what the table says: the doctor's driver verdict and its fix.
DRIVER_BANDS = [
    ("610.43.02", "ok", None),
    ("595.58.03", "ok", None),
    ("590.48.01", "warning", "upgrade the driver to >= 595.58.03"),
    ("580.65.06", "warning", "upgrade the driver to >= 595.58.03"),
    # below 580 only CUDA 12 runs: cu129 2.12.1 (sm_120 + PTX) at its recommended floor
    (
        "575.57.08",
        "problem",
        "upgrade the driver to >= 595.58.03, or gpumon swap-torch ct200 cu129 --version 2.12.1",
    ),
    # under cu129's 575.57.08 and at cu128's 570.124.06: cu128 2.11.0 (sm_120 SASS)
    (
        "570.172.08",
        "problem",
        "upgrade the driver to >= 595.58.03, or gpumon swap-torch ct200 cu128 --version 2.11.0",
    ),
    # under both recommended floors, over the CUDA 12 hard floor: the newest, cu129 2.12.1
    (
        "560.35.05",
        "problem",
        "upgrade the driver to >= 595.58.03, or gpumon swap-torch ct200 cu129 --version 2.12.1",
    ),
    # under 525.60.13 no CUDA 12 build runs either (cu126 would, but has no sm_120)
    (
        "520.61.05",
        "problem",
        "upgrade the driver to >= 595.58.03 (the index offers no CUDA 12 build of torch for"
        " sm_120 on this driver)",
    ),
]


@pytest.mark.parametrize(
    ("driver", "status", "fix"), DRIVER_BANDS, ids=[b[0] for b in DRIVER_BANDS]
)
def test_rtx_pro_6000_advice_in_each_driver_band(driver: str, status: str, fix: str | None) -> None:
    facts = ct200()
    for key in ("dists.torch", "torch", "torch.version_py", "runtime"):
        _set(f"{key}.version", "2.15.0")(facts)  # PyPI's build: no local label
    _set("torch.version_py.cuda", "13.2")(facts)
    _set("runtime.cuda", "13.2")(facts)
    facts["gpu"]["driver"] = driver
    facts["index_cuda12"] = table_offers()
    check = by_name(facts)["driver"]
    assert (check.status, check.fix) == (status, fix), check


def test_driver_warning_from_torch_names_the_fix() -> None:
    facts = ct200()
    facts["runtime"].update(
        available=False,
        warnings=[
            "CUDA initialization: The NVIDIA driver on your system is too old "
            "(found version 12080)."
        ],
    )
    check = by_name(facts)["cuda available"]
    assert check.status == "problem"
    assert "too old (found version 12080)" in check.evidence
    assert check.fix is not None and "cu128" in check.fix


def test_format_report_lists_each_check_and_fix() -> None:
    facts = ct200()
    facts["runtime"]["available"] = False
    report = DoctorReport("ct200", "/root/venv/bin/python", tuple(evaluate(facts, host="ct200")))
    text = format_report(report, "ssh root@pve1 -> pct exec 200")
    assert (
        text.splitlines()[0]
        == "doctor ct200 (ssh root@pve1 -> pct exec 200): python /root/venv/bin/python"
    )
    assert "problem  cuda available" in text
    assert "fix: check /dev/nvidia*" in text
    assert text.splitlines()[-1].startswith("1 problem(s);")
    assert report.exit_code == 1


# --- the variants table --------------------------------------------------------------


def test_builtin_table_is_the_shipped_copy() -> None:
    table = builtin_table()
    assert table.series() == ["2.9", "2.10", "2.11", "2.12", "2.13", "2.14", "2.15"]
    assert table.names("2.11") == ["cu126", "cu128", "cu129", "cu130", "cpu"]
    assert table.names("2.15") == ["cu130", "cu132", "cpu"]  # no cu126 from 2.15
    cu130 = table.variant("2.11", "cu130")
    assert cu130 is not None and cu130.min_driver_compat == "580" and cu130.cuda == "13.0"
    cu126 = table.variant("2.11", "cu126")
    assert cu126 is not None and table_covers(cu126, "12.0") is False
    release = table.release("2.11.0+cu130")
    assert release is not None and (release.torchvision, release.torchaudio) == ("0.26.0", "2.11.0")


@pytest.mark.parametrize(
    ("archs", "cc", "covered"),
    [
        (["sm_120"], "12.0", True),
        (["sm_120a"], "12.0", True),
        (["sm_120a"], "12.1", False),
        (["sm_120"], "12.1", True),
        (["sm_100a", "sm_90"], "12.0", False),
        (["compute_90"], "12.0", True),
        (["compute_120a"], "12.0", False),
        (["sm_86"], "8.0", False),
        (["garbage"], "12.0", False),
    ],
)
def test_arch_covers(archs: list[str], cc: str, covered: bool) -> None:
    assert arch_covers(archs, cc) is covered


def test_versions_and_drivers() -> None:
    assert series_of("2.11.0+cu130") == "2.11"
    assert series_of("not a version") is None
    assert variant_cuda("cu130") == "13.0" and variant_cuda("cu128") == "12.8"
    assert variant_cuda("cpu") is None
    assert variant_from("2.11.0", "13.0") == "cu130"  # label-less PyPI build
    assert variant_from("2.11.0+cu128", "12.8") == "cu128"
    assert variant_from("2.11.0", None) == "cpu"
    assert variant_from("2.11.0", None, hip="6.2") is None
    assert driver_at_least("580.95.05", "580") and not driver_at_least("575.57.08", "580")
    assert driver_at_least("580", "580.0.0") and not driver_at_least("525.60.12", "525.60.13")


# --- the probe's readers -------------------------------------------------------------


def _elf_with_fatbin(path: Path, entries: list[tuple[int, int, int]]) -> None:
    """A minimal ELF64 whose .nv_fatbin holds one container with (kind, sm, flags) entries."""
    body = b""
    for kind, sm, flags in entries:
        header = bytearray(0x40)
        struct.pack_into("<HxxIQ", header, 0, kind, 0x40, 16)
        struct.pack_into("<I", header, 0x1C, sm)
        struct.pack_into("<Q", header, 0x28, flags)
        body += bytes(header) + b"\0" * 16
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    names = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    names_off = data_off + len(fatbin)
    sh_off = names_off + len(names)
    sh_off += (-sh_off) % 8
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, sh_off)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 1)

    def section(name: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQ", name, 1, 0, 0, offset, size) + b"\0" * 24

    table = (
        section(0, 0, 0) + section(1, names_off, len(names)) + section(11, data_off, len(fatbin))
    )
    blob = bytes(head) + fatbin + names
    path.write_bytes(blob + b"\0" * (sh_off - len(blob)) + table)


def test_fatbin_archs_reads_cubins_and_ptx(tmp_path: Path) -> None:
    lib = tmp_path / "common_ops.abi3.so"
    _elf_with_fatbin(lib, [(2, 120, 0x100000), (2, 90, 0), (1, 120, 0), (2, 100, 0x200000)])
    assert doctor_probe_fs.fatbin_archs(str(lib)) == ["compute_120", "sm_100f", "sm_120a", "sm_90"]
    (tmp_path / "text.so").write_text("not an ELF")
    assert doctor_probe_fs.fatbin_archs(str(tmp_path / "text.so")) is None


class _Dist:
    def __init__(self, version: str, files: list[str]) -> None:
        self.version, self.files = version, files


@pytest.mark.parametrize(
    ("name", "version", "files", "major", "shared"),
    [
        ("nvidia-cudnn-cu12", "9.10.2.21", [], 12, True),
        ("nvidia-cufft", "12.0.0.15", ["nvidia/cu13/lib/libcufft.so.12"], 13, False),
        ("nvidia-nccl-cu13", "2.27.7", [], 13, True),
        ("cuda-toolkit", "13.0.2", [], 13, False),
        ("nvidia-ml-py", "13.580.82", ["pynvml.py"], None, False),
    ],
)
def test_classify_nvidia(
    name: str, version: str, files: list[str], major: int | None, shared: bool
) -> None:
    row = doctor_probe.classify_nvidia(name, _Dist(version, files))
    assert (row["major"], row["shared"]) == (major, shared)


@pytest.mark.parametrize("module", [doctor_probe, doctor_probe_fs], ids=lambda m: m.__name__)
def test_probe_is_standard_library_only_and_python38_syntax(module: Any) -> None:
    import ast

    from gpumon.backends.remote.bootstrap import NEEDS

    path = Path(module.__file__ or "")
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    top: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom):  # only what is shipped with the probe
            assert node.module is None or node.module in NEEDS["doctor_probe"], ast.dump(node)
    assert top - set(sys.stdlib_module_names) - {"__future__"} == set()


def test_nvidia_smi_rows_and_proc_driver_line() -> None:
    out = (
        "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.95.05\n"
        "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.95.05\n"
        "No devices were found\n"
    )
    rows = doctor_probe.parse_smi_rows(out)
    assert [r["index"] for r in rows] == ["0", "1"]
    assert rows[0] == {"index": "0", "name": GPU, "compute_cap": "12.0", "driver": "580.95.05"}
    nvrm = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U22-I3-AE18-09-3)  Wed Sep 24 18:04:17 UTC 2025"
    )
    assert doctor_probe.proc_driver_version(nvrm) == "580.95.05"
    assert doctor_probe.proc_driver_version(None) is None


def test_driver_without_devices_is_not_a_problem() -> None:
    facts = ct200()
    facts["gpu"].update(smi="ok", gpus=[])
    checks = by_name(facts)
    assert checks["gpus"].status == "n/a" and checks["gpus"].evidence == "nvidia-smi lists no GPU"
    assert checks["arch list"].status == "n/a"


def test_the_doctor_says_which_watched_logs_cannot_be_read(tmp_path: Path) -> None:
    """The probe opens each watched log as the agent would; one it cannot read (here a
    directory: root reads any file) is a problem naming the path and the reason. A FIFO
    is no log, said so without opening it for reading (that waited for a writer: the
    probe hung to the end of its time)."""
    from gpumon.backends.remote.doctor_probe import log_facts
    from gpumon.backends.torchenv.checks import Facts
    from gpumon.backends.torchenv.extras import check_logs

    good = tmp_path / "train.log"
    good.write_text("x\n")
    bad = tmp_path / "gone.log"
    bad.mkdir()
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    facts = log_facts([str(good), str(bad), str(fifo), str(tmp_path / "later.log")])
    check = check_logs(Facts({"logs": facts}))
    assert check.status == "problem"
    assert f"{bad}: Is a directory" in check.evidence
    assert f"{fifo}: not a regular file" in check.evidence
    ok = check_logs(Facts({"logs": log_facts([str(good), str(tmp_path / "later.log")])}))
    assert (ok.status, ok.evidence) == ("ok", "1 readable, 1 not there yet")


# --- the demo's doctor (sim.doctor): the simulated CT200's facts, not this machine's ----

SIM_ARCHS = ["sm_80", "sm_90", "sm_100", "sm_120"]


def this_machine(facts: dict[str, Any]) -> dict[str, Any]:
    """The probe's facts as a machine with its own CUDA 13 toolkit would give them."""
    facts["extras"].update(
        env={"CUDA_HOME": "/opt/cuda-13", "LD_LIBRARY_PATH": "/opt/x", "CUDA_PATH": None},
        nvcc={
            "venv": [],
            "which": "/usr/local/bin/nvcc",
            "versions": {"/usr/local/bin/nvcc": "13.0"},
        },
        cuda_home={"path": "/opt/cuda-13", "nvcc": False, "include": True, "default_nvcc": False},
        nvrtc={"loaded": {"libnvrtc.so.13": True, "libnvrtc.so.12": "not found"}, "files": []},
    )
    facts["gpu"].update(driver_module="575.1", libcuda="/usr/lib64/libcuda.so.575.1")
    facts["disk"] = [{"path": "/home", "dev": 1, "free": 3 << 30, "total": 8 << 30}]
    return facts


def said(facts: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.evidence) for c in evaluate(facts, host="demo")}


def test_the_same_answers_whatever_this_machine_has() -> None:
    facts = ct200()
    _variant("cu128", "12.8", SIM_ARCHS)(facts)
    one = said(simulated_facts(this_machine(json.loads(json.dumps(facts)))))
    two = said(simulated_facts(json.loads(json.dumps(facts))))
    assert one == two
    assert one["nvcc"] == ("ok", "/usr/local/cuda/bin/nvcc (release 12.8)")
    assert one["libnvrtc"] == ("ok", "ctypes.CDLL('libnvrtc.so.12') loads")
    assert one["disk"] == ("ok", "412.0 GiB free at /")
    assert one["driver userspace"][0] == "ok"
    assert "/opt/cuda-13" not in str(one) and "575.1" not in str(one)


def test_after_the_swap_to_cu130_the_cuda_12_toolkit_is_said() -> None:
    facts = ct200()
    _variant("cu130", "13.0", SIM_ARCHS)(facts)
    checks = said(simulated_facts(facts))
    assert checks["nvcc"][0] == "warning" and "not CUDA 13" in checks["nvcc"][1]
    assert (
        checks["libnvrtc"][0] == "warning"
        and "libnvrtc.so.13 not loadable" in checks["libnvrtc"][1]
    )


def test_the_probe_output_keeps_its_other_lines_and_a_failed_probe_stays_failed() -> None:
    out = simulated_probe_output('warming up\n{"probe": 1, "disk": []}\n')
    lines = out.splitlines()
    assert lines[0] == "warming up" and json.loads(lines[1])["disk"][0]["path"] == "/"
    assert simulated_probe_output("Traceback: no facts\n") == "Traceback: no facts\n"


def test_the_simulator_knows_the_probe_by_its_program_tag() -> None:
    """The simulator spells the tag out (importing remote at start-up delays the demo)."""
    from gpumon.backends.remote.bootstrap import program_tag
    from gpumon.backends.sim.transport import PROBE_TAG

    assert program_tag("doctor_probe") == PROBE_TAG
