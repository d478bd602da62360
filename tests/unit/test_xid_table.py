"""The one Xid table: each row follows the bucket of NVIDIA's Xid catalog (Ampere and
later) it names, held against tests/fixtures/upstream/nvidia-xid-catalog/catalog.tsv, and
the recovery actions are nvidia-ml-py's; the kernel-log alerts, the fleet rules and the
exporter say the same level, meaning and action for each code."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pynvml  # type: ignore[import-untyped,unused-ignore]
import pytest

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.health import _RECOVERY_TEXT, recovery_action
from gpumon.backends.fleet import NodeRow, judge
from gpumon.backends.model import GpuSample, Health, HostSample
from gpumon.backends.parsers import XIDS, parse_xid_line, xid_action, xid_level, xid_summary
from gpumon.backends.parsers.xid import (
    BUCKETS,
    RECOVERY_ACTIONS,
    XID_45_ALONE,
    XID_45_COMPANY_S,
    XidInfo,
    worst_xid,
)
from gpumon.backends.remote import agent

NOW = 1_800_000_000.0
CATALOG = Path(__file__).parents[1] / "fixtures" / "upstream" / "nvidia-xid-catalog"


def catalog() -> dict[int, dict[str, str]]:
    with (CATALOG / "catalog.tsv").open(newline="") as f:
        return {int(r["code"]): r for r in csv.DictReader(f, delimiter="\t")}


def catalog_bucket(code: int, alone: bool = False) -> str:
    """The bucket the catalog's row names in its "Resolution Bucket (Immediate Action)"
    column; for WORKFLOW_XID_45, the one its next cell names for a solo 45 or a 45 beside
    another Xid; "" where the column holds no bucket (empty, or guidance in words)."""
    row = catalog()[code]
    cell = row["immediate"]
    if cell == "WORKFLOW_XID_45":
        m = re.fullmatch(r"Solo: (\w+) Not Solo: (\w+) \(follow other Xid\)", row["investigatory"])
        assert m is not None, row
        return m.group(1) if alone else m.group(2)
    return cell if re.fullmatch(r"[A-Z0-9_]+", cell) else ""


ROWS: list[tuple[XidInfo, bool]] = [(x, False) for x in XIDS.values()] + [(XID_45_ALONE, True)]


@pytest.mark.parametrize(
    ("info", "alone"),
    ROWS,
    ids=[
        f"{x.code}{'-solo' if a else ''}-{catalog_bucket(x.code, a) or 'no-bucket'}"
        for x, a in ROWS
    ],
)
def test_each_row_follows_the_catalogs_immediate_action_column(info: XidInfo, alone: bool) -> None:
    """The row names the bucket the catalog's Immediate Action column gives it; a row
    without ``ours`` does what ``BUCKETS`` says of that bucket, and a row with it departs
    from it (a deviation named as ours is a real one)."""
    assert info.catalog == catalog_bucket(info.code, alone)
    follows = BUCKETS.get(info.catalog)
    if not info.ours:
        assert follows is not None and (info.action, info.level) == follows
    else:
        assert follows is None or (info.action, info.level) != follows, info


def test_every_catalog_row_is_in_the_table_and_back() -> None:
    assert set(catalog()) == set(XIDS)
    listed = {c: r["mnemonic"] for c, r in catalog().items()}
    assert listed[156] == "RESOURCE_RETIREMENT_EVENT" and listed[169] == "SEC2_HALT_ERROR"


def test_the_rows_the_audit_found_wrong() -> None:
    """Issue 33 point 5: 45 alone restarts the Fabric Manager, beside another Xid follows
    it; 92 is IGNORE; 156 is RESET_GPU (critical); 94 adds "reset the GPU when
    convenient"; 110 and 155 reset the GPU; 160-165 and 169 are the catalog's, not the
    unlisted-Xid warning."""
    assert (xid_level(45), xid_action(45)) == (Health.WARNING, "restart the Fabric Manager service")
    assert (xid_level(45, alone=False), xid_action(45, alone=False)) == (Health.INFO, None)
    assert (xid_level(92), xid_action(92)) == (Health.INFO, None)
    assert (xid_level(156), xid_action(156)) == (Health.CRITICAL, "reset the GPU")
    assert xid_action(94) == "restart the application; reset the GPU when convenient"
    assert {xid_action(c) for c in (110, 155, 169)} == {"reset the GPU"}
    assert {c: xid_level(c) for c in (160, 161, 162)} == dict.fromkeys((160, 161, 162), Health.INFO)
    assert {xid_level(c) for c in (163, 164, 165)} == {Health.WARNING}
    for code in (110, 155, 160, 161, 162, 163, 164, 165, 169):
        assert "unlisted" not in xid_summary(code), code


def test_the_recovery_actions_are_nvml_s() -> None:
    """nvidia-ml-py 13.615.71 (the version the locks pin) defines
    NVML_GPU_RECOVERY_ACTION_NONE..SYSTEM_REBOOT = 0..7: Xid 154's message, the agent's
    field 230 reading and the health rule know each of them."""
    nvml = {
        name.removeprefix("NVML_GPU_RECOVERY_ACTION_"): value
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_GPU_RECOVERY_ACTION_")
    }
    assert nvml == {
        "NONE": 0,
        "GPU_RESET": 1,
        "NODE_REBOOT": 2,
        "DRAIN_P2P": 3,
        "DRAIN_AND_RESET": 4,
        "RECOVER_IMEX_DOMAIN": 5,
        "BUS_RESET": 6,
        "SYSTEM_REBOOT": 7,
    }
    assert set(RECOVERY_ACTIONS) == set(agent.RECOVERY_ACTIONS) == set(nvml.values())
    to = "GPU recovery action changed from 0x0 (None) to "
    assert xid_action(154, to + "0x5") == "recover the IMEX domain"
    assert xid_action(154, to + "0x6") == "reset the GPU's PCIe bus"
    assert xid_action(154, to + "0x7") == "reboot the system"
    assert {xid_level(154, f"{to}0x{v}") for v in (5, 6, 7)} == {Health.CRITICAL}
    # what the agent writes for each, the health rule reads as an action it can say
    for value, spelled in agent.RECOVERY_ACTIONS.items():
        word = recovery_action(GpuSample(index=0, recovery_action=spelled))
        assert word == "none" if value == 0 else word in _RECOVERY_TEXT, (value, spelled, word)


def engine() -> tuple[AlertEngine, list[float]]:
    """An engine past its first sample (kernel lines before one wait for it)."""
    now = [NOW]
    eng = AlertEngine("h1", AlertRules(), clock=lambda: now[0])
    eng.on_sample(HostSample("h1", NOW, None, (GpuSample(index=0),)))
    return eng, now


SOLO = "NVRM: Xid (PCI:0000:2a:00): 45, pid=2418862, name=pt_main_thread, channel 0x00000008"
DBE = "NVRM: Xid (PCI:0000:2a:00): 48, An uncorrectable double bit error (DBE) has been detected"


def xid_alerts(eng: AlertEngine, lines: list[str]) -> list[tuple[str, Health]]:
    return [(a.message.split(":")[0], a.severity) for a in eng.on_kernel_lines(lines)]


def test_a_solo_45_is_said_and_a_45_beside_another_xid_follows_it() -> None:
    eng, _ = engine()
    assert xid_alerts(eng, [SOLO]) == [("Xid 45 on PCI 0000", Health.WARNING)]
    # the DBE's teardown: 48 first, then 45 (and 45 before its 48 in the same read)
    for lines in ([DBE, SOLO.replace("2418862", "7")], [SOLO.replace("2418862", "8"), DBE]):
        eng, _ = engine()
        assert xid_alerts(eng, lines) == [("Xid 48 on PCI 0000", Health.CRITICAL)]
    # a 45 read later, within the window, still follows the 48; after it, it is solo again
    eng, now = engine()
    xid_alerts(eng, [DBE])
    now[0] += XID_45_COMPANY_S
    assert xid_alerts(eng, [SOLO]) == []
    now[0] += 1
    assert xid_alerts(eng, [SOLO.replace("2418862", "9")]) == [
        ("Xid 45 on PCI 0000", Health.WARNING)
    ]
    # another bus's Xid is no company
    eng, _ = engine()
    other = DBE.replace("2a:00", "3a:00")
    assert len(xid_alerts(eng, [other, SOLO])) == 2


def fleet_level(code: int) -> Health:
    """The fleet's level of a window with ``code`` alone (INFO: it says nothing of it)."""
    row = NodeRow("n", last_seen=NOW, xid_gpus=1, xid_last=code)
    problems = [p for p in judge(row, NOW) if p.rule == "xid"]
    return problems[0].severity if problems else Health.INFO


