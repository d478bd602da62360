"""The restart's words (issue 26 point 5): the launcher's PID against the processes on the
job's GPUs, and ranges of numbers."""

from __future__ import annotations

from gpumon.backends.actions.plan import GpuReadings, GpuUse, workers_text
from gpumon.backends.parsers.processes import index_ranges


def readings(pids: dict[int, tuple[int, ...]]) -> GpuReadings:
    return GpuReadings(100.0, {i: GpuUse(4096, p) for i, p in pids.items()})


def test_the_launchers_pid_is_explained_by_its_workers_on_the_gpus() -> None:
    on_gpus = readings({5: (15200,), 6: (15201,), 7: (15202,)})
    assert workers_text(on_gpus, (5, 6, 7), 13025) == "its workers 15200-15202 hold GPUs 5-7"
    assert workers_text(on_gpus, (5, 6, 7), 15201) == ""  # the PID is on a GPU itself
    one = readings({5: (15200,), 6: (), 7: ()})
    assert workers_text(one, (5, 6, 7), 13025) == "its worker 15200 holds GPU 5"
    assert workers_text(readings({5: (), 6: ()}), (5, 6), 13025) == ""  # none listed
    assert workers_text(None, (5, 6), 13025) == ""
    assert workers_text(on_gpus, (5, 6, 7), None) == ""


def test_another_containers_process_on_the_gpus_is_no_worker() -> None:
    # CT 201's jupyter keeps GPU 6 after the drafter's crash: it is not the launch's
    jupyter = GpuUse(10240, (15201, 3187442), foreign_mib=6144, foreign_pids=(3187442,))
    on_gpus = GpuReadings(100.0, {5: GpuUse(4096, (15200,)), 6: jupyter, 7: GpuUse(4096, (15202,))})
    assert workers_text(on_gpus, (5, 6, 7), 13025) == "its workers 15200-15202 hold GPUs 5-7"
    alone = GpuReadings(100.0, {6: GpuUse(6144, (3187442,), foreign_pids=(3187442,))})
    assert workers_text(alone, (6,), 13025) == ""  # only the jupyter on the GPU: no workers


def test_index_ranges() -> None:
    assert index_ranges([7, 5, 6]) == "5-7"
    assert index_ranges([1, 3, 5, 6]) == "1,3,5,6"
    assert index_ranges([0, 1, 2, 4, 10, 11, 12, 13]) == "0-2,4,10-13"
    assert index_ranges([]) == ""
