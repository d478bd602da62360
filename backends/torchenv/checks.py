"""The doctor's checks: raw probe facts (``doctor_probe``) in, one ``Check`` per question out.

Pure functions over the facts dict, so every status path is testable with a literal dict.
Statuses: "ok", "warning", "problem", "n/a" (the question does not apply here, e.g. CUDA
questions on a machine without an NVIDIA GPU), each with the evidence read and, where one is
known, a one-line fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gpumon.backends.torchenv.variants import (
    COMPANIONS,
    VariantTable,
    arch_covers,
    cuda_major,
    driver_at_least,
    gpu_compute_caps,
    series_of,
    sm_name,
    split_version,
    table_covers,
    variant_cuda,
    variant_from,
)

Status = Literal["ok", "warning", "problem", "n/a"]
STATUSES: tuple[Status, ...] = ("ok", "warning", "problem", "n/a")
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    evidence: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "evidence": self.evidence,
            "fix": self.fix,
        }


class Facts:
    """Typed accessors over the probe's JSON (missing sections read as empty)."""

    def __init__(self, raw: dict[str, Any], host: str = "HOST") -> None:
        self.raw, self.host = raw, host
        self.py: dict[str, Any] = raw.get("python") or {}
        self.torch: dict[str, Any] = raw.get("torch") or {}
        self.rt: dict[str, Any] = raw.get("runtime") or {}
        self.gpu: dict[str, Any] = raw.get("gpu") or {}
        self.extras: dict[str, Any] = raw.get("extras") or {}
        self.dists: dict[str, Any] = raw.get("dists") or {}

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return list(self.gpu.get("gpus") or [])

    @property
    def has_gpu(self) -> bool:
        return self.gpu.get("smi") == "ok" and bool(self.gpus)

    @property
    def installed(self) -> bool:
        return bool(self.torch.get("installed"))

    @property
    def version(self) -> str | None:
        v = self.torch.get("version")
        return str(v) if v and self.installed else None

    @property
    def static_cuda(self) -> str | None:
        vp = self.torch.get("version_py") or {}
        return vp.get("cuda")

    @property
    def cuda(self) -> str | None:
        """torch.version.cuda: from the import when it worked, else from version.py."""
        return self.rt.get("cuda") if self.rt.get("ok") else self.static_cuda

    @property
    def hip(self) -> str | None:
        return (self.torch.get("version_py") or {}).get("hip")

    @property
    def variant(self) -> str | None:
        return variant_from(self.version, self.static_cuda, self.hip)

    @property
    def cuda_build(self) -> bool:
        return self.installed and self.cuda is not None

    @property
    def python(self) -> str:
        return str(self.py.get("executable") or "python3")

    def dist_version(self, name: str) -> str | None:
        row = self.dists.get(name)
        return str(row["version"]) if row else None

    def no_gpu_text(self) -> str:
        if self.gpu.get("smi") == "missing":
            return "no NVIDIA GPU seen (nvidia-smi not found)"
        if self.gpu.get("smi") == "error":
            return f"nvidia-smi failed: {self.gpu.get('error', '')}"
        return "nvidia-smi lists no GPU"


def suggest_variant(f: Facts) -> str:
    """The variant to suggest in fixes: cu130 on a >=580 driver, cu128 below, cpu without GPU."""
    if not f.has_gpu:
        return "cpu"
    driver = f.gpu.get("driver")
    return "cu130" if driver and driver_at_least(str(driver), "580") else "cu128"


def _swap_fix(f: Facts, variant: str | None = None, force: bool = False) -> str:
    variant = variant or suggest_variant(f)
    version = split_version(f.version)[0] if f.version else "2.11.0"
    return f"gpumon swap-torch {f.host} {variant} --version {version}" + (" --force" * force)


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


# --- python and torch ----------------------------------------------------------------


def check_torch(f: Facts) -> Check:
    if not f.installed:
        return Check(
            "torch", "problem", f"torch is not installed in {f.py.get('prefix')}", _swap_fix(f)
        )
    vp = f.torch.get("version_py")
    if not vp:
        why = f.torch.get("version_py_error", "no version.py")
        return Check(
            "torch",
            "warning",
            f"{f.version} (dist-info); torch/version.py unreadable: {why}",
            _swap_fix(f, f.variant, force=True),
        )
    if vp.get("version") and vp["version"] != f.version:
        return Check(
            "torch",
            "problem",
            f"dist-info says {f.version} but torch/version.py says {vp['version']} "
            "(a half-finished install)",
            _swap_fix(f, f.variant, force=True),
        )
    label = split_version(f.version or "")[1]
    kind = "" if label else f" (no local label: a PyPI build, {f.variant or 'unknown variant'})"
    return Check("torch", "ok", f"{f.version}{kind}; torch/version.py cuda {f.static_cuda!r}")


