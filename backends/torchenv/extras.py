"""The doctor's environment checks beyond torch itself: the interpreter, the GPUs and driver
libraries, nvidia-* package sets, sgl_kernel, nvcc / libnvrtc / CUDA_HOME, compile caches,
free disk and the processes using the venv. Pure functions over ``Facts``."""

from __future__ import annotations

import os
import re
from typing import Any

from gpumon.backends.masking import mask_argv
from gpumon.backends.torchenv.checks import GIB, Check, Facts, Status, _gib, _swap_fix
from gpumon.backends.torchenv.variants import arch_covers, cuda_major, gpu_compute_caps, sm_name


def check_python(f: Facts) -> Check:
    py = f.py
    tools = ", ".join(
        t for t in ("uv" if py.get("uv") else "", "pip" if py.get("pip") else "") if t
    )
    text = f"Python {py.get('version')} at {f.python}; installers: {tools or 'none'}"
    if not py.get("is_venv"):
        return Check(
            "python",
            "warning",
            f"{text}; not a virtual environment",
            "point the host's `python` at the venv's interpreter, e.g. /root/venv/bin/python",
        )
    return Check("python", "ok", f"{text}; venv {py.get('prefix')}")


def check_userspace(f: Facts) -> Check:
    name = "driver userspace"
    lib = f.gpu.get("libcuda")
    m = re.search(r"libcuda\.so\.([0-9.]+)$", str(lib or ""))
    found = {
        "kernel module": f.gpu.get("driver_module") or f.gpu.get("driver_proc"),
        "libcuda": m.group(1) if m else None,
        "nvidia-smi": f.gpu.get("driver_smi"),
    }
    known = {k: v for k, v in found.items() if v}
    if len(known) < 2:
        return Check(name, "n/a", "fewer than two driver versions readable")
    text = ", ".join(f"{k} {v}" for k, v in known.items())
    if len(set(known.values())) > 1:
        return Check(
            name,
            "problem",
            text,
            "install user-space driver libraries of exactly the "
            "kernel module's version (in an LXC: the host's)",
        )
    return Check(name, "ok", text)


def gpus_check(f: Facts) -> Check:
    if f.gpu.get("smi") == "missing":
        return Check("gpus", "n/a", f.no_gpu_text())
    if f.gpu.get("smi") == "error":
        return Check("gpus", "problem", f.no_gpu_text(), "fix the driver before anything else")
    if not f.gpus:
        return Check("gpus", "n/a", f.no_gpu_text())
    names = sorted({str(g.get("name")) for g in f.gpus})
    caps = ", ".join(gpu_compute_caps(f.gpus))
    return Check(
        "gpus",
        "ok",
        f"{len(f.gpus)} x {' / '.join(names)} (compute {caps}), driver {f.gpu.get('driver')}",
    )


def nvidia_sets(f: Facts) -> dict[int, list[str]]:
    """Installed nvidia-* / cuda-* packages by CUDA major."""
    out: dict[int, list[str]] = {}
    for row in f.raw.get("nvidia") or []:
        if row.get("major") is not None:
            out.setdefault(int(row["major"]), []).append(str(row["name"]))
    return out


def check_nvidia(f: Facts) -> Check:
    name = "nvidia packages"
    sets = nvidia_sets(f)
    if not sets:
        return Check(name, "n/a", "no nvidia-* packages installed")
    text = "; ".join(f"CUDA {m}: {len(v)} packages" for m, v in sorted(sets.items()))
    want = cuda_major(f.cuda) if f.cuda_build else None
    stale = {m: v for m, v in sets.items() if m != want}
    if want is not None and stale and want in sets:
        names = sorted(n for v in stale.values() for n in v)
        return Check(
            name,
            "problem",
            f"mixed CUDA majors ({text}); torch is CUDA {want}",
            f"uv pip uninstall --python {f.python} {' '.join(names)}",
        )
    if want is not None and stale:
        return Check(
            name,
            "problem",
            f"torch is CUDA {want} but the runtime set is {text}",
            _swap_fix(f, f.variant, force=True),
        )
    if want is None and len(sets) > 1:
        return Check(name, "warning", f"mixed CUDA majors ({text}); torch is not a CUDA build")
    return Check(name, "ok", text)


