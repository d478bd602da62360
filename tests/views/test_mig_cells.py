"""A MIG GPU's lines under its row (``mig_cells``) and its row's memory cells: each GPU
instance's own memory coloured against the host's thresholds, the not-available line
where no instance was read, nothing off MIG; the row says ``MIG`` with no bar."""

from __future__ import annotations

from gpumon.backends.model import (
    MIG_NOT_AVAILABLE,
    GpuProcess,
    GpuSample,
    HostSample,
    MigInstance,
)
from gpumon.tui.views.gpu_cells import Role, gpu_cells, mig_cells

UUID = "GPU-95d3a06c"
GPU = GpuSample(index=7, uuid=UUID, memory_used_mib=60000, memory_total_mib=97887, mig_mode=True)
FULL = MigInstance(UUID, 5, "1g.24gb", 23936, 23700, 236, pids=(2419511,))
ROOMY = MigInstance(UUID, 1, "2g.48gb", 47872, 36000, 11872)
PROC = GpuProcess(pid=1511, name="python3", memory_mib=23680, gpu_uuid=UUID, host_pid=2419511)


def sample(*instances: MigInstance, gpu: GpuSample = GPU) -> HostSample:
    return HostSample("box", 0.0, None, (gpu,), (PROC,), mig=instances)


def test_each_instance_is_judged_on_its_own_memory() -> None:
    roomy, full = mig_cells(sample(ROOMY, FULL), GPU, 95.0, 98.5)
    assert roomy.text == "GI 1 2g.48gb  35.2/46.8GiB 75%  util n/a: no processes"
    assert roomy.role == Role.NORMAL
    assert full.text == "GI 5 1g.24gb  23.1/23.4GiB 99%  util n/a: 1511 python3 23.1GiB"
    assert full.role == Role.CRITICAL  # the whole GPU is at 61 %: only its slice is full


def test_instances_not_read_say_so_and_a_gpu_off_mig_has_no_lines() -> None:
    (line,) = mig_cells(sample(), GPU, 95.0, 98.5)
    assert (line.text, line.role) == (MIG_NOT_AVAILABLE, Role.WARNING)
    plain = GpuSample(index=7, uuid=UUID, memory_used_mib=60000, memory_total_mib=97887)
    assert mig_cells(sample(FULL, gpu=plain), plain, 95.0, 98.5) == ()


def test_the_mig_row_says_mig_with_no_bar() -> None:
    cells = gpu_cells(GPU, None)
    assert (cells.memory.text, cells.memory_pct.text, cells.fraction) == ("MIG", "", None)
    assert cells.util.text == "n/a"


def test_a_filling_instance_says_when_it_is_full() -> None:
    roomy, filling = mig_cells(sample(ROOMY, FULL), GPU, 99.9, 99.95, {5: 41.0})
    assert filling.text.startswith("GI 5 1g.24gb  23.1/23.4GiB 99% full in ~41s  util n/a")
    assert filling.role == Role.WARNING  # under this host's thresholds, warned by its trend
    assert "full in" not in roomy.text
