"""The one Xid table: what NVIDIA says each Xid means and what to do, and gpumon's level.

Used by the kernel-log parser (``kernel.py``), the fleet rules (``fleet/model.py``) and the
exporter, so a code means the same everywhere. Meanings and actions are NVIDIA's Xid
catalog for Ampere and later (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
"Resolution Bucket (Immediate Action)"): each row names the bucket it follows (``catalog``),
and ``BUCKETS`` says what gpumon makes of a bucket: RESTART_APP -> restart the application,
RESET_GPU -> reset the GPU, RESTART_BM -> reboot the node, RESTART_FM -> restart the Fabric
Manager, IGNORE -> no alert. The level is gpumon's: critical when the GPU needs a reset or
the node a reboot, warning when the application, a service (or a trend) needs a look,
info (no alert) when NVIDIA says to ignore it. Where a row departs from its bucket, or the
catalog names a workflow (48, 74) or no bucket at all (162-165, 167, 169, 171, 172),
``ours`` says why: those are gpumon's readings, not NVIDIA's.

Xid 45 has two rows: the catalog's WORKFLOW_XID_45 is "Solo: RESTART_FM, Not Solo: IGNORE
(follow other Xid)". ``XIDS[45]`` is the one beside another Xid (the usual case: the
application torn down after 48, 94, 95 ...), ``XID_45_ALONE`` the one without; the callers
that know the GPU's other Xids say which (``alone``).

Standard library only, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import Health

RESTART_APP = "restart the application"
RESET_GPU = "reset the GPU"
REBOOT_NODE = "reboot the node"
RESTART_FM = "restart the Fabric Manager service"
CONTACT_SUPPORT = "contact support (RMA)"

_I, _W, _C = Health.INFO, Health.WARNING, Health.CRITICAL
# The catalog's buckets as gpumon acts on them: (action, level).
BUCKETS: dict[str, tuple[str | None, Health]] = {
    "RESTART_APP": (RESTART_APP, _W),
    "RESET_GPU": (RESET_GPU, _C),
    "RESTART_BM": (REBOOT_NODE, _C),
    "RESTART_FM": (RESTART_FM, _W),
    "IGNORE": (None, _I),
}


# The catalog's rows, looked up by Xid and read field by field, never compared nor
# printed: no generated __eq__, __hash__ or __repr__, each compiled at import on the
# one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class XidInfo:
    """One Xid: its meaning in a few words, the action, gpumon's level, the catalog's
    bucket it follows ("" where the catalog names none) and, where gpumon departs from
    that bucket, why (``ours``)."""

    code: int
    meaning: str
    action: str | None  # None: nothing to do (informational)
    level: Health  # INFO: informational, no alert
    catalog: str = ""
    ours: str = ""


def _x(
    code: int,
    meaning: str,
    catalog: str,
    action: str | None = None,
    level: Health = _I,
    ours: str = "",
) -> XidInfo:
    """A row: the bucket's action and level unless the row says its own (then ``ours``)."""
    if not ours:
        action, level = BUCKETS[catalog]
    return XidInfo(code, meaning, action, level, catalog, ours)


_HALT = "the same halt as 62 (PMU), whose bucket is RESET_GPU"
_DRAIN = f"drain, then {RESET_GPU}"
_WITH_48 = "details of the Xid 48 beside it: 48's workflow (drain, then reset)"
_POWER = "a power-smoothing fact; the catalog's words (no bucket) as the action, a warning"
XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(8, "GPU stopped processing", "RESTART_APP"),
        _x(13, "graphics engine exception", "RESTART_APP"),
        _x(31, "GPU memory page fault", "RESTART_APP"),
        _x(43, "GPU stopped processing (channel reset)", "IGNORE"),
        _x(45, "preemptive cleanup after another Xid", "IGNORE"),  # not solo: the other Xid
        _x(46, "GPU stopped processing (timeout)", "RESET_GPU"),
        _x(48, "uncorrectable ECC error (DBE)", "WORKFLOW_XID_48", _DRAIN, _C, "workflow 48"),
        _x(62, "internal micro-controller halt", "RESET_GPU"),
        # The remap takes effect at the next reset ("reset gpu to activate"): worth a warning.
        _x(63, "row remapping recorded", "IGNORE", f"{RESET_GPU} when idle", _W, "reset to apply"),
        _x(
            64,
            "row remapping failed",
            "RESET_GPU",
            f"{RESET_GPU}; {CONTACT_SUPPORT} if it repeats",  # and the investigatory bucket
            _C,
            "the investigatory CONTACT_SUPPORT after the reset",
        ),
        _x(
            74,
            "NVLink error",
            "WORKFLOW_NVLINK_ERR",
            f"{RESET_GPU}; check the NVLink connections",
            _C,
            "the NVLink workflow: the catalog's text says a reset or reboot clears it",
        ),
        _x(79, "fallen off the bus", "RESTART_BM"),
        _x(92, "high single-bit ECC error rate", "IGNORE"),
        _x(
            94,
            "contained memory error",
            "RESTART_APP",
            f"{RESTART_APP}; {RESET_GPU} when convenient",
            _W,
            "the catalog's own text: reset the GPU when convenient",
        ),
        _x(95, "uncontained memory error", "RESET_GPU"),
        _x(109, "context switch timeout", "RESET_GPU"),
        _x(110, "security fault", "RESET_GPU"),
        _x(119, "GSP RPC timeout", "RESET_GPU"),
        _x(120, "GSP error", "RESET_GPU"),
        _x(140, "unrecovered ECC error", "RESET_GPU"),
        _x(143, "GPU initialisation error", "RESET_GPU"),
        # Level and action from the message: the recovery action it names.
        _x(154, "GPU recovery action changed", "XID_154", None, _I, "the action it names"),
        _x(155, "NVLink link down (software-defined)", "RESET_GPU"),
        _x(156, "resource retirement event", "RESET_GPU"),
        _x(
            157,
            "resource retirement failed",
            "IGNORE",
            f"{CONTACT_SUPPORT} if it repeats",
            _W,
            "the investigatory CONTACT_SUPPORT: no repair is left",
        ),
        _x(158, "GPU fatal timeout", "RESET_GPU"),
        _x(160, "channel retirement (memory marked for repair)", "IGNORE"),
        _x(161, "channel retirement failed", "IGNORE"),
        _x(162, "power smoothing re-engaged", "", None, _I, "no bucket: the circuit is back"),
        _x(
            163,
            "power smoothing disengaged",
            "",
            "no reset needed; for power smoothing, resolve the thermal events"
            " (after a timeout: reload the driver or reset the GPU)",
            _W,
            _POWER,
        ),
        _x(
            164,
            "power smoothing circuit near the end of its life",
            "",
            "watch the power swings; plan to replace the GPU if power smoothing is needed",
            _W,
            _POWER,
        ),
        _x(
            165,
            "power smoothing circuit worn out",
            "",
            "power smoothing is off for good: replace the GPU if the power swings are not"
            " acceptable",
            _W,
            _POWER,
        ),
        _x(167, "PCIe fatal timeout", "", REBOOT_NODE, _C, "no bucket: the GPU is off PCIe"),
        _x(169, "SEC2 micro-controller halt", "", RESET_GPU, _C, _HALT),
        _x(171, "uncorrectable DRAM error (with Xid 48)", "", _DRAIN, _C, _WITH_48),
        _x(172, "uncorrectable SRAM error (with Xid 48)", "", _DRAIN, _C, _WITH_48),
    )
}
# WORKFLOW_XID_45, solo: the application was torn down with no other Xid to follow.
XID_45_ALONE = _x(45, "application torn down, no other Xid", "RESTART_FM")
# How near another Xid on the same GPU makes a 45 "not solo" (ours: the catalog gives no
# window; the other Xid and its 45s come within the same second in the logs seen).
XID_45_COMPANY_S = 60.0