def kernel_level(code: int) -> Health:
    line = f"NVRM: Xid (PCI:0000:9a:00): {code}, pid=9962, name=python, something happened"
    event = parse_xid_line(line)
    assert event is not None
    return event.level


@pytest.mark.parametrize("code", sorted(c for c in XIDS if c != 154))
def test_the_kernel_log_and_the_fleet_agree_on_every_code(code: int) -> None:
    """A line (or a 15-minute window) with this code alone: a 45 is the solo one."""
    assert kernel_level(code) == fleet_level(code) == xid_level(code)
    assert xid_level(code) == (XID_45_ALONE if code == 45 else XIDS[code]).level


def test_the_levels_the_two_tables_disagreed_on() -> None:
    # Critical in the fleet, warnings in the kernel parser before: 63 (IGNORE, but the
    # remap waits for a reset: ours) and 94 (RESTART_APP) warn.
    assert {c: xid_level(c) for c in (63, 94)} == dict.fromkeys((63, 94), Health.WARNING)
    # Missing from the fleet (so only a warning there): RESET_GPU in the catalog.
    for code in (62, 140, 143, 171, 158, 172, 167):
        assert fleet_level(code) is Health.CRITICAL, code
    # The catalog: 157 is IGNORE now, CONTACT_SUPPORT to investigate.
    assert xid_level(157) is Health.WARNING and "contact support" in (xid_action(157) or "")
    assert xid_level(43) is Health.INFO and xid_level(45, alone=False) is Health.INFO
    assert xid_level(9999) is Health.WARNING and xid_action(9999) == "see NVIDIA's Xid catalog"


