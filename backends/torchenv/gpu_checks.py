"""The doctor's GPU health checks, and ``gpumon doctor HOST --gpus``: the verification to
run after a reset or a reboot.

One ``nvidia-smi --query-gpu`` of the health facts (``parsers.nvidia_smi.SAMPLE_FIELDS``,
the ones this driver lists in ``--help-query-gpu``), judged by ``alerts.health`` as the
alerts judge them: the PCIe link width, the clock event reasons now, ECC, row remapping
and page retirement, NVML's recovery action; NVLink where ``nvidia-smi nvlink -s`` lists
links. ``--gpus`` adds: every NVIDIA GPU on the PCI bus (``/sys/bus/pci``) listed by
nvidia-smi, and ``dcgmi diag -r 1`` where ``dcgmi`` is installed (level 1 only: the
higher levels are not documented for this GPU class). Nothing here changes the machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from gpumon.backends.alerts.health import Finding, clock_reasons, findings, recovery_action
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import GpuSample, Health, bus_id_key
from gpumon.backends.parsers.nvidia_smi import (
    SAMPLE_FIELDS,
    fields_for_help,
    parse_query_gpu,
    query_gpu_args,
)
from gpumon.backends.torchenv.checks import Check, Status
from gpumon.backends.transport.base import Transport, TransportError

__all__ = ["GPU_CHECKS", "gpu_checks", "verify_gpus"]

SMI_TIMEOUT_S = 30.0
DCGMI_TIMEOUT_S = 600.0  # dcgmi diag -r 1 takes seconds; a stuck one must not hang forever
# The NVIDIA display controllers on the PCI bus (vendor 0x10de, class 0x0300xx VGA or
# 0x0302xx 3D), by bus id: what nvidia-smi must list after a reset or reboot.
PCI_SCAN = (
    "for d in /sys/bus/pci/devices/*; do "
    '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue; '
    'case "$(cat "$d/class" 2>/dev/null)" in 0x0300*|0x0302*) echo "${d##*/}";; esac; '
    "done"
)
GPU_CHECKS = ("gpus listed", "pcie links", "clocks", "ecc", "row remapping", "recovery action")
_LINK = re.compile(r"^\s*Link \d+:", re.MULTILINE)


async def _run(transport: Transport, argv: Sequence[str], timeout: float) -> tuple[int, str]:
    """(exit code, output); 124 for no answer in time, 127 for a transport failure."""
    try:
        res = await transport.run(list(argv), timeout=timeout)
    except TransportError as e:
        return 127, str(e)
    code = 124 if res.exit_code is None else res.exit_code
    return code, res.stdout or res.stderr or ""


async def read_gpus(transport: Transport, host: HostConfig) -> tuple[list[GpuSample], str | None]:
    """The GPUs with their health facts, or ([], why not)."""
    smi = host.nvidia_smi
    code, text = await _run(transport, [smi, "--help-query-gpu"], SMI_TIMEOUT_S)
    fields = fields_for_help(text, SAMPLE_FIELDS) if code == 0 else SAMPLE_FIELDS
    code, text = await _run(transport, [smi, *query_gpu_args(fields)], SMI_TIMEOUT_S)
    if code != 0:
        lines = text.strip().splitlines()
        return [], f"nvidia-smi failed (exit {code}): {lines[-1] if lines else 'no output'}"
    gpus = list(parse_query_gpu(text, fields).gpus)
    return gpus, None if gpus else "nvidia-smi listed no GPU"


def _status(severity: Health, strict: bool) -> Status:
    """A critical finding is a problem; a warning is one too in the ``--gpus``
    verification (it demands a clean state), else a warning."""
    return "problem" if severity is Health.CRITICAL or strict else "warning"


def _topic_check(
    name: str,
    found: list[Finding],
    ok: str,
    fix: str,
    strict: bool,
) -> Check:
    if not found:
        return Check(name, "ok", ok)
    worst = Health.worst(*(f.severity for f in found))
    return Check(name, _status(worst, strict), "; ".join(f.message for f in found), fix)


def _reported(gpus: list[GpuSample], read: Callable[[GpuSample], Any]) -> bool:
    return any(read(g) is not None for g in gpus)


def judge(gpus: list[GpuSample], *, strict: bool = False) -> list[Check]:
    """The GPU checks of one look at ``gpus`` (pure)."""
    found: dict[str, list[Finding]] = {}
    for gpu in gpus:
        for f in findings(gpu):
            found.setdefault(f.topic, []).append(f)
    sick = [g for g in gpus if g.health is not Health.OK]
    listed = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} listed"
    if sick:
        why = "; ".join(f"GPU {g.index}: {', '.join(g.problems) or g.health.value}" for g in sick)
        out = [Check("gpus listed", "problem", f"{listed}; {why}", "reset the GPU or reboot")]
    else:
        out = [Check("gpus listed", "ok", listed)]
    out.append(_pcie_check(gpus, found.get("pcie", []), strict))
    reasons = sorted({r for g in gpus for r in clock_reasons(g.clocks_event_reasons)})
    if not _reported(gpus, lambda g: g.clocks_event_reasons):
        out.append(Check("clocks", "n/a", "clock event reasons not reported"))
    else:
        normal = f"no slowdown now ({', '.join(reasons) or 'full speed'})"
        fix = "check cooling, power supply and the node's event log (ipmitool sel list)"
        # one look at a slowdown is a warning even in --gpus: a brake on a spike passes
        clocks = [
            Finding(f.topic, Health.WARNING, f.message, f.advice) for f in found.get("clocks", [])
        ]
        out.append(_topic_check("clocks", clocks, normal, fix, strict=False))
    if not _reported(gpus, lambda g: g.ecc_uncorrected):
        out.append(Check("ecc", "n/a", "ECC counts not reported (ECC off or not supported)"))
    else:
        corrected = sum(g.ecc_corrected or 0 for g in gpus)
        ok = f"no uncorrected error; {corrected} corrected since the driver loaded"
        out.append(_topic_check("ecc", found.get("ecc", []), ok, "reset the GPU", strict))
    if not _reported(gpus, lambda g: g.rows_pending) and not _reported(
        gpus, lambda g: g.pages_pending
    ):
        out.append(Check("row remapping", "n/a", "row remapping / page retirement not reported"))
    else:
        fix = "reset the GPU (a failed remap: drain it and open an RMA case)"
        out.append(
            _topic_check("row remapping", found.get("rows", []), "nothing pending", fix, strict)
        )
    if not _reported(gpus, lambda g: g.recovery_action):
        out.append(Check("recovery action", "n/a", "the driver reports no recovery action"))
    else:
        actions = sorted({recovery_action(g) or "n/a" for g in gpus})
        ok = f"none recommended ({', '.join(actions)})"
        fix = "do what the driver recommends"
        out.append(_topic_check("recovery action", found.get("recovery", []), ok, fix, strict))
    return out


def _pcie_check(gpus: list[GpuSample], found: list[Finding], strict: bool) -> Check:
    if not _reported(gpus, lambda g: g.pcie_width):
        return Check("pcie links", "n/a", "PCIe link width not reported")
    widths = sorted({f"x{g.pcie_width} of x{g.pcie_width_max}" for g in gpus if not _narrow(g)})
    gens = sorted({f"gen {g.pcie_gen} of {g.pcie_gen_max}" for g in gpus if g.pcie_gen is not None})
    ok = f"every link at full width ({', '.join(widths)}; {', '.join(gens) or 'gen n/a'}: "
    ok += "a generation below its maximum is the driver saving power at idle)"
    return _topic_check(
        "pcie links", found, ok, "reseat the card or check its riser and slot", strict
    )


def _narrow(gpu: GpuSample) -> bool:
    now, best = gpu.pcie_width, gpu.pcie_width_max
    return now is not None and best is not None and now < best


async def nvlink_check(transport: Transport, host: HostConfig) -> Check:
    """NVLink: n/a where ``nvidia-smi nvlink -s`` lists no link (the RTX PRO 6000 has none)."""
    code, text = await _run(transport, [host.nvidia_smi, "nvlink", "-s"], SMI_TIMEOUT_S)
    links = len(_LINK.findall(text)) if code == 0 else 0
    if links == 0:
        return Check("nvlink", "n/a", "no NVLink link listed (nvidia-smi nvlink -s)")
    return Check(
        "nvlink",
        "n/a",
        f"{links} NVLink links listed; their error counters are not read by gpumon "
        "(nvidia-smi nvlink -e)",
    )


async def gpu_checks(transport: Transport, host: HostConfig) -> list[Check]:
    """The GPU health checks of ``gpumon doctor`` (never raising: a failure is a check)."""
    gpus, error = await read_gpus(transport, host)
    if error is not None:
        return [Check("gpu health", "n/a", error)]
    return [*judge(gpus), await nvlink_check(transport, host)]


async def _listed_check(
    transport: Transport, gpus: list[GpuSample], error: str | None
) -> Check | None:
    """A GPU on the PCI bus that nvidia-smi does not list (fallen off the bus, no driver)."""
    code, text = await _run(transport, ["sh", "-c", PCI_SCAN], SMI_TIMEOUT_S)
    on_bus = {bus_id_key(word) for word in text.split()} if code == 0 else set()
    listed = {bus_id_key(g.bus_id) for g in gpus}
    missing = sorted(b for b in on_bus - listed if b is not None)
    if missing:
        return Check(
            "gpus listed",
            "problem",
            f"{len(missing)} NVIDIA GPU(s) on the PCI bus not listed by nvidia-smi: "
            f"{', '.join(missing)}" + (f" ({error})" if error else ""),
            "reboot the node; if it stays missing, reseat the card",
        )
    if error is not None:
        return Check("gpus listed", "problem", error, "fix the driver before anything else")
    return None  # all listed, or nothing to compare with (no /sys/bus/pci in the container)


async def dcgmi_check(transport: Transport) -> Check:
    """``dcgmi diag -r 1`` where dcgmi is installed (it reads, it does not change)."""
    code, where = await _run(transport, ["sh", "-c", "command -v dcgmi"], SMI_TIMEOUT_S)
    if code != 0 or not where.strip():
        return Check("dcgmi diag", "n/a", "dcgmi is not installed on the target")
    code, text = await _run(transport, ["dcgmi", "diag", "-r", "1"], DCGMI_TIMEOUT_S)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    failed = [ln for ln in lines if "fail" in ln.casefold()]
    if code == 0 and not failed:
        return Check("dcgmi diag", "ok", "dcgmi diag -r 1 passed")
    tail = "; ".join(failed[:3] or lines[-3:]) or "no output"
    return Check(
        "dcgmi diag",
        "problem",
        f"dcgmi diag -r 1 failed (exit {code}): {tail}",
        "read dcgmi's report; reset or drain the GPU it names",
    )


async def verify_gpus(transport: Transport, host: HostConfig) -> list[Check]:
    """``gpumon doctor HOST --gpus``: every GPU listed, ECC clean, nothing pending, links
    at full width, no recovery action, and ``dcgmi diag -r 1`` where dcgmi exists. A
    problem fails the verification; it changes nothing."""
    gpus, error = await read_gpus(transport, host)
    listed = await _listed_check(transport, gpus, error)
    checks = judge(gpus, strict=True) if gpus else []
    if listed is not None:
        checks = [listed, *(c for c in checks if c.name != "gpus listed")]
    checks.append(await nvlink_check(transport, host))
    checks.append(await dcgmi_check(transport))
    return checks
