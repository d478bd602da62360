"""File-system and process facts for the doctor probe: child processes, CUDA fatbin
architectures of shared libraries, nvcc / libnvrtc / CUDA_HOME, compile-cache sizes, free
disk, and the processes that use an environment.

Runs ON THE TARGET beside ``doctor_probe`` (the bootstrap registers it as that module's
sibling). Standard library only, Python 3.8+ syntax; reads, never writes.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (b".nv_fatbin", b"__nv_relfatbin")


def child(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``argv``; its exit code, stdout, stderr tail; ``timed_out`` on a timeout."""
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, text=True)
    except subprocess.TimeoutExpired:
        return {"code": None, "out": "", "err": "", "timed_out": True}
    except OSError as e:
        return {"code": None, "out": "", "err": str(e), "missing": True}
    err = "\n".join(p.stderr.strip().splitlines()[-8:])
    return {"code": p.returncode, "out": p.stdout, "err": err}


def fatbin_archs(path: str) -> list[str] | None:
    """Architectures in the CUDA fatbins of an ELF shared library (``sm_120a``,
    ``compute_90``), read from the section headers and entry headers only; None if the
    file is not a readable 64-bit little-endian ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:6] != b"\x7fELF\x02\x01":
                return None
            (shoff,) = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            secs = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
            f.seek(secs[shstrndx][4])
            names = f.read(secs[shstrndx][5])
            archs: list[str] = []
            for name_off, _t, _fl, _a, off, size in secs:
                name = names[name_off : names.index(b"\0", name_off)]
                if name in FATBIN_SECTIONS:
                    archs += _walk_fatbin(f, off, off + size)
            return sorted(set(archs))
    except (OSError, struct.error, ValueError, IndexError):
        return None


def _walk_fatbin(f: Any, pos: int, end: int) -> list[str]:
    found = []
    while pos + 16 <= end:
        f.seek(pos)
        magic, _ver, hsize, body = struct.unpack("<IHHQ", f.read(16))
        if magic != FATBIN_MAGIC:
            break
        entry, stop = pos + hsize, pos + hsize + body
        while entry + 0x30 <= stop:
            f.seek(entry)
            raw = f.read(0x30)
            kind, ehsize, payload = struct.unpack_from("<HxxIQ", raw, 0)
            (sm,) = struct.unpack_from("<I", raw, 0x1C)
            (flags,) = struct.unpack_from("<Q", raw, 0x28)
            if kind == 1:
                found.append(f"compute_{sm}")
            elif kind == 2:
                suffix = "a" if flags & 0x100000 else "f" if flags & 0x200000 else ""
                found.append(f"sm_{sm}{suffix}")
            if ehsize == 0:
                break
            entry += ehsize + payload
        pos = (stop + 7) // 8 * 8
    return found


def extras_facts(purelib: str, timeout: float) -> dict[str, Any]:
    """sgl_kernel (import in a child, archs of its libraries), nvcc, libnvrtc, CUDA_HOME."""
    import importlib.util

    out: dict[str, Any] = {}
    keys = ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
    out["env"] = {k: os.environ.get(k) for k in keys}
    spec = importlib.util.find_spec("sgl_kernel")
    sgl: dict[str, Any] = {"installed": spec is not None}
    if spec is not None and spec.submodule_search_locations:
        res = child([sys.executable, "-c", "import sgl_kernel"], timeout)
        sgl["import_ok"] = res["code"] == 0
        sgl["timed_out"] = bool(res.get("timed_out"))
        sgl["error"] = None if res["code"] == 0 else res["err"][-600:]
        libs = []
        for top in spec.submodule_search_locations:
            for root, _dirs, files in os.walk(top):
                for name in sorted(files):
                    if ".so" in name:
                        path = os.path.join(root, name)
                        libs.append({"path": path, "archs": fatbin_archs(path)})
        sgl["libs"] = libs[:40]
    out["sgl_kernel"] = sgl
    nvcc = []
    for root, dirs, files in os.walk(sys.prefix):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".gpumon")]
        if "nvcc" in files and os.path.isfile(os.path.join(root, "nvcc")):
            nvcc.append(os.path.join(root, "nvcc"))
    which = shutil.which("nvcc")
    system = "/usr/local/cuda/bin/nvcc"
    candidates = nvcc + [p for p in (which, system) if p and os.path.isfile(p) and p not in nvcc]
    versions = {}
    for path in candidates[:4]:
        res = child([path, "--version"], 15)
        m = re.search(r"release ([0-9]+\.[0-9]+)", res["out"])
        versions[path] = m.group(1) if m else None
    out["nvcc"] = {"venv": nvcc, "which": which, "versions": versions}
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    out["cuda_home"] = {
        "path": home,
        "nvcc": bool(home) and os.path.isfile(os.path.join(home or "", "bin", "nvcc")),
        "include": bool(home) and os.path.isdir(os.path.join(home or "", "include")),
        "default_nvcc": os.path.isfile(system),
    }
    loaded: dict[str, Any] = {}
    for soname in ("libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            ctypes.CDLL(soname)
            loaded[soname] = True
        except OSError as e:
            loaded[soname] = str(e)
    files = []
    nv = os.path.join(purelib, "nvidia")
    if os.path.isdir(nv):
        for sub in sorted(os.listdir(nv)):
            lib = os.path.join(nv, sub, "lib")
            if os.path.isdir(lib):
                files += [
                    os.path.join(lib, n) for n in os.listdir(lib) if n.startswith("libnvrtc.so.")
                ]
    out["nvrtc"] = {"loaded": loaded, "files": sorted(files)}
    return out


def tree_size(path: str, budget_s: float = 3.0) -> dict[str, Any]:
    """Allocated bytes and file count under ``path`` (stops after ``budget_s``: partial)."""
    total = count = 0
    deadline = time.time() + budget_s
    partial = False
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
            count += 1
        if time.time() > deadline:
            partial = True
            break
    return {"bytes": total, "files": count, "partial": partial}


def cache_facts(user: str) -> dict[str, Any]:
    home = os.path.expanduser("~")
    env_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    safe_user = re.sub(r"[\\/:*?\"<>|]", "_", user)
    inductor = env_dir or os.path.join(tempfile.gettempdir(), "torchinductor_" + safe_user)
    triton_env = os.environ.get("TRITON_CACHE_DIR")
    caches = [
        ("inductor", inductor, "TORCHINDUCTOR_CACHE_DIR" if env_dir else None),
        ("triton", os.path.join(inductor, "triton"), None),
        (
            "triton (standalone)",
            triton_env or os.path.join(home, ".triton", "cache"),
            "TRITON_CACHE_DIR" if triton_env else None,
        ),
        ("flashinfer", os.path.join(home, ".cache", "flashinfer"), None),
    ]
    rows = []
    for name, path, env in caches:
        row: dict[str, Any] = {
            "name": name,
            "path": path,
            "env": env,
            "exists": os.path.isdir(path),
        }
        if row["exists"]:
            row.update(tree_size(path))
        rows.append(row)
    disk: list[dict[str, Any]] = []
    for path in [sys.prefix] + [p for _n, p, _e in caches]:
        while path and not os.path.exists(path):
            path = os.path.dirname(path)
        try:
            usage = shutil.disk_usage(path)
        except OSError:
            continue
        dev = os.stat(path).st_dev
        if all(d["dev"] != dev for d in disk):
            disk.append({"path": path, "dev": dev, "free": usage.free, "total": usage.total})
    return {"caches": rows, "disk": disk}


def _ancestors() -> set[int]:
    out: set[int] = set()
    pid: int | None = os.getpid()
    while pid is not None and pid > 1 and pid not in out:
        out.add(pid)
        pid = _parent(pid)
    return out


# gpumon's own programs, shipped by its bootstrap: argv [python, ..., "-c", BOOTSTRAP,
# "gpumon-NAME", ...] (``bootstrap.program_tag``), the bootstrap naming the package
# "gpumon_remote". They read GPUs or probe with this Python and hold no torch themselves.
GPUMON_PROGRAMS = ("gpumon-agent", "gpumon-doctor_probe")
LEGACY_AGENT_MARK = "'gpumon-agent'"  # gpumon's agents before the shared bootstrap
# gpumon's one-line checks: argv [python, "-c", CODE, "gpumon-check"] (the agent's Python
# version check runs on every reconnect, e.g. while a swap's next plan is probed).
GPUMON_CHECK = "gpumon-check"


def is_gpumon_program(argv: list[str]) -> bool:
    """Whether ``argv`` is one of gpumon's shipped programs (not a user of the venv: a
    tmux session named ``gpumon-agent`` for a job called "agent" still counts)."""
    if len(argv) >= 4 and argv[1] == "-c" and argv[3] == GPUMON_CHECK:
        return True
    for before, word in zip(argv, argv[1:]):
        if word in GPUMON_PROGRAMS and "gpumon_remote" in before:
            return True
    return any(LEGACY_AGENT_MARK in a for a in argv)


def _argv(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def proc_facts(prefix: str) -> list[dict[str, Any]]:
    """Processes that use this environment: an argv word inside it, VIRTUAL_ENV naming it,
    or a file of it mapped (a torch library loaded). The probe and its ancestors excepted,
    and gpumon's own programs and their children: another probe still running (a plan made
    a moment ago for another choice) imports torch in a child of its own."""
    mine = _ancestors()
    inside = prefix.rstrip("/") + "/"
    found = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid in mine:
            continue
        argv = _argv(pid)
        if argv is None:
            continue
        if is_gpumon_program(argv):
            continue  # gpumon's agent (or another probe) uses this Python; it holds no torch
        parent = _parent(pid)
        if parent is not None and is_gpumon_program(_argv(parent) or []):
            continue  # a probe's own child (its torch import), gone when the probe is
        why = None
        if any(a.startswith(inside) for a in argv):
            why = "argv"
        else:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                if ("VIRTUAL_ENV=" + prefix.rstrip("/")).encode() in env:
                    why = "environ"
            except OSError:
                pass
        if why is None:
            try:
                with open(f"/proc/{pid}/maps", "rb") as f:
                    if (" " + inside).encode() in f.read():
                        why = "maps"
            except OSError:
                pass
        if why and argv:
            found.append({"pid": pid, "argv": argv[:40], "why": why})
    return found
