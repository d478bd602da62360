"""The accounting's energy from NVML's counter (issue 39): ``nvmlDeviceGetTotalEnergyConsumption``
answers millijoules since the driver was last loaded (nvml.h's doc comment; an unsigned
long long in nvidia-ml-py's pynvml.py), Volta and newer, NOT_SUPPORTED on older boards.
A sample's joules are the counter's rise since the previous sample (measured); where a
GPU has no counter, or the counter went down (the driver reloaded between the two
samples), power x time (estimated); the agent's NVML reader gives the counter as the
``total_energy_consumption`` cell, which nvidia-smi's ``--help-query-gpu`` does not
list (590.48.01 and 610.57.04 captures), so nvidia-smi is never asked for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.model import GpuSample, HostSample, Source
from gpumon.backends.parsers.nvidia_smi import (
    AGENT_FIELDS,
    ENERGY_FIELDS,
    fields_for_help,
    parse_query_gpu,
)
from gpumon.backends.remote import agent
from gpumon.backends.usage.account import ESTIMATED, MEASURED, Tally, energy

T0 = 1_800_000_000.0
CAPTURES = Path(__file__).parents[1] / "fixtures" / "nvidia" / "real-captures"


def gpu(index: int, energy_mj: int | None, power: float | None = 300.0) -> GpuSample:
    return GpuSample(
        index=index, uuid=f"GPU-{index}", memory_used_mib=0, utilization_pct=0.0,
        power_w=power, energy_mj=energy_mj,
    )  # fmt: skip


def test_the_counters_rise_is_the_energy_measured() -> None:
    assert energy(gpu(0, 1_250_500), 1_000_000, 2.0) == (250.5, MEASURED)


def test_a_counter_that_went_down_the_driver_reloaded_is_power_x_time() -> None:
    # what the reloaded counter holds began at an unknown moment: not this interval's
    assert energy(gpu(0, 40_000), 9_000_000, 2.0) == (600.0, ESTIMATED)


def test_without_a_counter_on_both_samples_it_is_power_x_time_or_nothing() -> None:
    assert energy(gpu(0, 1_000), None, 2.0) == (600.0, ESTIMATED)  # its first reading
    assert energy(gpu(0, None), 1_000, 2.0) == (600.0, ESTIMATED)  # NOT_SUPPORTED now
    assert energy(gpu(0, None, power=None), None, 2.0) == (None, ESTIMATED)  # never 0


def test_the_tally_sums_each_gpus_rise_and_says_which_were_estimated() -> None:
    tally = Tally(AlertRules())

    def add(t: float, *gpus: GpuSample) -> None:
        tally.add(HostSample("h", t, Source.AGENT_NVML, gpus, ()), (), {}, 5.0)

    add(T0, gpu(0, 5_000_000), gpu(1, None))
    add(T0 + 2, gpu(0, 5_700_000), gpu(1, None))  # GPU 0 drew 700 J; GPU 1 300 W x 2 s
    assert tally.joules == {(0, MEASURED): 700.0, (1, ESTIMATED): 600.0}
    add(T0 + 100, gpu(0, 9_000_000), gpu(1, None))  # a gap: not counted, but read
    add(T0 + 102, gpu(0, 9_100_000), gpu(1, None))
    assert tally.joules[(0, MEASURED)] == 800.0  # the rise after the gap, not across it
    add(T0 + 104, gpu(0, 20_000), gpu(1, None))  # reloaded: power x time for this span
    add(T0 + 106, gpu(0, 420_000), gpu(1, None))  # and the new count's rise after it
    assert tally.joules == {(0, MEASURED): 1200.0, (0, ESTIMATED): 600.0, (1, ESTIMATED): 2400.0}
    rows = [row for (_, index, *_), row in tally.rows.items() if index == 0]
    assert sum(row[3] for row in rows) == pytest.approx(1800.0)


def test_only_counters_is_measured_not_estimated() -> None:
    tally = Tally(AlertRules())
    for t, mj in ((T0, 1_000), (T0 + 1, 301_000)):
        tally.add(HostSample("h", t, Source.AGENT_NVML, (gpu(0, mj),), ()), (), {}, 5.0)
    assert tally.joules == {(0, MEASURED): 300.0} and not tally.estimated


class _Nvml:
    """The calls nvml_gpu_rows makes for these fields, as pynvml answers them."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_ResetRequired(NVMLError):
        pass

    def __init__(self, energy: list[int | None]) -> None:
        self.energy = energy

    def nvmlDeviceGetCount(self) -> int:
        return len(self.energy)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        got = self.energy[h]
        if got is None:
            raise self.NVMLError_NotSupported()
        return got


def test_the_agent_reads_the_counter_and_not_supported_is_none() -> None:
    fields = ("index", "total_energy_consumption")
    rows = agent.nvml_gpu_rows(_Nvml([123_456_789_012, None]), fields)
    gpus = parse_query_gpu(rows, fields).gpus
    assert [(g.index, g.energy_mj, g.health.name) for g in gpus] == [
        (0, 123_456_789_012, "OK"),
        (1, None, "OK"),  # NOT_SUPPORTED: absent, not a problem with the GPU
    ]


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("linux-*.txt")), ids=lambda p: p.stem)
def test_nvidia_smi_is_not_asked_for_a_field_it_does_not_know(capture: Path) -> None:
    text = capture.read_text(errors="replace")
    match = re.search(r"# \$ nvidia-smi --help-query-gpu\n#+\n(.*?)\n#{20,}", text, re.S)
    if match is None:
        pytest.skip("no --help-query-gpu in this capture")
    asked = fields_for_help(match.group(1), AGENT_FIELDS)
    assert "power.draw" in asked and "total_energy_consumption" not in asked


def test_the_agent_never_asks_nvidia_smi_for_the_counter() -> None:
    # its nvidia-smi reader drops these even where it cannot read the help's field names
    assert set(agent.NVML_ONLY_FIELDS) == set(ENERGY_FIELDS)
    assert "total_energy_consumption" in AGENT_FIELDS
