"""The one Xid table: what NVIDIA says each Xid means and what to do, and gpumon's level.

Used by the kernel-log parser (``kernel.py``), the fleet rules (``fleet/model.py``) and the
exporter, so a code means the same everywhere. Meanings and actions are NVIDIA's Xid
catalog for Ampere and later (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
"Resolution Bucket (Immediate Action)"): RESTART_APP -> restart the application, RESET_GPU
-> reset the GPU, RESTART_BM -> reboot the node, CONTACT_SUPPORT -> contact support (RMA),
IGNORE -> no alert. Where the catalog names a workflow (48, 74) or nothing (167, 171, 172)
the action is gpumon's reading of it, marked in the comment. The level is gpumon's:
critical when the GPU needs a reset or the node a reboot, warning when the application
(or a trend) needs a look, None when NVIDIA says to ignore it.

Standard library only, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.backends.model import Health

RESTART_APP = "restart the application"
RESET_GPU = "reset the GPU"
REBOOT_NODE = "reboot the node"
CONTACT_SUPPORT = "contact support (RMA)"


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One Xid: its meaning in a few words, NVIDIA's action, gpumon's level."""

    code: int
    meaning: str
    action: str | None  # None: nothing to do (informational)
    level: Health | None  # None: informational, no alert


def _x(code: int, meaning: str, action: str | None, level: Health | None) -> XidInfo:
    return XidInfo(code, meaning, action, level)


_W, _C = Health.WARNING, Health.CRITICAL
XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(8, "GPU stopped processing", RESTART_APP, _W),
        _x(13, "graphics engine exception", RESTART_APP, _W),
        _x(31, "GPU memory page fault", RESTART_APP, _W),
        _x(43, "GPU stopped processing (channel reset)", None, None),  # IGNORE
        _x(45, "preemptive cleanup after earlier errors", None, None),  # follow the other Xid
        _x(46, "GPU stopped processing (timeout)", RESET_GPU, _C),
        _x(48, "uncorrectable ECC error (DBE)", f"drain, then {RESET_GPU}", _C),  # workflow 48
        _x(62, "internal micro-controller halt", RESET_GPU, _C),
        # IGNORE in the catalog; the remap takes effect at the next reset ("reset gpu to
        # activate"), so it is worth a warning.
        _x(63, "row remapping recorded", f"{RESET_GPU} when idle", _W),
        _x(64, "row remapping failed", f"{RESET_GPU}; {CONTACT_SUPPORT} if it repeats", _C),
        _x(74, "NVLink error", f"{RESET_GPU}; check the NVLink connections", _C),  # workflow
        _x(79, "fallen off the bus", REBOOT_NODE, _C),
        _x(92, "high single-bit ECC error rate", f"{CONTACT_SUPPORT} if it persists", _W),
        _x(94, "contained memory error", RESTART_APP, _W),
        _x(95, "uncontained memory error", RESET_GPU, _C),
        _x(109, "context switch timeout", RESET_GPU, _C),
        _x(119, "GSP RPC timeout", RESET_GPU, _C),
        _x(120, "GSP error", RESET_GPU, _C),
        _x(140, "unrecovered ECC error", RESET_GPU, _C),
        _x(143, "GPU initialisation error", RESET_GPU, _C),
        _x(154, "GPU recovery action changed", None, None),  # level from the message
        _x(156, "resource retirement event", f"{RESET_GPU} when idle", _W),
        # IGNORE now, CONTACT_SUPPORT to investigate (the catalog).
        _x(157, "resource retirement failed", f"{CONTACT_SUPPORT} if it repeats", _W),
        _x(158, "GPU fatal timeout", RESET_GPU, _C),
        _x(167, "PCIe fatal timeout", REBOOT_NODE, _C),  # no action in the catalog
        _x(171, "uncorrectable DRAM error (with Xid 48)", f"drain, then {RESET_GPU}", _C),
        _x(172, "uncorrectable SRAM error (with Xid 48)", f"drain, then {RESET_GPU}", _C),
    )
}

# Xid 154's message names the new recovery action (NVML nvmlDeviceGpuRecoveryAction_t).
_RECOVERY = re.compile(r"to 0x([0-9a-fA-F]{1,8})")
RECOVERY_ACTIONS = {
    0: None,
    1: RESET_GPU,
    2: REBOOT_NODE,
    3: "drain peer-to-peer traffic",
    4: f"drain, then {RESET_GPU}",
}


def xid_info(code: int) -> XidInfo:
    """The table's entry; an unlisted code warns and points to NVIDIA's catalog."""
    known = XIDS.get(code)
    return known or XidInfo(code, "unlisted Xid", "see NVIDIA's Xid catalog", Health.WARNING)


def xid_level(code: int, message: str = "") -> Health | None:
    """WARNING/CRITICAL for Xids worth an alert, None for informational ones.

    Xid 154 takes its level from the new recovery action in ``message``: ``0x0 (None)`` is
    informational, any other action (reset, reboot, drain) is critical, and so is a message
    without one (the action could not be read).
    """
    if code == 154:
        m = _RECOVERY.search(message)
        return Health.CRITICAL if m is None or int(m.group(1), 16) != 0 else None
    return xid_info(code).level


def xid_action(code: int, message: str = "") -> str | None:
    """What to do about Xid ``code``: NVIDIA's action (Xid 154: the one its message names)."""
    if code == 154:
        m = _RECOVERY.search(message)
        if m is None:
            return "see the GPU's recovery action (nvidia-smi -q)"
        return RECOVERY_ACTIONS.get(int(m.group(1), 16), "see NVIDIA's Xid catalog")
    return xid_info(code).action


def xid_summary(code: int, message: str = "") -> str:
    """``fallen off the bus — reboot the node``: the meaning and, when there is one, the action."""
    info, action = xid_info(code), xid_action(code, message)
    return f"{info.meaning} — {action}" if action else info.meaning


def worst_xid(codes: Iterable[int]) -> int | None:
    """The code of ``codes`` whose level is worst (critical, then warning, then
    informational; among equals the higher code, but Xid 154 last: NVIDIA's catalog calls
    it informational about another Xid). None when there is none."""
    rank = {None: 0, Health.WARNING: 1, Health.CRITICAL: 2}
    return max(codes, key=lambda c: (rank[xid_level(c)], c != 154, c), default=None)
