"""The restart's wait for free GPUs (issue 36 point 3) counts what the job needs against
what is free, other containers' memory included: it neither passes blind (CT 201's
jupyter keeps 6 GiB of GPU 6 after the drafter dies of CUDA OOM, and the drafter needs
more than what is left) nor waits for ever (the holder is named, and the step fails after
its timeout); a GPU that has room does not wait; the user may go on anyway. Waits run on
a FakeClock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.backends.actions import JobRecord, JobStatus, JobTarget, merge_params
from gpumon.backends.actions.plan import (
    ActionPlan,
    Blocker,
    GpuReadings,
    GpuUse,
    Holder,
    in_the_way,
    job_needs,
    room_verdict,
)
from gpumon.backends.actions.run import JobRun, StepFailed
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.model import GpuProcess, ProcessSource
from gpumon.backends.parsers.oom import LogScanner
from gpumon.backends.transport.local import LocalTransport
from gpumon.backends.workloads import JobMemory

from waiting import FakeClock

CAPACITY = 97250  # the simulated RTX PRO 6000: used + free
JUPYTER = Holder("CT 201 jupyter-lab", "jupyter-lab", 6144, 3187442)
OOM_LINES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia" / "oom_variants"
FIXTURE = OOM_LINES / "torch_oom_msg_alloc_conf_variant.txt"
LXC_FIXTURE = OOM_LINES / "torch_oom_in_lxc.txt"
NEED = 93064  # the drafter's 91016 MiB on GPU 6 at its OOM, and the 2 GiB it tried


def gpu(used: int, *others: Holder) -> GpuUse:
    held = sum(h.mib or 0 for h in others)
    pids = tuple(h.host_pid for h in others if h.host_pid is not None)
    return GpuUse(used, pids, (), held, pids, CAPACITY, others)


def test_another_containers_memory_does_not_keep_a_gpu_busy_when_the_need_is_not_known() -> None:
    assert room_verdict(6, gpu(6147, JUPYTER), None, 1024) == (True, None)
    assert room_verdict(6, gpu(6147 + 2048, JUPYTER), None, 1024) == (False, None)  # its own
    assert room_verdict(5, GpuUse(None), None, 1024) == (False, None)  # not reported


def test_a_gpu_with_room_for_the_need_does_not_wait() -> None:
    # another job of the same container keeps 40 GiB of GPU 7: the drafter's 30 GiB fit
    other = GpuUse(40_960, (875,), ("875 python3 in CT200",), capacity_mib=CAPACITY)
    assert room_verdict(7, other, 30_720, 1024) == (True, None)
    assert room_verdict(7, other, 60_000, 1024) == (False, None)  # not its: waits


def test_a_holder_that_leaves_too_little_is_in_the_way_unless_restarting_anyway() -> None:
    ready, blocker = room_verdict(6, gpu(6147, JUPYTER), NEED, 1024)
    assert not ready and blocker is not None
    assert blocker.holders == (JUPYTER,) and blocker.room_mib == CAPACITY - 6147
    assert room_verdict(6, gpu(6147, JUPYTER), NEED, 1024, despite=True) == (True, None)
    assert room_verdict(6, gpu(3), NEED, 1024) == (True, None)  # once it is gone


def test_a_job_that_ran_out_by_itself_is_not_held_back() -> None:
    """Nothing another container could free is waited for: a GPU with no other container's
    memory, or a need the whole GPU would not hold (its own leak: what it held at its OOM
    and what it tried are more than the GPU has), is ready once the job's memory went."""
    assert room_verdict(6, gpu(3), CAPACITY + 4096, 1024) == (True, None)
    beyond = CAPACITY + 1024  # more than the GPU holds even without the jupyter
    assert room_verdict(6, gpu(6147, JUPYTER), beyond, 1024) == (True, None)
    job = JobConfig(name="drafter", gpus=(6,))
    readings = GpuReadings(1e9, {6: gpu(6147, JUPYTER)})
    assert in_the_way(readings, job, {6: beyond}) == ()  # not theirs to free
    assert in_the_way(GpuReadings(1e9, {6: gpu(3)}), job, {6: NEED}, ran_out=6) == ()