def test_the_text_carries_the_action_once() -> None:
    assert xid_summary(79) == "fallen off the bus — reboot the node"
    assert xid_summary(13) == "graphics engine exception — restart the application"
    assert xid_summary(95) == "uncontained memory error — reset the GPU"
    assert xid_summary(43) == "GPU stopped processing (channel reset)"  # nothing to do
    line = "NVRM: Xid (PCI:0000:9a:00): 79, pid=9962, name=python, GPU has fallen off the bus."
    event = parse_xid_line(line)
    assert event is not None
    assert event.describe(6) == (
        "Xid 79 on GPU 6: fallen off the bus — reboot the node (PCI 0000:9a:00, pid 9962 python)"
    )
    assert event.describe(6).count("fallen off the bus") == 1


def test_xid_154_takes_its_action_from_the_message() -> None:
    to = "GPU recovery action changed from 0x0 (None) to "
    assert xid_action(154, to + "0x2 (Node Reboot Required)") == "reboot the node"
    assert xid_action(154, to + "0x4 (Drain and Reset)") == "drain, then reset the GPU"
    assert xid_level(154, to + "0x0 (None)") is Health.INFO
    assert xid_level(154, to + "0x1 (GPU Reset Required)") is Health.CRITICAL


def test_the_worst_xid_is_by_level_not_by_number() -> None:
    assert worst_xid([79, 154, 45]) == 79  # 154 only says what to do about another one
    assert worst_xid([95, 79]) == 95  # both critical: the higher code
    assert worst_xid([13, 79, 94]) == 79
    assert worst_xid([63, 48]) == 48
    assert worst_xid([157, 45]) == 157
    assert worst_xid([45, 43]) == 43  # a 45 beside another Xid only follows it
    assert worst_xid([45, 45]) == 45  # alone: the solo 45, a warning
    assert worst_xid([]) is None


def test_the_fleet_says_a_45_alone_and_not_one_beside_another() -> None:
    alone = NodeRow("n", last_seen=NOW, xid_gpus=1, xid_last=45, xids={45: 1})
    (problem,) = [p for p in judge(alone, NOW) if p.rule == "xid"]
    assert problem.severity is Health.WARNING
    assert problem.message.endswith("restart the Fabric Manager service")
    beside = NodeRow("n", last_seen=NOW, xid_gpus=1, xid_last=45, xids={45: 1, 43: 1})
    assert [p for p in judge(beside, NOW) if p.rule == "xid"] == []