def check_import(f: Facts) -> Check:
    if not f.installed:
        return Check("torch import", "n/a", "torch is not installed")
    rt = f.rt
    if rt.get("timed_out"):
        return Check(
            "torch import",
            "problem",
            str(rt.get("error")),
            "check for a hung driver (nvidia-smi) or a slow file system",
        )
    if not rt.get("ok"):
        err = str(rt.get("error") or "import failed").strip().splitlines()
        return Check(
            "torch import",
            "problem",
            err[-1] if err else "import failed",
            _swap_fix(f, f.variant, force=True),
        )
    if rt.get("version") != f.version:
        return Check(
            "torch import",
            "problem",
            f"import torch gives {rt.get('version')} but the dist-info says {f.version} "
            "(another torch shadows it on sys.path)",
            "check PYTHONPATH and user site-packages",
        )
    return Check(
        "torch import", "ok", f"{rt.get('version')} imported in {rt.get('import_s', '?')} s"
    )


def check_cuda_version(f: Facts) -> Check:
    name = "torch.version.cuda"
    if not f.installed:
        return Check(name, "n/a", "torch is not installed")
    src = "" if f.rt.get("ok") else " (from torch/version.py; the import failed)"
    if f.rt.get("ok") and f.static_cuda != f.rt.get("cuda"):
        return Check(
            name,
            "problem",
            f"import says {f.rt.get('cuda')!r}, torch/version.py says {f.static_cuda!r}",
            _swap_fix(f, f.variant, force=True),
        )
    cuda, label = f.cuda, split_version(f.version or "")[1]
    if cuda is None:
        if f.hip:
            return Check(name, "ok", f"None (ROCm build, hip {f.hip}){src}")
        if f.has_gpu:
            return Check(
                name,
                "problem",
                f"None: a CPU build on a machine with {len(f.gpus)} NVIDIA GPU(s){src}",
                _swap_fix(f),
            )
        return Check(name, "ok", f"None: CPU build ({f.no_gpu_text()}){src}")
    expected = variant_from(None, cuda)
    if label and label.startswith("cu") and label != expected:
        return Check(
            name,
            "problem",
            f"{cuda} but the wheel is labelled +{label}{src}",
            _swap_fix(f, label, force=True),
        )
    return Check(name, "ok", f"{cuda}{src}")


def check_available(f: Facts) -> Check:
    name = "cuda available"
    if not f.installed or not f.rt.get("ok"):
        return Check(
            name, "n/a", "torch did not import" if f.installed else "torch is not installed"
        )
    if f.cuda is None:
        return Check(name, "n/a", "False: CPU build")
    if f.rt.get("available"):
        return Check(name, "ok", "True")
    warns = [str(w) for w in f.rt.get("warnings") or []]
    told = next((w for w in warns if "CUDA" in w or "driver" in w), None)
    extra = f"; torch warned: {told.strip().splitlines()[0]}" if told else ""
    if not f.has_gpu:
        status: Status = "problem" if f.gpu.get("smi") == "error" else "n/a"
        return Check(name, status, f"False; {f.no_gpu_text()}{extra}")
    fix = "check /dev/nvidia* inside the container and CUDA_VISIBLE_DEVICES"
    if told and "too old" in told:
        fix = f"driver too old for CUDA {f.cuda}: {_swap_fix(f, 'cu128')}"
    return Check(name, "problem", f"False while nvidia-smi lists {len(f.gpus)} GPU(s){extra}", fix)