def check_sgl_kernel(f: Facts) -> Check:
    name = "sgl_kernel"
    sgl = f.extras.get("sgl_kernel") or {}
    if not sgl.get("installed"):
        return Check(name, "n/a", "sgl_kernel is not installed")
    version = f.dist_version("sglang-kernel") or f.dist_version("sgl-kernel") or "?"
    if sgl.get("import_ok"):
        return Check(name, "ok", f"{version} imports")
    if sgl.get("timed_out"):
        return Check(name, "warning", f"{version}: import sgl_kernel timed out")
    err = str(sgl.get("error") or "import failed")
    line = next((ln.strip() for ln in err.splitlines() if "undefined symbol" in ln), None)
    t = f.version or "?"
    if line:
        return Check(
            name,
            "problem",
            f"{version}: ABI mismatch with torch {t}: {line}",
            f"install the sglang-kernel build made for torch {t} "
            "(0.4.2 .. 0.4.5 for 2.11.0) and this CUDA major",
        )
    line = next((ln.strip() for ln in err.splitlines() if "cannot open shared object" in ln), None)
    if line:
        return Check(
            name,
            "problem",
            f"{version}: CUDA runtime mismatch: {line}",
            f"install the sglang-kernel build for CUDA {f.cuda} (+cu130 or +cu129)",
        )
    return Check(name, "problem", f"{version}: {err.strip().splitlines()[-1]}")


def check_sgl_archs(f: Facts) -> Check:
    name = "sgl_kernel archs"
    libs = [lib for lib in (f.extras.get("sgl_kernel") or {}).get("libs") or [] if lib.get("archs")]
    if not libs:
        return Check(name, "n/a", "no sgl_kernel library with readable CUDA code")
    if not f.has_gpu:
        return Check(name, "n/a", f.no_gpu_text())
    caps = gpu_compute_caps(f.gpus)
    lacking = [
        lib
        for lib in libs
        if "flash_ops" not in lib["path"] and not all(arch_covers(lib["archs"], c) for c in caps)
    ]
    want = ", ".join(sm_name(c) for c in caps)
    if lacking:
        shown = "; ".join(f"{_rel(lib['path'])}: {' '.join(lib['archs'])}" for lib in lacking[:3])
        return Check(
            name,
            "warning",
            f"no code for {want} in {shown}",
            "install an sglang-kernel build that includes your GPUs' architecture",
        )
    return Check(name, "ok", f"{want} in {len(libs)} libraries (e.g. {' '.join(libs[0]['archs'])})")


def _rel(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[-2:])


def check_nvcc(f: Facts) -> Check:
    name = "nvcc"
    if not f.cuda_build:
        return Check(name, "n/a", "torch is not a CUDA build")
    nv = f.extras.get("nvcc") or {}
    versions: dict[str, Any] = nv.get("versions") or {}
    major = cuda_major(f.cuda)
    fix = (
        f"uv pip install --python {f.python} 'nvidia-cuda-nvcc=={major}.*'"
        if (major or 0) >= 13
        else "install the system CUDA toolkit of torch's version (pip's nvidia-cuda-nvcc-cu12 "
        "has no nvcc on Linux)"
    )
    if f.dist_version("nvidia-cuda-nvcc-cu13") == "0.0.1":
        return Check(name, "warning", "nvidia-cuda-nvcc-cu13 0.0.1 is a deprecated empty stub", fix)
    if not versions:
        return Check(
            name,
            "warning",
            "no nvcc in the venv, on PATH or in /usr/local/cuda "
            "(FlashInfer / JIT kernels cannot compile)",
            fix,
        )
    same = [p for p, v in versions.items() if cuda_major(v) == major]
    if not same:
        shown = ", ".join(f"{p} ({v})" for p, v in versions.items())
        return Check(name, "warning", f"{shown}: not CUDA {major} like torch ({f.cuda})", fix)
    return Check(name, "ok", f"{same[0]} (release {versions[same[0]]})")


def check_nvrtc(f: Facts) -> Check:
    name = "libnvrtc"
    if not f.cuda_build:
        return Check(name, "n/a", "torch is not a CUDA build")
    nv = f.extras.get("nvrtc") or {}
    soname = f"libnvrtc.so.{cuda_major(f.cuda)}"
    result = (nv.get("loaded") or {}).get(soname)
    if result is True:
        return Check(name, "ok", f"ctypes.CDLL({soname!r}) loads")
    files = [p for p in nv.get("files") or [] if os.path.basename(p).startswith(soname)]
    if files:
        where = os.path.dirname(files[0])
        return Check(
            name,
            "warning",
            f"{soname} is at {files[0]} but not on the loader path "
            "(extensions that dlopen it by name fail)",
            f"set LD_LIBRARY_PATH={where} in the SGLang service's environment",
        )
    return Check(name, "warning", f"{soname} not loadable: {result}")


