"""GPU health facts: what the driver reports that explains a slow or failing GPU.

Pure judgements of ``GpuSample`` health fields (the PCIe link, the clock event reasons, ECC
counts, row remapping and page retirement, NVML's recovery action), shared by the alert
engine (``HealthWatch``: the ``gpu_health`` conditions ``gpu_health:TOPIC:GPU``), the
snapshot JSON (``facts_json``) and ``gpumon doctor`` (``findings``). A fact the driver did
not report is None and judges nothing: never a 0 that looks healthy or sick.

What is normal and never alerts: a PCIe link generation below its maximum (the driver
lowers it at idle to save power: real captures show gen 1 of 3 on an idle GeForce in P8;
a link *width* below its maximum is the training fault); the clock event reasons GpuIdle,
ApplicationsClocksSetting, SwPowerCap (a busy GPU at its power limit), SyncBoost and
DisplayClockSetting.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from gpumon.backends.model import GpuSample, Health

__all__ = [
    "ECC_CORRECTED_PER_MIN",
    "SLOWDOWN_REASONS",
    "SLOWDOWN_SHARE",
    "SLOWDOWN_WINDOW_S",
    "Finding",
    "HealthWatch",
    "clock_reasons",
    "facts_json",
    "findings",
    "recovery_action",
]

# clocks_event_reasons bits that slow a GPU for a reason worth an alert (nvml.h
# nvmlClocksEventReason*), and the ones that are normal operation.
SLOWDOWN_REASONS = {
    0x8: "hardware slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power-brake slowdown",
    0x20: "software thermal slowdown",
}
NORMAL_REASONS = {
    0x1: "idle",
    0x2: "applications clocks",
    0x4: "power cap",
    0x10: "sync boost",
    0x100: "display clocks",
}
# A slowdown alerts when active in this share of the samples of the last window, once the
# window holds this much time (one sample of a power brake on a load spike is not a fault).
SLOWDOWN_WINDOW_S = 300.0
SLOWDOWN_SHARE = 0.2
SLOWDOWN_MIN_S = 60.0
# Corrected (single-bit) ECC errors per minute over the same window that warn: a few in a
# day are normal, a steady stream is memory going bad.
ECC_CORRECTED_PER_MIN = 1.0
_HISTORY_MAX = 4096  # samples kept per GPU (a 0.1 s interval over 5 min is 3000)

# NVML's nvmlGpuRecoveryAction_t as nvidia-smi's ``gpu_recovery_action`` spells it (only
# "None" seen in CSV; the rest as ``nvidia-smi -q`` words them) -> gpumon's word.
_RECOVERY = {
    "none": "none",
    "reset": "reset",
    "gpu reset": "reset",
    "reboot": "reboot",
    "node reboot": "reboot",
    "drain p2p": "drain",
    "drain and reset": "drain",
    "recover imex domain": "imex",
    "bus reset": "bus reset",
    "system reboot": "system reboot",
}
_RECOVERY_TEXT = {
    "reset": "reset the GPU",
    "reboot": "reboot the node",
    "drain": "drain the node's jobs, then reset the GPU",
    "imex": "recover the IMEX domain",
    "bus reset": "reset the GPU's PCIe bus",
    "system reboot": "reboot the system",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One health fact that is a problem now: ``topic`` (``pcie``, ``clocks``, ``ecc``,
    ``rows``, ``recovery``) names its alert (``gpu_health:TOPIC:GPU``); ``message`` says
    it and ends with ``advice``, what to do about it (its incident's fix)."""

    topic: str
    severity: Health
    message: str
    advice: str | None = None


def _finding(topic: str, severity: Health, fact: str, advice: str, joint: str = "; ") -> Finding:
    """The finding that says ``fact``, then ``joint`` and ``advice``."""
    return Finding(topic, severity, f"{fact}{joint}{advice}", advice)


