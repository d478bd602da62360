"""The detail view's health-facts line (issue 27 point 3): every fact in a few words,
n/a for what the driver does not report (never 0), coloured by what it shows."""

from __future__ import annotations

from gpumon.backends.model import GpuSample
from gpumon.tui.views.gpu_cells import Role, health_facts_cell

HEALTHY = GpuSample(
    index=6,
    clocks_event_reasons=0x4,
    ecc_uncorrected=0,
    ecc_corrected=0,
    pcie_gen=5,
    pcie_gen_max=5,
    pcie_width=16,
    pcie_width_max=16,
    rows_pending=False,
    rows_failure=False,
    recovery_action="None",
)


def test_a_healthy_gpu_reads_as_muted_facts() -> None:
    cell = health_facts_cell(HEALTHY)
    assert cell.text == (
        "PCIe gen5/5 x16/16  clocks power cap  ECC 0 unc 0 corr  rows ok  recovery none"
    )
    assert cell.role is Role.MUTED


def test_a_gpu_that_reports_nothing_reads_na_not_zero() -> None:
    cell = health_facts_cell(GpuSample(index=0))
    assert cell.text == ("PCIe n/a  clocks n/a  ECC n/a unc n/a corr  rows n/a  recovery n/a")
    assert cell.role is Role.MUTED


def test_a_downtrained_link_and_a_failed_remap_colour_the_line() -> None:
    from dataclasses import replace

    narrow = health_facts_cell(replace(HEALTHY, pcie_width=4))
    assert "x4/16 downtrained" in narrow.text and narrow.role is Role.WARNING
    failed = health_facts_cell(replace(HEALTHY, pcie_width=4, rows_failure=True))
    assert "rows remap FAILED" in failed.text and failed.role is Role.CRITICAL