def check_cuda_home(f: Facts) -> Check:
    name = "CUDA_HOME"
    if not f.cuda_build:
        return Check(name, "n/a", "torch is not a CUDA build")
    home = f.extras.get("cuda_home") or {}
    note = " (this SSH session's environment; the service's may differ)"
    if home.get("path"):
        if home.get("nvcc"):
            return Check(name, "ok", f"{home['path']} has bin/nvcc{note}")
        return Check(
            name,
            "problem",
            f"{home['path']} has no bin/nvcc{note}",
            "point CUDA_HOME at a directory with bin/nvcc and include/",
        )
    if home.get("default_nvcc"):
        return Check(name, "ok", f"unset; /usr/local/cuda has bin/nvcc{note}")
    venv_nvcc = (f.extras.get("nvcc") or {}).get("venv") or []
    if venv_nvcc:
        root = os.path.dirname(os.path.dirname(venv_nvcc[0]))
        return Check(
            name,
            "warning",
            f"unset and /usr/local/cuda has no nvcc; SGLang / FlashInfer "
            f"JIT will not find {venv_nvcc[0]}{note}",
            f"export CUDA_HOME={root} PATH={root}/bin:$PATH in the service's environment",
        )
    return Check(name, "warning", f"unset and no nvcc anywhere{note}")


def check_caches(f: Facts) -> list[Check]:
    rows = {str(r.get("name")): r for r in f.raw.get("caches") or []}
    out = []
    for label, keys in (
        ("inductor cache", ["inductor"]),
        ("triton cache", ["triton", "triton (standalone)"]),
        ("flashinfer cache", ["flashinfer"]),
    ):
        found = [rows[k] for k in keys if k in rows]
        if not found:
            continue
        parts = [_cache_text(r) for r in found]
        status: Status = "ok"
        fix = None
        inductor = found[0] if keys == ["inductor"] else None
        if inductor and not inductor.get("env") and (inductor.get("exists") or f.has_gpu):
            status = "warning"
            parts.append("TORCHINDUCTOR_CACHE_DIR unset: the temp dir may be wiped on restart")
            fix = "set TORCHINDUCTOR_CACHE_DIR=/root/.cache/torchinductor for the service"
        out.append(Check(label, status, "; ".join(parts), fix))
    return out


def _cache_text(row: dict[str, Any]) -> str:
    if not row.get("exists"):
        return f"{row.get('path')}: not created yet"
    partial = "+" if row.get("partial") else ""
    size = _gib(float(row.get("bytes") or 0))
    return f"{size}{partial} in {row.get('files')} files at {row.get('path')}"


def check_disk(f: Facts) -> Check:
    rows = f.raw.get("disk") or []
    if not rows:
        return Check("disk", "n/a", "free space not readable")
    low = min(rows, key=lambda r: r.get("free", 0))
    text = "; ".join(f"{_gib(r.get('free', 0))} free at {r.get('path')}" for r in rows)
    if low.get("free", 0) < GIB:
        return Check("disk", "problem", text, f"free space at {low.get('path')}")
    if low.get("free", 0) < 6 * GIB:
        return Check(
            "disk",
            "warning",
            f"{text} (a CUDA torch swap needs about 5 GiB)",
            f"free space at {low.get('path')}",
        )
    return Check("disk", "ok", text)


def check_processes(f: Facts) -> Check:
    procs = f.raw.get("procs")
    if procs is None:
        return Check("venv processes", "n/a", "process list not read")
    if not procs:
        return Check("venv processes", "ok", "none")
    shown = "; ".join(f"pid {p['pid']}: {' '.join(mask_argv(p['argv']))[:80]}" for p in procs[:3])
    more = f" (+{len(procs) - 3} more)" if len(procs) > 3 else ""
    return Check("venv processes", "ok", f"{len(procs)}: {shown}{more}")


def extra_checks(f: Facts) -> list[Check]:
    return [
        check_nvidia(f),
        check_sgl_kernel(f),
        check_sgl_archs(f),
        check_nvcc(f),
        check_nvrtc(f),
        check_cuda_home(f),
        *check_caches(f),
        check_disk(f),
        check_processes(f),
    ]


def check_logs(f: Facts) -> Check:
    """The watched logs (watch_logs, the jobs', SGLang's) can be read on the target: one
    that cannot leaves OOM watching off there. Missing is fine (a job not started yet)."""
    if "logs" not in f.raw:
        return Check("logs", "n/a", "not probed")
    logs = [x for x in f.raw.get("logs") or [] if isinstance(x, dict)]
    if not logs:
        return Check("logs", "n/a", "no watched logs configured")
    bad = [x for x in logs if x.get("error") not in (None, "missing")]
    if bad:
        said = "; ".join(f"{x.get('path')}: {x.get('error')}" for x in bad[:3])
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return Check(
            "logs",
            "problem",
            f"cannot read {said}{more}: OOM and progress lines there are not seen",
            "make the log readable by the user gpumon connects as (or fix the path)",
        )
    readable = sum(x.get("error") is None for x in logs)
    missing = len(logs) - readable
    return Check(
        "logs", "ok", f"{readable} readable" + (f", {missing} not there yet" if missing else "")
    )
