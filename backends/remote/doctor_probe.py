"""Gathers raw facts about a Python environment for ``gpumon doctor`` and ``swap-torch``.

Runs ON THE TARGET, sent over stdin to its interpreter (see ``doctor.probe_argv``); changes
nothing and prints one JSON object. Standard library only, Python 3.8+ syntax. torch is
never imported here: its version is read from metadata and ``torch/version.py``, and the
import itself (``runtime``) and ``import sgl_kernel`` run in child processes with a timeout.

argv[1] is a JSON object of options: ``sections`` (list, default all of SECTIONS),
``nvidia_smi`` (program), ``import_timeout`` (seconds), ``logs`` (the watched log paths
or globs: each is opened and read, as the agent would, to say which cannot be).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from typing import Any

from . import doctor_probe_fs as fs
from .doctor_probe_fs import child
from .logfile import open_log

PROBE_VERSION = 1
SECTIONS = ("python", "dists", "torch", "runtime", "gpu", "extras", "caches", "procs", "logs")
SHARED_DIRS = ("cudnn", "nccl", "cusparselt", "nvshmem")

# Run by the venv's interpreter in a child: torch's own view of itself, as one JSON line.
RUNTIME = r"""
import json, sys, time, warnings
out = {"ok": False}
t0 = time.time()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import torch
        out.update(ok=True, version=torch.__version__, cuda=torch.version.cuda,
                   hip=getattr(torch.version, "hip", None))
        out["available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count()) if out["available"] else 0
        out["arch_list"] = list(torch.cuda.get_arch_list())
        out["capabilities"] = ["%d.%d" % torch.cuda.get_device_capability(i)
                               for i in range(out["device_count"])]
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["import_s"] = round(time.time() - t0, 3)
    for name in ("torchvision", "torchaudio"):
        try:
            mod = __import__(name)
            out[name] = {"ok": True, "version": getattr(mod, "__version__", None)}
        except ImportError as e:
            out[name] = {"ok": False, "error": str(e), "missing": type(e).__name__ ==
                         "ModuleNotFoundError" and getattr(e, "name", "") == name}
        except BaseException as e:
            out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
out["warnings"] = [str(w.message) for w in caught][:10]
sys.stdout.write("\n" + json.dumps(out) + "\n")
"""


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def python_facts() -> dict[str, Any]:
    import importlib.util
    import sysconfig

    prefix = sys.prefix
    cfg: dict[str, str] = {}
    try:
        with open(os.path.join(prefix, "pyvenv.cfg")) as f:
            for line in f:
                key, sep, value = line.partition("=")
                if sep:
                    cfg[key.strip()] = value.strip()
    except OSError:
        pass
    home = os.path.expanduser("~")
    uv_places = [os.path.join(prefix, "bin", "uv"), shutil.which("uv") or ""]
    uv_places += [os.path.join(home, ".local", "bin", "uv"), os.path.join(home, ".cargo/bin/uv")]
    uv = next((p for p in uv_places if p and os.access(p, os.X_OK)), None)
    uv_version = None
    if uv:
        res = child([uv, "--version"], 10)
        uv_version = [*res["out"].split(), "", ""][1] or None
    try:
        import getpass

        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in a container: the uid says it
        user = str(os.getuid())
    return {
        "executable": sys.executable,
        "version": ".".join(str(v) for v in sys.version_info[:3]),
        "prefix": prefix,
        "base_prefix": getattr(sys, "base_prefix", prefix),
        "is_venv": prefix != getattr(sys, "base_prefix", prefix),
        "pyvenv": cfg,
        "purelib": sysconfig.get_paths()["purelib"],
        "pip": importlib.util.find_spec("pip") is not None,
        "uv": uv,
        "uv_version": uv_version,
        "user": user,
        "pid": os.getpid(),
    }


def dist_facts() -> dict[str, Any]:
    """Every installed distribution (first on sys.path wins) and the nvidia-* runtime sets."""
    from importlib import metadata

    dists: dict[str, dict[str, Any]] = {}
    nvidia: list[dict[str, Any]] = []
    for d in metadata.distributions():
        name = d.metadata["Name"] or ""
        key = norm(name)
        if not key or key in dists:
            continue
        dists[key] = {"name": name, "version": d.version}
        if key.startswith("nvidia-") or key in ("cuda-toolkit", "cuda-bindings", "cuda-python"):
            nvidia.append(classify_nvidia(key, d))
    return {"dists": dists, "nvidia": nvidia}


def classify_nvidia(key: str, dist: Any) -> dict[str, Any]:
    """CUDA major of an nvidia package: its ``-cu12``/``-cu13`` suffix, else where its files
    live (``nvidia/cu13/...`` is CUDA 13), else the major of ``cuda-*`` versions."""
    row: dict[str, Any] = {"name": key, "version": dist.version, "major": None, "shared": None}
    m = re.search(r"-cu(1[0-9])$", key)
    if m:
        row.update(major=int(m.group(1)), why="suffix")
    elif key.startswith("cuda-"):
        head = dist.version.split(".")[0]
        row.update(major=int(head) if head.isdigit() else None, why="version")
    else:
        for f in dist.files or ():
            parts = str(f).replace("\\", "/").split("/")
            if len(parts) > 2 and parts[0] == "nvidia" and re.fullmatch(r"cu1[0-9]", parts[1]):
                row.update(major=int(parts[1][2:]), why="files")
                break
    base = re.sub(r"-cu1[0-9]$", "", key)
    row["shared"] = base[len("nvidia-") :] in SHARED_DIRS if base.startswith("nvidia-") else False
    return row


_CUDA_PY = re.compile(r"^cuda(?:\s*:\s*Optional\[str\])?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_VER_PY = re.compile(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
_HIP_PY = re.compile(r"^hip(?:\s*:\s*Optional\[str\])?\s*=\s*['\"]([^'\"]+)['\"]", re.M)


def torch_facts() -> dict[str, Any]:
    """torch's version without importing it: dist-info METADATA and torch/version.py."""
    from importlib import metadata

    out: dict[str, Any] = {"installed": False}
    try:
        d = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return out
    out.update(installed=True, version=d.version, requires=list(d.requires or [])[:40])
    path = d.locate_file("torch/version.py")
    out["version_py_path"] = str(path)
    try:
        with open(str(path), encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        out["version_py"] = None
        out["version_py_error"] = str(e)
        return out
    found = {}
    for key, rx in (("version", _VER_PY), ("cuda", _CUDA_PY), ("hip", _HIP_PY)):
        m = rx.search(text)
        found[key] = m.group(1) if m else None
    out["version_py"] = found
    return out


def runtime_facts(timeout: float) -> dict[str, Any]:
    t0 = time.time()
    res = child([sys.executable, "-c", RUNTIME], timeout)
    if res.get("timed_out"):
        return {"ok": False, "timed_out": True, "error": f"import torch took over {timeout:g}s"}
    lines = [ln for ln in res["out"].splitlines() if ln.startswith("{")]
    try:
        out: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"ok": False, "error": res["err"] or f"exit {res['code']}, no output"}
    if not out.get("ok") and res["err"] and "error" not in out:
        out["error"] = res["err"]
    out["wall_s"] = round(time.time() - t0, 3)
    return out


def _first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip() or None
    except OSError:
        return None


SMI_FIELDS = ("index", "name", "compute_cap", "driver_version")


def parse_smi_rows(text: str) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=index,name,compute_cap,driver_version`` CSV rows."""
    rows = []
    for line in text.splitlines():
        index, _, rest = line.partition(",")
        cells = [index, *rest.rsplit(",", 2)]  # a name may hold commas; the fields around not
        cells = [c.strip() for c in cells]
        if len(cells) == len(SMI_FIELDS) and cells[0].isdigit():
            rows.append(dict(zip(("index", "name", "compute_cap", "driver"), cells)))
    return rows


def proc_driver_version(text: str | None) -> str | None:
    """The version in ``/proc/driver/nvidia/version``'s NVRM line."""
    m = re.search(r"\s([0-9]+\.[0-9]+(?:\.[0-9]+)?)\s", (text or "") + " ")
    return m.group(1) if m else None


def gpu_facts(smi: str) -> dict[str, Any]:
    out: dict[str, Any] = {"smi": "missing", "gpus": [], "driver": None, "driver_source": None}
    res = child([smi, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"], 20)
    text = (res["err"] or res["out"]).strip()
    if res.get("missing"):
        out["error"] = f"{smi}: not found"
    elif res["code"] == 0 or "No devices were found" in text:
        out.update(smi="ok", gpus=parse_smi_rows(res["out"]))
    else:
        out.update(smi="error", error=text[-300:] or "timed out")
    module = _first_line("/sys/module/nvidia/version")
    proc_ver = proc_driver_version(_first_line("/proc/driver/nvidia/version"))
    smi_ver = out["gpus"][0]["driver"] if out["gpus"] else None
    for source, value in (("/sys/module/nvidia/version", module), ("/proc", proc_ver)):
        if value:
            out.update(driver=value, driver_source=source)
            break
    else:
        if smi_ver:
            out.update(driver=smi_ver, driver_source="nvidia-smi")
    out["driver_module"], out["driver_proc"], out["driver_smi"] = module, proc_ver, smi_ver
    libcuda = None
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib"):
        p = os.path.join(d, "libcuda.so.1")
        if os.path.exists(p):
            libcuda = os.path.realpath(p)
            break
    out["libcuda"] = libcuda
    return out


def log_facts(patterns: list[str]) -> list[dict[str, Any]]:
    """Each watched log as the agent would follow it: ``error`` None when it can be read,
    ``missing`` when nothing is there (yet), else why not (Permission denied, ...)."""
    import glob

    out: list[dict[str, Any]] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not paths:
            out.append({"pattern": pattern, "path": pattern, "error": "missing"})
        for path in paths:
            error: str | None = None
            try:
                with open_log(path) as f:  # a FIFO there would hold the probe to its end
                    f.read(1)
            except FileNotFoundError:
                error = "missing"
            except OSError as e:
                error = e.strerror or type(e).__name__
            out.append({"pattern": pattern, "path": path, "error": error})
    return out


def main(argv: list[str]) -> None:
    opts = json.loads(argv[1]) if len(argv) > 1 else {}
    sections = set(opts.get("sections") or SECTIONS)
    timeout = float(opts.get("import_timeout", 90))
    facts: dict[str, Any] = {"probe": PROBE_VERSION, "errors": {}}
    py = python_facts()
    facts["python"] = py
    steps = (
        ("procs", lambda: fs.proc_facts(py["prefix"])),
        ("dists", dist_facts),
        ("torch", torch_facts),
        ("gpu", lambda: gpu_facts(opts.get("nvidia_smi") or "nvidia-smi")),
        ("runtime", lambda: runtime_facts(timeout)),
        ("extras", lambda: fs.extras_facts(py["purelib"], timeout)),
        ("caches", lambda: fs.cache_facts(py["user"])),
        ("logs", lambda: log_facts(list(opts.get("logs") or []))),
    )
    for name, fn in steps:
        if name not in sections:
            continue
        try:
            value = fn()
        except Exception as e:  # noqa: BLE001 - one broken section must not hide the others
            facts["errors"][name] = f"{type(e).__name__}: {e}"
            continue
        if isinstance(value, dict) and name in ("dists", "caches"):
            facts.update(value)
        else:
            facts[name] = value
    sys.stdout.write(json.dumps(facts) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
