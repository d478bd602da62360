"""The restart's wait for free GPUs does not count memory another container holds: the
job's stop cannot free it (the demo's CT 201 jupyter keeps 6 GiB of GPU 6 after the
drafter dies, issue 26.9), while the job's own memory still counts."""

from __future__ import annotations

from gpumon.backends.actions.plan import GpuReadings, GpuUse, busy_gpus


def test_another_containers_memory_does_not_keep_a_gpu_busy() -> None:
    readings = GpuReadings(
        1e9,
        {
            5: GpuUse(3),
            6: GpuUse(6147, (3187442,), ("host PID 3187442 jupyter-lab in CT201",), 6144),
            7: GpuUse(84_000, (2418875,), ("875 python3 in CT200",)),
        },
    )
    assert busy_gpus(readings, (5, 6, 7), 1024) == [7]
    held = GpuReadings(1e9, {6: GpuUse(6147 + 2048, (3187442, 874), (), 6144)})
    assert busy_gpus(held, (6,), 1024) == [6]  # 2 GiB of the job's own is left