def test_the_cause_still_on_the_gpu_that_ran_out_is_said_before_the_plan() -> None:
    job = JobConfig(name="drafter", gpus=(5, 6, 7))
    readings = GpuReadings(1e9, {5: gpu(0), 6: gpu(6147, JUPYTER), 7: gpu(2)})
    (cause,) = in_the_way(readings, job, {}, ran_out=6)
    assert cause.text() == "the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB"
    assert cause.pids == "host PID 3187442"
    assert in_the_way(readings, job, {}, ran_out=None) == ()  # need unknown, not the cause
    (short,) = in_the_way(readings, job, {6: NEED}, ran_out=None)
    assert short.text() == (
        "GPU 6 cannot hold drafter: it needs 90.9 GiB, 89.0 GiB left; "
        "CT 201 jupyter-lab holds 6.0 GiB"
    )
    assert in_the_way(readings, job, {6: 80_000}) == ()  # fits beside it


def test_the_need_is_the_config_else_what_the_job_was_seen_to_need() -> None:
    memory = JobMemory()
    drafter = GpuProcess(875, "python3", 91_016, source=ProcessSource.CONTAINER_NVML.value)
    memory.observe(6, [drafter])
    memory.observe(6, [GpuProcess(875, "python3", 40_000)])  # the most it held stays
    memory.observe(5, [GpuProcess(874, "python3", None)])  # not reported: not seen
    memory.oom(6, 2048)
    job = JobConfig(name="drafter", gpus=(5, 6, 7))
    assert job_needs(job, memory) == {6: NEED} and memory.ran_out == 6
    assert job_needs(JobConfig(name="d", gpus=(5, 6), need_mib=50_000), memory) == {
        5: 50_000,
        6: 50_000,
    }
    memory.restarted()
    assert memory.ran_out is None and job_needs(job, memory) == {6: NEED}
    # the log's OOM line may come before the sample that shows what the job held then
    late = JobMemory()
    late.observe(6, [GpuProcess(875, "python3", 88_000)])
    late.oom(6, 2048)
    late.observe(6, [GpuProcess(875, "python3", 91_016)])
    assert late.need_mib(6) == NEED and late.need_mib(5) is None


def test_the_need_counts_what_the_oom_line_says_the_job_held_when_no_sample_saw_it() -> None:
    # Samples come seconds apart; the job's peak is the instant before its OOM. PyTorch's
    # line says it: "this process has 93.70 GiB memory in use", or inside the LXC
    # "Process <host PID> has …" (the job's own host PIDs, not CT 201's jupyter).
    [bare] = LogScanner().scan(FIXTURE.read_text().splitlines())
    memory = JobMemory()
    memory.observe(6, [GpuProcess(875, "python3", 88_000)])  # the last sample before
    memory.oom(6, 2048, bare.in_use_bytes, bare.in_use_by_pid)
    assert memory.need_mib(6) == 95_949 + 2048  # 93.70 GiB, rounded up
    [lxc] = LogScanner().scan(LXC_FIXTURE.read_text().splitlines())
    inside = JobMemory()
    inside.observe(6, [GpuProcess(875, "python3", 80_000, host_pid=2418873)])
    inside.oom(6, 2048, lxc.in_use_bytes, lxc.in_use_by_pid)
    assert inside.need_mib(6) == 89_805 + 2048  # its 87.70 GiB; the jupyter's 6 GiB not
    # what was seen stays where the line says less (a later, bigger sample)
    seen = JobMemory()
    seen.observe(6, [GpuProcess(875, "python3", 96_500)])
    seen.oom(6, 2048, bare.in_use_bytes)
    assert seen.need_mib(6) == 96_500 + 2048