# Xid 154's message names the new recovery action: nvmlDeviceGpuRecoveryAction_t, as
# nvidia-ml-py 13.615.71's pynvml.py defines NVML_GPU_RECOVERY_ACTION_* (0-7).
_RECOVERY = lazy_pattern(r"to 0x([0-9a-fA-F]{1,8})")
RECOVERY_ACTIONS = {
    0: None,  # NONE
    1: RESET_GPU,  # GPU_RESET
    2: REBOOT_NODE,  # NODE_REBOOT
    3: "drain peer-to-peer traffic",  # DRAIN_P2P
    4: _DRAIN,  # DRAIN_AND_RESET
    5: "recover the IMEX domain",  # RECOVER_IMEX_DOMAIN
    6: "reset the GPU's PCIe bus",  # BUS_RESET
    7: "reboot the system",  # SYSTEM_REBOOT
}


def xid_info(code: int, *, alone: bool = True) -> XidInfo:
    """The table's entry; an unlisted code warns and points to NVIDIA's catalog. ``alone``:
    no other Xid on the GPU near it (only Xid 45 reads it; True where nothing says)."""
    if code == 45 and alone:
        return XID_45_ALONE
    known = XIDS.get(code)
    return known or XidInfo(code, "unlisted Xid", "see NVIDIA's Xid catalog", Health.WARNING)


def xid_level(code: int, message: str = "", *, alone: bool = True) -> Health:
    """WARNING/CRITICAL for Xids worth an alert, INFO for informational ones.

    Xid 154 takes its level from the new recovery action in ``message``: ``0x0 (None)`` is
    informational, any other action (reset, reboot, drain, IMEX, bus reset) is critical,
    and so is a message without one (the action could not be read).
    """
    if code == 154:
        m = _RECOVERY.search(message)
        return Health.CRITICAL if m is None or int(m.group(1), 16) != 0 else Health.INFO
    return xid_info(code, alone=alone).level


def xid_action(code: int, message: str = "", *, alone: bool = True) -> str | None:
    """What to do about Xid ``code``: NVIDIA's action (Xid 154: the one its message names)."""
    if code == 154:
        m = _RECOVERY.search(message)
        if m is None:
            return "see the GPU's recovery action (nvidia-smi -q)"
        return RECOVERY_ACTIONS.get(int(m.group(1), 16), "see NVIDIA's Xid catalog")
    return xid_info(code, alone=alone).action


def xid_summary(code: int, message: str = "", *, alone: bool = True) -> str:
    """``fallen off the bus — reboot the node``: the meaning and, when there is one, the action."""
    info, action = xid_info(code, alone=alone), xid_action(code, message, alone=alone)
    return f"{info.meaning} — {action}" if action else info.meaning


def worst_xid(codes: Iterable[int]) -> int | None:
    """The code of ``codes`` whose level is worst (critical, then warning, then
    informational; among equals the higher code, but Xid 154 last: NVIDIA's catalog calls
    it informational about another Xid, and a 45 beside another Xid below that one: it
    only follows it). Xid 45 alone in ``codes`` is the solo one. None when there is none."""
    seen = set(codes)
    alone = seen <= {45}
    return max(
        seen,
        key=lambda c: (xid_level(c, alone=alone).rank, c != 154, c != 45 or alone, c),
        default=None,
    )
