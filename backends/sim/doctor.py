"""The demo's doctor answers for the simulated CT200, never for the machine gpumon runs on.

The probe (``remote.doctor_probe``) runs for real in the simulated venv, so what it reads
of the venv (python, packages, torch, its import, sgl_kernel, the processes that use it,
the watched logs) is the demo's own. The rest it reads of whatever machine it runs on:
nvcc on PATH and in /usr/local/cuda, libnvrtc through the loader, CUDA_HOME and
LD_LIBRARY_PATH, the driver's kernel module and libcuda, the compile caches under $HOME
and /tmp, free disk. Those sections are replaced here by the simulated target's, so the
demo's doctor says the same on every machine: CT200 has the CUDA 12.8 toolkit in
/usr/local/cuda (nvcc, and libnvrtc.so.12 on the loader path), CUDA_HOME unset, no
caches yet, a roomy disk, and the driver of the simulated nvidia-smi everywhere.
After a swap to cu130 the doctor then says what it would on such a machine: nvcc 12.8 is
not CUDA 13, libnvrtc.so.13 does not load.
"""

from __future__ import annotations

import json
from typing import Any

from gpumon.backends import untrusted

__all__ = ["simulated_facts", "simulated_probe_output"]

CUDA_TOOLKIT = "12.8"  # /usr/local/cuda on the simulated CT200
SYSTEM_NVCC = "/usr/local/cuda/bin/nvcc"
NVRTC_MISSING = "{0}: cannot open shared object file: No such file or directory"
GIB = 1 << 30
DISK = {"path": "/", "dev": 64769, "free": 412 * GIB, "total": 1024 * GIB}
HOME = "/root"  # CT200's service runs as root


def simulated_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` (the probe's, from the simulated venv) with every section read from this
    machine rather than the venv replaced by the simulated CT200's; sections the probe was
    not asked for stay absent."""
    out = dict(facts)
    if isinstance(out.get("extras"), dict):
        out["extras"] = _extras(out["extras"])
    if isinstance(out.get("gpu"), dict):
        out["gpu"] = _gpu(out["gpu"])
    if "caches" in out:
        out["caches"] = _caches()
    if "disk" in out:
        out["disk"] = [dict(DISK)]
    return out


def simulated_probe_output(stdout: str) -> str:
    """The probe's stdout with its facts (the last JSON line) made the simulated target's;
    unchanged when it holds none (the doctor then says the probe failed, as it would)."""
    lines = stdout.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                facts = untrusted.loads(lines[i])
            except ValueError:
                return stdout
            lines[i] = json.dumps(simulated_facts(facts))
            return "\n".join(lines) + "\n"
    return stdout


def _extras(extras: dict[str, Any]) -> dict[str, Any]:
    out = dict(extras)
    out["env"] = dict.fromkeys(("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"))
    out["env"]["CUDA_VISIBLE_DEVICES"] = None
    venv_nvcc = list((extras.get("nvcc") or {}).get("venv") or [])  # the venv's own
    out["nvcc"] = {
        "venv": venv_nvcc,
        "which": SYSTEM_NVCC,
        "versions": {**dict.fromkeys(venv_nvcc), SYSTEM_NVCC: CUDA_TOOLKIT},
    }
    out["cuda_home"] = {"path": None, "nvcc": False, "include": False, "default_nvcc": True}
    files = list((extras.get("nvrtc") or {}).get("files") or [])  # the venv's wheels' own
    out["nvrtc"] = {
        "loaded": {
            "libnvrtc.so.13": NVRTC_MISSING.format("libnvrtc.so.13"),
            "libnvrtc.so.12": True,
        },
        "files": files,
    }
    return out


def _gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """The driver as the simulated nvidia-smi reports it, and the same from the kernel
    module and libcuda (a consistent driver install)."""
    out = dict(gpu)
    driver = gpu.get("driver_smi")
    out["driver_module"] = out["driver_proc"] = driver
    out["driver"] = driver
    out["driver_source"] = "/sys/module/nvidia/version" if driver else None
    out["libcuda"] = f"/usr/lib/x86_64-linux-gnu/libcuda.so.{driver}" if driver else None
    return out


def _caches() -> list[dict[str, Any]]:
    paths = (
        ("inductor", "/tmp/torchinductor_root"),
        ("triton", "/tmp/torchinductor_root/triton"),
        ("triton (standalone)", f"{HOME}/.triton/cache"),
        ("flashinfer", f"{HOME}/.cache/flashinfer"),
    )
    return [{"name": n, "path": p, "env": None, "exists": False} for n, p in paths]
