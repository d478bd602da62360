"""The doctor's checks: raw probe facts (``doctor_probe``) in, one ``Check`` per question out.

Pure functions over the facts dict, so every status path is testable with a literal dict.
Statuses: "ok", "warning", "problem", "n/a" (the question does not apply here, e.g. CUDA
questions on a machine without an NVIDIA GPU), each with the evidence read and, where one is
known, a one-line fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from gpumon.backends.torchenv.index import version_key
from gpumon.backends.torchenv.variants import (
    COMPANIONS,
    VariantTable,
    arch_covers,
    builtin_table,
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

    def __init__(
        self, raw: dict[str, Any], host: str = "HOST", table: VariantTable | None = None
    ) -> None:
        self.raw, self.host = raw, host
        self._table = table
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

    @property
    def table(self) -> VariantTable:
        if self._table is None:
            self._table = builtin_table()
        return self._table

    def dist_version(self, name: str) -> str | None:
        row = self.dists.get(name)
        return str(row["version"]) if row else None

    def no_gpu_text(self) -> str:
        if self.gpu.get("smi") == "missing":
            return "no NVIDIA GPU seen (nvidia-smi not found)"
        if self.gpu.get("smi") == "error":
            return f"nvidia-smi failed: {self.gpu.get('error', '')}"
        return "nvidia-smi lists no GPU"


# CUDA 12 builds, newest CUDA first: what a driver below 580 (CUDA 13's floor) can run.
# Which of them a torch release has is the index's to say: 2.12.0 has cu126 alone (cu128
# and cu129 gone, pytorch/pytorch#178665), 2.12.1 has cu129 again, 2.15 has none (cu126
# dropped); cu126 has no Blackwell (sm_100/sm_120) code (data/torch_variants.toml).
CUDA12_VARIANTS = ("cu129", "cu128", "cu126")
CUDA13_DRIVER = "580"
_FOUND_CUDA = re.compile(r"found version ([0-9]{4,6})")


def needs_cuda12(f: Facts) -> bool:
    """A GPU on a driver below 580: only a CUDA 12 build runs there."""
    driver = f.gpu.get("driver")
    return f.has_gpu and bool(driver) and not driver_at_least(str(driver), CUDA13_DRIVER)


def suggest_variant(f: Facts) -> str:
    """The variant to suggest in fixes: cu130 on a >=580 driver, the CUDA 12 build the
    index (or the table) offers below (cu128 when nothing says), cpu without a GPU."""
    if not f.has_gpu:
        return "cpu"
    if not needs_cuda12(f):
        return "cu130"
    choice = cuda12_choice(f)
    return choice[0] if isinstance(choice, tuple) else "cu128"


def cuda12_choice(f: Facts, driver_cuda: str | None = None) -> tuple[str, str] | str:
    """``(variant, version)`` of a CUDA 12 build that exists, runs on this driver and has
    code for these GPUs: the installed version when one is offered, else the newest offered
    (a build whose recommended driver floor is met before one only at its hard floor); or a
    sentence saying why there is none. From the target's index (``index_cuda12`` in
    the facts: variant -> versions, read by the doctor), else from the built-in table."""
    installed = split_version(f.version)[0] if f.version else None
    offers = f.raw.get("index_cuda12")
    if isinstance(offers, dict) and not offers.get("error"):
        served = [
            (variant, str(version))
            for variant in CUDA12_VARIANTS
            for version in (offers.get(variant) or [])
        ]
        where = "the index offers"
    else:
        # The installed version, or (none installed) every release the table lists.
        known = [installed] if installed else [r.torch for r in f.table.releases]
        served = [(v, ver) for v in CUDA12_VARIANTS for ver in known if f.table.built(ver, v)]
        where = "the built-in table knows"
    ceiling = version_key(driver_cuda) if driver_cuda else None
    usable = [
        (v, ver)
        for v, ver in served
        if _runs_here(f, v, ver)
        and (ceiling is None or version_key(variant_cuda(v) or "") <= ceiling)
    ]
    if not usable:
        caps = ", ".join(sm_name(c) for c in gpu_compute_caps(f.gpus)) or "these GPUs"
        indexed = isinstance(offers, dict) and not offers.get("error")
        what = "torch" if indexed or not installed else f"torch {installed}"
        why = offers.get("error") if isinstance(offers, dict) else None
        tail = f"; the index could not be read: {why}" if why else ""
        return f"{where} no CUDA 12 build of {what} for {caps} on this driver{tail}"

    # The installed version first, then a driver at the build's recommended floor (not
    # only its hard one), then the newest release, then the newest CUDA.
    def rank(c: tuple[str, str]) -> tuple[bool, bool, tuple[int, ...], int]:
        _, soft = driver_floor(f.table, series_of(c[1]) or "", c[0])
        driver = str(f.gpu.get("driver") or "")
        at_soft = soft is None or not driver or driver_at_least(driver, soft)
        return (c[1] == installed, at_soft, version_key(c[1]), -CUDA12_VARIANTS.index(c[0]))

    return max(usable, key=rank)


def _runs_here(f: Facts, variant: str, version: str) -> bool:
    """The build's driver floor is met and (where known) it has code for every GPU."""
    series = series_of(version) or ""
    hard, _ = driver_floor(f.table, series, variant)
    driver = str(f.gpu.get("driver") or "")
    if hard and driver and not driver_at_least(driver, hard):
        return False
    row = f.table.variant(series, variant)
    return row is None or all(table_covers(row, cc) is not False for cc in gpu_compute_caps(f.gpus))


def _swap_fix(
    f: Facts,
    variant: str | None = None,
    force: bool = False,
    cuda12: bool = False,
    driver_cuda: str | None = None,
) -> str:
    """``gpumon swap-torch HOST VARIANT --version V``; below a 580 driver with no variant
    given, the CUDA 12 build that exists (``cuda12_choice``), or the driver upgrade."""
    version = split_version(f.version)[0] if f.version else "2.11.0"
    if variant is None and (cuda12 or needs_cuda12(f)):
        choice = cuda12_choice(f, driver_cuda)
        if isinstance(choice, str):
            return f"upgrade the driver to >= {CUDA13_DRIVER} ({choice})"
        variant, version = choice
    variant = variant or suggest_variant(f)
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
        found = _FOUND_CUDA.search(told)  # "found version 12080": the driver runs CUDA 12.8
        runs = f"{int(found[1]) // 1000}.{int(found[1]) % 1000 // 10}" if found else None
        fix = f"driver too old for CUDA {f.cuda}: {_swap_fix(f, cuda12=True, driver_cuda=runs)}"
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


def _driver_fix(f: Facts, floor: str) -> str:
    """Upgrade the driver, or swap to a CUDA 12 build that exists for it. A build taken
    from the built-in table because the target's index could not be read says so: the
    user checks the index before trusting it."""
    choice = cuda12_choice(f) if needs_cuda12(f) else None
    if isinstance(choice, str):
        return f"upgrade the driver to >= {floor} ({choice})"
    fix = f"upgrade the driver to >= {floor}, or {_swap_fix(f)}"
    offers = f.raw.get("index_cuda12")
    why = offers.get("error") if choice is not None and isinstance(offers, dict) else None
    if why:
        fix += f" (a build the built-in table knows; the index could not be read: {why})"
    return fix


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
            _driver_fix(f, soft or hard),
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