def _run(
    read: Callable[[], GpuReadings | None],
    clock: FakeClock,
    *,
    needs: dict[int, int],
    in_the_way: tuple[Blocker, ...] = (),
    despite: bool = False,
) -> tuple[JobRun, list[str]]:
    job = JobConfig(name="drafter", gpus=(5, 6, 7), start="train")
    host = HostConfig(name="ct200", kind="local")
    status = JobStatus("drafter", JobRecord("drafter", 100, 100, "setsid", "/l"), log_path="/l")
    plan = ActionPlan(
        action="restart",
        host="ct200",
        host_label="local",
        job=job,
        params=merge_params(job),
        start_command="train",
        stop_command=None,
        status=status,
        in_the_way=in_the_way,
        despite=despite,
        needs=needs,
    )
    said: list[str] = []
    target = JobTarget(host, LocalTransport(host), read)
    run = JobRun(
        plan,
        target,
        progress=lambda _step, message: said.append(message),
        free_timeout=120.0,
        clock=clock.time,
        sleep=clock.sleep,
    )
    return run, said


async def test_the_wait_names_the_holder_and_gives_up_after_its_timeout() -> None:
    clock = FakeClock()
    held = GpuReadings(1e9, {5: gpu(0), 6: gpu(6147, JUPYTER), 7: gpu(2)})
    run, said = _run(lambda: held, clock, needs={5: 86_194, 6: NEED, 7: 86_178})
    start = clock.time()
    with pytest.raises(StepFailed) as failed:
        await run.wait_free()
    assert clock.time() - start == pytest.approx(120.0, abs=1.0)  # bounded, not for ever
    assert failed.value.message == (
        "GPUs have no room for drafter after 120 s: GPU 6: drafter needs 90.9 GiB, "
        "89.0 GiB free: CT 201 jupyter-lab holds 6.0 GiB (host PID 3187442); stop it, "
        "then restart"
    )
    assert said[0] == (
        "GPU 6: drafter needs 90.9 GiB, 89.0 GiB free: CT 201 jupyter-lab holds 6.0 GiB "
        "(host PID 3187442): stop it to go on"
    )


async def test_the_wait_goes_on_once_the_holder_is_stopped() -> None:
    clock = FakeClock()
    start = clock.time()
    held = GpuReadings(1e9, {5: gpu(0), 6: gpu(6147, JUPYTER), 7: gpu(2)})
    gone = GpuReadings(1e9, {5: gpu(0), 6: gpu(3), 7: gpu(2)})

    def read() -> GpuReadings:  # K stopped it 10 s into the wait
        return held if clock.time() - start < 10.0 else gone

    run, said = _run(read, clock, needs={6: NEED})
    await run.wait_free()
    assert 10.0 <= clock.time() - start < 12.0
    assert said[-1].startswith("GPUs free: GPU 5: 0 MiB, GPU 6: 3 MiB")


async def test_restarting_anyway_waits_only_for_the_jobs_own_memory() -> None:
    clock = FakeClock()
    held = GpuReadings(1e9, {5: gpu(0), 6: gpu(6147, JUPYTER), 7: gpu(2)})
    (cause,) = in_the_way(held, JobConfig(name="drafter", gpus=(5, 6, 7)), {}, ran_out=6)
    run, said = _run(lambda: held, clock, needs={6: NEED}, in_the_way=(cause,), despite=True)
    start = clock.time()
    await run.wait_free()
    assert clock.time() == start  # nothing to wait for
    assert said[-1].endswith(
        "(restarting anyway: the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB)"
    )


def test_the_demos_oom_line_says_a_need_the_jupyter_is_in_the_way_of() -> None:
    """The demo drafter's OOM line said the whole GPU's memory as its process's ("this
    process has 94.86 GiB" beside CT 201's 6 GiB), so the need read from it was more than
    the GPU holds, and the automatic restart's wait passed beside the jupyter as if it
    were not the jupyter's to free (CI: test_auto_restart_brings_the_demo_drafter_back).
    The line's figure is the drafter's own: the need fits the GPU, not beside the jupyter."""
    from gpumon.backends.sim.job import oom_message
    from gpumon.backends.sim.scenario import JUPYTER_MIB, MEMORY_USABLE_MIB

    [oom] = LogScanner().scan(["CUDA_VISIBLE_DEVICES=5,6,7", oom_message()])
    memory = JobMemory()
    memory.oom(6, 2048, oom.in_use_bytes, oom.in_use_by_pid)
    need = memory.need_mib(6)
    assert need is not None
    assert MEMORY_USABLE_MIB - JUPYTER_MIB < need <= MEMORY_USABLE_MIB, need
