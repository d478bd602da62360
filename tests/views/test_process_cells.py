"""Process lines and GPU memory flags (pure views)."""

from __future__ import annotations

from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource
from gpumon.tui.views import Role
from gpumon.tui.views.process_cells import memory_flag, process_line

OURS = GpuProcess(
    1234, "python", 95130, "GPU-6", host_pid=2418874, container="200", user="root",
    command="python train.py --cfg drafter.yaml --token-budget 65536", source="host",
)  # fmt: skip
THEIRS = GpuProcess(
    None, "python3", 20582, "GPU-6", host_pid=3187442, container="201", user="root",
    command="/usr/bin/python3 /usr/local/bin/jupyter-lab", source="host",
)  # fmt: skip


def test_a_process_line_fits_its_width_cutting_the_command() -> None:
    line = process_line(OURS, 200)
    assert line.text(200).split() == [
        "CT200", "1234", "root", "python", "train.py", "--cfg", "drafter.yaml",
        "--token-budget", "65536", "92.9G",
    ]  # fmt: skip
    short = line.text(40)
    assert len(short) == 40 and short.startswith("CT200 1234 root python train.py")
    assert "…" in short and short.endswith("92.9G")
    other = process_line(THEIRS, 200)
    assert other.pid == "h3187442" and other.where == "CT201" and other.role is Role.WARNING
    assert line.role is Role.NORMAL


def test_device_file_users_say_which_gpus_and_not_a_made_up_memory() -> None:
    p = GpuProcess(7, "python", None, source=ProcessSource.DEVICE_FILES, gpus=(0, 1, 2, 3, 5),
                   command="python serve.py", user="root")  # fmt: skip
    line = process_line(p, 200)
    assert line.memory == "?" and line.where == "files"
    assert line.command == "python serve.py  (uses GPUs 0-3,5, device files)"


def test_the_row_flags_foreign_memory_first_then_unattributed() -> None:
    gpu = GpuSample(6, uuid="GPU-6", memory_used_mib=95130 + 20582)
    both = HostSample("ct200", 0.0, None, (gpu,), processes=(OURS, THEIRS))
    flag = memory_flag(both, gpu, 200)
    assert flag is not None and flag.role is Role.WARNING
    assert flag.text == "20.1 GiB held by CT 201 jupyter-lab"
    alone = GpuSample(6, uuid="GPU-6", memory_used_mib=95130 + 12288)
    ours = HostSample("ct200", 0.0, None, (alone,), processes=(OURS,))
    unattributed = memory_flag(ours, alone, 200)
    assert unattributed is not None and unattributed.text == "12.0 GiB not attributed"
    exact = GpuSample(6, uuid="GPU-6", memory_used_mib=95130 + 300)  # the driver's own
    assert memory_flag(HostSample("ct200", 0.0, None, (exact,), (OURS,)), exact, 200) is None