def recovery_action(gpu: GpuSample) -> str | None:
    """``none``, ``reset``, ``reboot``, ``drain``, ``imex``, ``bus reset`` or ``system
    reboot``; the driver's own word when unknown; None when not reported."""
    text = gpu.recovery_action
    if text is None:
        return None
    return _RECOVERY.get(" ".join(text.casefold().replace("_", " ").split()), text)


def clock_reasons(mask: int | None) -> list[str]:
    """The active clock event reasons in words (slowdowns first), [] for none."""
    if mask is None:
        return []
    slow = [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]
    return slow + [name for bit, name in NORMAL_REASONS.items() if mask & bit]


def slowdowns(mask: int | None) -> list[str]:
    """Only the reasons that alert."""
    return [] if mask is None else [n for b, n in SLOWDOWN_REASONS.items() if mask & b]


def pcie_finding(gpu: GpuSample) -> Finding | None:
    """A link narrower than it can be: ``GPU 3 PCIe link at x4 of x16: downtrained;
    transfers 4x slower``. The generation is not judged (lowered at idle)."""
    now, best = gpu.pcie_width, gpu.pcie_width_max
    if now is None or best is None or now <= 0 or now >= best:
        return None
    factor = best / now
    slower = f"{factor:.0f}x" if factor == int(factor) else f"{factor:.1f}x"
    text = f"GPU {gpu.index} PCIe link at x{now} of x{best}: downtrained; transfers {slower} slower"
    advice = "reseat the card or check the riser at the next maintenance"
    return _finding("pcie", Health.WARNING, text, advice)


def ecc_finding(gpu: GpuSample) -> Finding | None:
    """Uncorrected (double-bit) errors since the driver loaded: critical."""
    count = gpu.ecc_uncorrected
    if count is None or count <= 0:
        return None
    text = (
        f"GPU {gpu.index}: {count} uncorrected ECC error{'s' if count != 1 else ''} since the "
        "driver loaded: a process using the GPU may have read bad memory"
    )
    return _finding("ecc", Health.CRITICAL, text, "reset the GPU")


def rows_finding(gpu: GpuSample) -> Finding | None:
    """A failed row remap (critical), rows or pages waiting for the next reset (warning)."""
    if gpu.rows_failure:
        text = f"GPU {gpu.index}: row remapping failed (no spare rows left): RMA criterion"
        advice = "drain the GPU and open a case with the vendor"
        return _finding("rows", Health.CRITICAL, text, advice)
    if gpu.rows_pending:
        text = f"GPU {gpu.index}: memory rows wait to be remapped"
        return _finding("rows", Health.WARNING, text, "reset the GPU at the next chance", ": ")
    if gpu.pages_pending:
        text = f"GPU {gpu.index}: memory pages wait to be retired"
        advice = "reset the GPU (or reboot) at the next chance"
        return _finding("rows", Health.WARNING, text, advice, ": ")
    return None


def recovery_finding(gpu: GpuSample) -> Finding | None:
    """NVML's recommended recovery action, when it is one (critical)."""
    action = recovery_action(gpu)
    if action is None or action == "none":
        return None
    what = _RECOVERY_TEXT.get(action, f"{action!r}")
    text = f"GPU {gpu.index}: the driver recommends a recovery action"
    return _finding("recovery", Health.CRITICAL, text, what, ": ")


def findings(gpu: GpuSample) -> list[Finding]:
    """The problems one sample shows by itself (a slowdown now is a warning here: the
    doctor's one look; the engine judges it over ``SLOWDOWN_WINDOW_S`` instead)."""
    out = [pcie_finding(gpu), ecc_finding(gpu), rows_finding(gpu), recovery_finding(gpu)]
    slow = slowdowns(gpu.clocks_event_reasons)
    if slow:
        text = f"GPU {gpu.index} clocks slowed now: {', '.join(slow)}"
        out.append(Finding("clocks", Health.WARNING, text))
    return [f for f in out if f is not None]


