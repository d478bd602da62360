"""Whether a swap (or its rollback) reached the expected torch: the version with its local
label, ``torch.version.cuda`` as the import reports it, and no loss of CUDA that worked
before. Pure functions over probe facts; the doctor's torch checks come along for display.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumon.backends.torchenv.checks import Check, Facts, checks_torch
from gpumon.backends.torchenv.variants import builtin_table, split_version

if TYPE_CHECKING:
    from gpumon.backends.torchenv.swap_plan import SwapPlan


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the venv should hold. ``version`` None: no torch at all."""

    version: str | None
    cuda: str | None
    exact_label: bool = True  # False: the public version must match, the label may differ
    available_before: bool = False  # CUDA worked before: it must still work
    devices_before: int = 0

    def describe(self) -> str:
        if self.version is None:
            return "absent"
        return f"{self.version}, torch.version.cuda {self.cuda}"


@dataclass(frozen=True, slots=True)
class Verification:
    ok: bool
    got: str  # "2.11.0+cu130" (what the import reported), "no torch", "unknown"
    detail: str
    checks: tuple[Check, ...]


def expect_target(plan: SwapPlan) -> Expectation:
    rt: dict[str, Any] = plan.facts.get("runtime") or {}
    cuda_target = plan.cuda is not None
    return Expectation(
        plan.target,
        plan.cuda,
        available_before=cuda_target and bool(rt.get("ok") and rt.get("available")),
        devices_before=int(rt.get("device_count") or 0) if cuda_target else 0,
    )


def expect_previous(plan: SwapPlan) -> Expectation:
    """The torch the venv had before the swap (as the plan's facts saw it)."""
    f = Facts(plan.facts, plan.host)
    if not f.installed:
        return Expectation(None, None)
    cuda = f.rt.get("cuda") if f.rt.get("ok") else f.static_cuda
    label = split_version(f.version or "")[1]
    return Expectation(
        f.version,
        cuda,
        exact_label=bool(label),
        available_before=bool(f.rt.get("ok") and f.rt.get("available")),
        devices_before=int(f.rt.get("device_count") or 0),
    )


def verify(facts: dict[str, Any], expect: Expectation, host: str = "HOST") -> Verification:
    """Compare fresh probe facts (``torch`` + ``runtime``) with ``expect``."""
    f = Facts(facts, host)
    checks = tuple(checks_torch(f, builtin_table()))
    if expect.version is None:
        if f.installed:
            return Verification(False, f.version or "?", f"torch {f.version} is installed", checks)
        return Verification(True, "no torch", "torch is absent, as before", checks)
    if not f.installed:
        return Verification(False, "no torch", "torch is not installed", checks)
    rt = f.rt
    if not rt.get("ok"):
        err = str(rt.get("error") or "failed").strip().splitlines()
        return Verification(False, f.version or "?", f"import torch: {err[-1]}", checks)
    got, cuda = str(rt.get("version")), rt.get("cuda")
    want = expect.version if expect.exact_label else split_version(expect.version)[0]
    have = got if expect.exact_label else split_version(got)[0]
    text = f"{got}, torch.version.cuda {cuda}"
    if have != want or cuda != expect.cuda:
        return Verification(False, got, f"expected {expect.describe()}, got {text}", checks)
    if expect.available_before and not rt.get("available"):
        return Verification(False, got, f"{text} but CUDA is no longer available", checks)
    count = int(rt.get("device_count") or 0)
    if expect.available_before and count < expect.devices_before:
        return Verification(
            False,
            got,
            f"{text} but torch sees {count} GPUs, {expect.devices_before} before",
            checks,
        )
    return Verification(True, got, text, checks)