def check_device_count(f: Facts) -> Check:
    name = "device count"
    if not f.has_gpu:
        return Check(name, "n/a", f.no_gpu_text())
    if not f.rt.get("available"):
        return Check(name, "n/a", "CUDA is not available to torch")
    got, seen = int(f.rt.get("device_count") or 0), len(f.gpus)
    visible = (f.extras.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
    if got == seen:
        return Check(name, "ok", f"{got} (nvidia-smi: {seen})")
    if visible is not None and got == len([v for v in visible.split(",") if v.strip()]):
        return Check(name, "ok", f"{got} of {seen} (CUDA_VISIBLE_DEVICES={visible})")
    return Check(
        name,
        "warning",
        f"torch sees {got}, nvidia-smi lists {seen}",
        "check CUDA_VISIBLE_DEVICES and the container's /dev/nvidia* nodes",
    )


def check_arch(f: Facts, table: VariantTable) -> Check:
    name = "arch list"
    if not f.has_gpu:
        return Check(name, "n/a", f.no_gpu_text())
    if not f.cuda_build:
        return Check(name, "n/a", "not a CUDA build" if f.installed else "torch is not installed")
    caps = gpu_compute_caps(f.gpus)
    archs = [str(a) for a in f.rt.get("arch_list") or []]
    if archs:
        missing = [c for c in caps if not arch_covers(archs, c)]
        shown = " ".join(archs)
        if missing:
            wanted = ", ".join(sm_name(c) for c in missing)
            return Check(name, "problem", f"no code for {wanted} in [{shown}]", _swap_fix(f))
        return Check(name, "ok", f"{', '.join(sm_name(c) for c in caps)} covered by [{shown}]")
    row = table.variant(series_of(f.version or "") or "", f.variant or "")
    verdicts = {c: table_covers(row, c) for c in caps} if row else {}
    if not verdicts or any(v is None for v in verdicts.values()):
        return Check(name, "n/a", "torch.cuda.get_arch_list() is empty and the table does not say")
    bad = [sm_name(c) for c, v in verdicts.items() if not v]
    how = "per the variants table (torch's own list is empty while CUDA is unavailable)"
    if bad:
        return Check(name, "problem", f"{f.variant} has no {', '.join(bad)} {how}", _swap_fix(f))
    return Check(name, "ok", f"{f.variant} covers {', '.join(sm_name(c) for c in caps)} {how}")


def driver_floor(table: VariantTable, series: str, variant: str) -> tuple[str | None, str | None]:
    """(hard floor, recommended floor) for a variant; CUDA-major defaults when not tabled."""
    row = table.variant(series, variant)
    if row is not None and row.cuda is not None:
        return row.min_driver_compat, row.min_driver
    major = cuda_major(variant_cuda(variant))
    return {13: ("580", None), 12: ("525.60.13", None)}.get(major or 0, (None, None))


def check_driver(f: Facts, table: VariantTable) -> Check:
    name = "driver"
    driver = f.gpu.get("driver")
    if not f.cuda_build:
        return Check(name, "n/a", f"{driver or 'no driver'}; torch is not a CUDA build")
    if not driver:
        return Check(name, "n/a", f"no NVIDIA driver found ({f.no_gpu_text()})")
    variant = f.variant or ""
    hard, soft = driver_floor(table, series_of(f.version or "") or "", variant)
    src = f.gpu.get("driver_source") or "?"
    if hard and not driver_at_least(str(driver), hard):
        return Check(
            name,
            "problem",
            f"{driver} ({src}) is below {hard}, the minimum for {variant}",
            f"upgrade the driver to >= {soft or hard}, or {_swap_fix(f, 'cu128')}",
        )
    if soft and not driver_at_least(str(driver), soft):
        return Check(
            name,
            "warning",
            f"{driver} ({src}) is below {soft}, the driver {variant}'s "
            f"CUDA ships with (works through minor-version compatibility, >= {hard})",
            f"upgrade the driver to >= {soft}",
        )
    floor = f" >= {soft or hard}" if (soft or hard) else ""
    return Check(name, "ok", f"{driver} ({src}){floor} for {variant}")


def check_companion(f: Facts, name: str, table: VariantTable) -> Check:
    version = f.dist_version(name)
    if version is None:
        return Check(name, "n/a", f"{name} is not installed")
    if not f.installed:
        return Check(name, "warning", f"{version} installed without torch")
    rt = (f.rt.get(name) or {}) if f.rt.get("ok") else {}
    if rt and not rt.get("ok") and not rt.get("missing"):
        err = str(rt.get("error", "")).strip().splitlines()
        return Check(
            name,
            "problem",
            f"{version}: import fails: {err[-1] if err else ''}",
            _swap_fix(f, f.variant, force=True),
        )
    t_label, c_label = split_version(f.version or "")[1], split_version(version)[1]
    if t_label and c_label and t_label != c_label:
        return Check(
            name,
            "problem",
            f"{version} but torch is {f.version}",
            _swap_fix(f, t_label, force=True),
        )
    release = table.release(f.version or "")
    paired = getattr(release, name) if release else None
    if paired and split_version(version)[0] != paired:
        return Check(
            name,
            "problem",
            f"{version}, but torch {f.version} pairs with {name} {paired}",
            _swap_fix(f, f.variant, force=True),
        )
    return Check(name, "ok", f"{version} matches torch {f.version}")


def checks_torch(f: Facts, table: VariantTable) -> list[Check]:
    """The torch checks (also the swap's verification)."""
    return [
        check_torch(f),
        check_import(f),
        check_cuda_version(f),
        check_available(f),
        check_device_count(f),
        check_arch(f, table),
        check_driver(f, table),
        *(check_companion(f, c, table) for c in COMPANIONS),
    ]