def facts_json(gpu: GpuSample) -> dict[str, Any]:
    """The snapshot JSON's ``health_facts`` of one GPU (docs/json.md); null: not reported."""
    return {
        "pcie_gen": gpu.pcie_gen,
        "pcie_gen_max": gpu.pcie_gen_max,
        "pcie_width": gpu.pcie_width,
        "pcie_width_max": gpu.pcie_width_max,
        "clock_reasons": None
        if gpu.clocks_event_reasons is None
        else clock_reasons(gpu.clocks_event_reasons),
        "ecc_uncorrected": gpu.ecc_uncorrected,
        "ecc_corrected": gpu.ecc_corrected,
        "rows_pending": gpu.rows_pending,
        "rows_failure": gpu.rows_failure,
        "pages_pending": gpu.pages_pending,
        "recovery_action": recovery_action(gpu),
        "nvlink": None,  # not read: the RTX PRO 6000 has no NVLink
    }


class _GpuHistory:
    def __init__(self) -> None:
        self.clocks: deque[tuple[float, bool]] = deque(maxlen=_HISTORY_MAX)
        self.corrected: deque[tuple[float, int]] = deque(maxlen=_HISTORY_MAX)


class HealthWatch:
    """The health conditions of one host's GPUs over time: ``judge(now, gpu)`` gives the
    findings that hold now, a slowdown by its share of ``SLOWDOWN_WINDOW_S`` and corrected
    ECC errors by their rate over it."""

    def __init__(self) -> None:
        self._gpus: dict[int, _GpuHistory] = {}

    def judge(self, now: float, gpu: GpuSample) -> list[Finding]:
        history = self._gpus.setdefault(gpu.index, _GpuHistory())
        out = [pcie_finding(gpu), ecc_finding(gpu), rows_finding(gpu), recovery_finding(gpu)]
        out.append(self._clocks(now, gpu, history))
        if out[1] is None:  # uncorrected errors say more than a corrected rate
            out[1] = self._corrected(now, gpu, history)
        return [f for f in out if f is not None]

    def forget(self, index: int) -> None:
        """A GPU gone from the list (its history says nothing about when it comes back)."""
        self._gpus.pop(index, None)

    def _clocks(self, now: float, gpu: GpuSample, history: _GpuHistory) -> Finding | None:
        mask = gpu.clocks_event_reasons
        window = history.clocks
        if mask is not None:
            window.append((now, bool(slowdowns(mask))))
        while window and window[0][0] < now - SLOWDOWN_WINDOW_S:
            window.popleft()
        if not window or now - window[0][0] < SLOWDOWN_MIN_S:
            return None
        share = sum(slow for _, slow in window) / len(window)
        if share < SLOWDOWN_SHARE:
            return None
        slow = slowdowns(mask) or ["slowdown"]
        minutes = (now - window[0][0]) / 60
        text = (
            f"GPU {gpu.index} clocks slowed {share * 100:.0f} % of the last {minutes:.0f} min "
            f"({', '.join(slow)})"
        )
        advice = "check its cooling, power and the node's event log"
        return _finding("clocks", Health.WARNING, text, advice, ": ")

    def _corrected(self, now: float, gpu: GpuSample, history: _GpuHistory) -> Finding | None:
        count = gpu.ecc_corrected
        seen = history.corrected
        if count is None:
            return None
        if seen and count < seen[-1][1]:  # a reset or driver reload zeroed the counter
            seen.clear()
        seen.append((now, count))
        while seen and seen[0][0] < now - SLOWDOWN_WINDOW_S:
            seen.popleft()
        span = now - seen[0][0]
        if span < SLOWDOWN_MIN_S:
            return None
        errors = count - seen[0][1]
        rate = errors / span * 60
        if rate < ECC_CORRECTED_PER_MIN:
            return None
        text = (
            f"GPU {gpu.index}: {errors} corrected ECC errors in {span / 60:.0f} min "
            f"({rate:.0f}/min): its memory is wearing"
        )
        return _finding("ecc", Health.WARNING, text, "watch for rows to remap")
