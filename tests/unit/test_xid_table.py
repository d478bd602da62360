"""The one Xid table: the kernel-log alerts, the fleet rules and the exporter say the same
level, meaning and action for each code (NVIDIA's Xid catalog, Ampere and later)."""

from __future__ import annotations

import pytest

from gpumon.backends.fleet import NodeRow, Severity, judge
from gpumon.backends.model import Health
from gpumon.backends.parsers import XIDS, parse_xid_line, xid_action, xid_level, xid_summary
from gpumon.backends.parsers.xid import worst_xid

NOW = 1_800_000_000.0
FLEET = {Severity.CRITICAL: Health.CRITICAL, Severity.WARNING: Health.WARNING}


def fleet_level(code: int) -> Health | None:
    row = NodeRow("n", last_seen=NOW, xid_gpus=1, xid_last=code)
    problems = [p for p in judge(row, NOW) if p.rule == "xid"]
    return FLEET[problems[0].severity] if problems else None


def kernel_level(code: int) -> Health | None:
    line = f"NVRM: Xid (PCI:0000:9a:00): {code}, pid=9962, name=python, something happened"
    event = parse_xid_line(line)
    assert event is not None
    return event.level


@pytest.mark.parametrize("code", sorted(c for c in XIDS if c != 154))
def test_the_kernel_log_and_the_fleet_agree_on_every_code(code: int) -> None:
    assert kernel_level(code) == fleet_level(code) == XIDS[code].level


def test_the_levels_the_two_tables_disagreed_on() -> None:
    # Critical in the fleet, warnings in the kernel parser before: NVIDIA says IGNORE (63,
    # 92) and RESTART_APP (94), so they warn.
    assert {c: xid_level(c) for c in (63, 92, 94)} == dict.fromkeys((63, 92, 94), Health.WARNING)
    # Missing from the fleet (so only a warning there): RESET_GPU in the catalog.
    for code in (62, 140, 143, 171, 158, 172, 167):
        assert fleet_level(code) is Health.CRITICAL, code
    # The catalog: 157 is IGNORE now, CONTACT_SUPPORT to investigate.
    assert xid_level(157) is Health.WARNING and "contact support" in (xid_action(157) or "")
    assert xid_level(43) is None and xid_level(45) is None  # informational
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
    assert xid_level(154, to + "0x0 (None)") is None
    assert xid_level(154, to + "0x1 (GPU Reset Required)") is Health.CRITICAL


def test_the_worst_xid_is_by_level_not_by_number() -> None:
    assert worst_xid([79, 154, 45]) == 79  # 154 only says what to do about another one
    assert worst_xid([95, 79]) == 95  # both critical: the higher code
    assert worst_xid([13, 79, 94]) == 79
    assert worst_xid([63, 48]) == 48
    assert worst_xid([157, 45]) == 157
    assert worst_xid([]) is None
