"""job_stalled: the NCCL watchdog lines, torchrun's restarts and root cause, and the stall
rule with its false positives (a checkpoint save, a finished job, no GPU processes)."""

from __future__ import annotations

from dataclasses import replace

from gpumon.backends.alerts.engine import Alert, AlertEngine, AlertRules
from gpumon.backends.alerts.incident import incidents, line
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import GpuProcess, GpuRef, GpuSample, Health, HostSample
from gpumon.backends.parsers.collective import CollectiveScanner
from gpumon.backends.workloads.watch import Workloads

WATCHDOG = (
    "[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=131072000, "
    "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
)
STUCK = (
    "[rank1]:[E1111 17:10:53.1 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
    "monitoring enqueued collectives."
)
DUMP = (
    "[rank6]:[E703 21:51:54.112142364 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID "
    "0(default_pg) Rank 6] Received a dump signal due to a collective timeout from  rank 7 and "
    "we will try our best to dump the debug info. Last enqueued NCCL work: 56116, last "
    "completed NCCL work: 56116."
)
FAILED = (
    "[rank2]:[E606 09:09:09.1 ProcessGroupNCCL.cpp:685] [Rank 2] Some NCCL operations have "
    "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
    "operations might run on corrupted/incomplete data."
)
RESTART = (
    "[2026-12-01 10:00:00,000] torch.distributed.elastic.agent.server.api: [INFO] [default] "
    "Worker group FAILED. 3/3 attempts left; will restart worker group"
)
ROOT_CAUSE = """\
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_10:11:45
  host      : ct200
  rank      : 3 (local_rank: 3)
  exitcode  : -6 (pid: 4121)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4121
============================================================"""
GPUS = (4, 5, 6, 7)


def step(n: int) -> str:
    return f"step {n}/5000 | loss 2.3100 | 12.8 Ktok/s | tokens {n * 0.0128:.2f}M"


def test_each_collective_timeout_spelling_names_its_rank() -> None:
    got = [CollectiveScanner().scan(x) for x in (WATCHDOG, STUCK, DUMP, FAILED)]
    assert [g.kind if g else None for g in got] == ["timeout"] * 4
    first = got[0]
    assert first is not None
    assert (first.rank, first.op, first.seq, first.timeout_s) == (3, "ALLREDUCE", 8812, 600.0)
    assert first.text == "rank 3 timed out in ALLREDUCE #8812 after 600 s"
    assert [g.rank for g in got if g] == [3, 1, 7, 2]
    assert CollectiveScanner().scan(step(10)) is None
    assert CollectiveScanner().scan("NCCL INFO Channel 00/24 : 0 1 2 3") is None


def test_torchrun_restart_and_root_cause() -> None:
    scanner = CollectiveScanner()
    restart = scanner.scan(RESTART)
    assert restart is not None and (restart.attempts_left, restart.max_restarts) == (3, 3)
    found = [scanner.scan(x) for x in ROOT_CAUSE.splitlines()]
    roots = [f for f in found if f is not None]
    assert len(roots) == 1 and (roots[0].rank, roots[0].exit_code) == (3, -6)
    assert roots[0].text == "first failure: rank 3 exited with -6 (SIGABRT)"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def setup(
    stall_after_s: float | None = 30.0, log: str | None = "/l/d.log"
) -> tuple[Workloads, AlertEngine, Clock]:
    job = JobConfig(name="drafter", gpus=GPUS, log=log, stall_after_s=stall_after_s)
    host = HostConfig(name="box", kind="local", jobs=(job,))
    clock = Clock()
    return Workloads(host), AlertEngine("box", AlertRules(), clock), clock


def sample(t: float, held: bool = True) -> HostSample:
    gpus = tuple(GpuSample(i, uuid=f"GPU-{i}") for i in range(8))
    procs = tuple(GpuProcess(100 + i, "python", 80000, gpu_uuid=f"GPU-{i}") for i in GPUS)
    return HostSample("box", t, None, gpus, procs if held else ())


def feed(
    w: Workloads, engine: AlertEngine, clock: Clock, lines: list[str], held: bool = True
) -> list[Alert]:
    w.on_log("job:drafter", "/l/d.log", lines, clock.t, backlog=False)
    w.apply_alerts(engine, clock.t)
    w.judge_stalls(engine, sample(clock.t, held), clock.t)
    return [a for a in engine.active() if a.kind == "job_stalled"]


def run_steps(w: Workloads, engine: AlertEngine, clock: Clock, n: int = 10) -> None:
    for k in range(n):
        clock.t += 1.0
        assert feed(w, engine, clock, [step(k)]) == []


def test_watchdog_line_is_a_stall_at_once_with_rank_gpu_op_and_seq() -> None:
    w, engine, clock = setup(stall_after_s=None)  # default: 120 s, far away
    run_steps(w, engine, clock)
    clock.t += 3.0
    stalled = feed(w, engine, clock, [WATCHDOG])
    assert len(stalled) == 1
    alert = stalled[0]
    assert alert.severity is Health.CRITICAL and alert.job == "drafter" and alert.gpu == 7
    assert alert.message == (
        "drafter stalled: rank 3 (GPU 7) timed out in ALLREDUCE #8812 after 600 s; "
        "no step for 10 min"
    )
    (incident,) = incidents(engine.active())
    assert line(incident, "r restart") == f"{alert.message} — r restart"
    clock.t += 1.0
    assert feed(w, engine, clock, [step(11)]) == []  # progress again: resolved by itself
    assert not engine.history()[0].active


def test_held_gpus_and_a_silent_log_stall_after_stall_after_s() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    clock.t += 29.0
    assert feed(w, engine, clock, []) == []
    clock.t += 2.0
    (alert,) = feed(w, engine, clock, [])
    assert alert.message == "drafter stalled: no step for 31 s"


def test_default_stall_after_is_five_median_steps_at_least_120_s() -> None:
    w, engine, clock = setup(stall_after_s=None)
    run_steps(w, engine, clock)
    clock.t += 119.0
    assert feed(w, engine, clock, []) == []
    clock.t += 2.0
    assert len(feed(w, engine, clock, [])) == 1


def test_a_silent_log_from_the_start_counts_from_when_the_gpus_were_held() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    assert feed(w, engine, clock, []) == []
    clock.t += 31.0
    (alert,) = feed(w, engine, clock, [])
    assert "no progress line in 31 s while its GPUs are held" in alert.message


def test_not_stalled_while_a_checkpoint_save_is_announced() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    clock.t += 1.0
    assert feed(w, engine, clock, ["Saving model checkpoint to /ckpt/checkpoint-500"]) == []
    clock.t += 60.0  # twice stall_after_s: still inside the save's grace
    assert feed(w, engine, clock, []) == []
    clock.t += 70.0  # past 4 x stall_after_s: a save this long is a stall
    (alert,) = feed(w, engine, clock, [])
    assert "saving model checkpoint" in alert.message


def test_not_stalled_during_an_announced_evaluation() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    assert feed(w, engine, clock, ["***** Running Evaluation *****"]) == []
    clock.t += 60.0
    assert feed(w, engine, clock, []) == []


def test_a_finished_job_is_not_stalled() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    clock.t += 1.0
    feed(w, engine, clock, ["step 5000/5000 | loss 1.9 | 12.8 Ktok/s"])
    clock.t += 300.0
    assert feed(w, engine, clock, []) == []


def test_a_job_without_gpu_processes_is_not_stalled() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    clock.t += 300.0
    assert feed(w, engine, clock, [], held=False) == []
    assert feed(w, engine, clock, [WATCHDOG], held=False) == []


def test_restarts_and_root_cause_reach_the_job_and_its_crash_verdict() -> None:
    w, engine, clock = setup()
    run_steps(w, engine, clock, 3)
    feed(w, engine, clock, [RESTART, *ROOT_CAUSE.splitlines()])
    job = w.jobs["drafter"]
    assert job.snapshot_json()["elastic_restarts"] == 1
    assert job.snapshot_json()["root_cause"] == "first failure: rank 3 exited with -6 (SIGABRT)"
    engine.raise_alert("job_crashed", Health.CRITICAL, "ChildFailedError", job="drafter")
    w.apply_alerts(engine, clock.t)
    assert job.crash_reason == (
        "crash (first failure: rank 3 exited with -6 (SIGABRT); after 1 torchrun restart)"
    )


def test_a_log_the_preset_cannot_read_is_not_silent() -> None:
    w, engine, clock = setup(stall_after_s=30.0)
    for _ in range(10):
        clock.t += 20.0
        assert feed(w, engine, clock, ["epoch 1 batch 17 (a line the kv preset skips)"]) == []


def test_a_job_without_a_log_is_never_stalled() -> None:
    w, engine, clock = setup(stall_after_s=30.0, log=None)
    assert feed(w, engine, clock, []) == []
    clock.t += 300.0
    assert feed(w, engine, clock, []) == []


def test_a_crash_verdict_is_rendered_from_its_facts_and_its_gpu_is_the_samples() -> None:
    """Issue 35.3: the crash's GPU travels as a ``GpuRef`` (the newest sample's, with its
    UUID), not as " on GPU 6" in a text read back; the words are the same ("OOM on GPU 6"),
    and who else held the GPU joins the log's facts instead of being dropped beside them."""
    w, engine, clock = setup()
    run_steps(w, engine, clock, 3)
    engine.raise_alert("cuda_oom", Health.CRITICAL, "CUDA out of memory", job="drafter", gpu=6)
    w.apply_alerts(engine, clock.t, sample(clock.t).gpu_refs)
    job = w.jobs["drafter"]
    assert job.crash_gpu == GpuRef(6, "GPU-6") and job.crash_reason == "OOM on GPU 6"
    job.crash_holder = "GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
    assert job.crash_reason == "OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)"
    assert job.snapshot_json()["crash_reason"] == job.crash_reason
    job.restarted(clock.t)
    cleared: list[object] = [job.crash_reason, job.crash_gpu, job.crash_holder]
    assert cleared == [None, None, None]
    feed(w, engine, clock, [RESTART, *ROOT_CAUSE.splitlines()])
    assert job.root_cause is not None
    job.mark_crashed("crash", clock.t, gpu=GpuRef(6), facts=(job.root_cause.text,))
    job.crash_holder = "GPU 6: 6.0 GiB held by CT 201 jupyter-lab"
    assert job.crash_reason == (
        "crash on GPU 6 (first failure: rank 3 exited with -6 (SIGABRT); "
        "GPU 6: 6.0 GiB held by CT 201 jupyter-lab)"
    )
    w2, engine2, clock2 = setup()
    engine2.raise_alert("cuda_oom", Health.CRITICAL, "CUDA out of memory", job="drafter", gpu=9)
    w2.apply_alerts(engine2, clock2.t)  # no sample (yet): the index alone
    assert w2.jobs["drafter"].crash_gpu == GpuRef(9)
    assert w2.jobs["drafter"].crash_reason == "OOM on GPU 9"


def spinning(t: float) -> HostSample:
    """The job's GPUs in NCCL's busy-wait: 100 % utilisation on 90 W of 700 W."""
    gpus = tuple(
        GpuSample(i, uuid=f"GPU-{i}", utilization_pct=100.0, power_w=90.0, power_limit_w=700.0)
        for i in range(8)
    )
    procs = tuple(GpuProcess(100 + i, "python", 80000, gpu_uuid=f"GPU-{i}") for i in GPUS)
    return HostSample("box", t, None, gpus, procs)


def judge(w: Workloads, engine: AlertEngine, clock: Clock, s: HostSample) -> list[Alert]:
    w.judge_stalls(engine, s, clock.t)
    return [a for a in engine.active() if a.kind == "job_stalled"]


def test_the_nccl_spin_warns_of_a_stall_early_then_the_verdict_is_critical() -> None:
    """Issue 36.1: steps stop while every rank spins at full utilisation on little power:
    a warning once the silence passes SPIN_EARLY_S, long before stall_after_s (here the
    default 120 s; PyTorch's watchdog waits 10 min), escalated to critical at it."""
    w, engine, clock = setup(stall_after_s=None)
    run_steps(w, engine, clock)
    clock.t += 15.0  # overdue, but under the early bound
    assert judge(w, engine, clock, spinning(clock.t)) == []
    clock.t += 6.0
    (alert,) = judge(w, engine, clock, spinning(clock.t))
    assert alert.severity is Health.WARNING
    assert alert.message == (
        "drafter stalled: no step for 21 s; GPUs 4,5,6,7 at 100 % utilisation on "
        "90/90/90/90 W of 700 W: an NCCL spin (a rank waits in a collective for a peer)"
    )
    clock.t += 100.0
    (alert,) = judge(w, engine, clock, spinning(clock.t))
    assert alert.severity is Health.CRITICAL
    assert alert.message.startswith("drafter stalled: no step for 2 min; GPUs 4,5,6,7 at 100 %")


def test_the_watchdog_line_makes_the_early_warning_critical() -> None:
    w, engine, clock = setup(stall_after_s=None)
    run_steps(w, engine, clock)
    clock.t += 25.0
    (alert,) = judge(w, engine, clock, spinning(clock.t))
    assert alert.severity is Health.WARNING
    w.on_log("job:drafter", "/l/d.log", [WATCHDOG], clock.t, backlog=False)
    (alert,) = judge(w, engine, clock, spinning(clock.t))
    assert alert.severity is Health.CRITICAL and "timed out in ALLREDUCE #8812" in alert.message


def test_a_silence_without_the_spin_waits_for_stall_after_s() -> None:
    """Busy GPUs at full power compute (a long step, a data-loader pause is idle GPUs):
    no early word without the signature."""
    w, engine, clock = setup(stall_after_s=None)
    run_steps(w, engine, clock)
    clock.t += 60.0
    assert judge(w, engine, clock, sample(clock.t)) == []
    busy = spinning(clock.t)
    computing = HostSample(
        "box", clock.t, None, tuple(replace(g, power_w=600.0) for g in busy.gpus), busy.processes
    )
    assert judge(w, engine, clock, computing) == []


def test_the_flight_recorder_names_the_rank_until_the_stall_ends() -> None:
    """The evidence step's reading of the real dumps (torch 2.13.0's capture: rank 2
    skipped all_reduce #17) turns the stall's words into the rank that never arrived,
    with its GPU and the per-rank table as the alert's facts; progress ends it and the
    next stall is judged afresh."""
    from gpumon.backends.parsers.flight_recorder import analyze

    from upstream_captures import UPSTREAM

    folder = UPSTREAM / "flight-recorder" / "torch-2.13.0" / "on-demand"
    dumps = {int(p.name.rsplit("_", 1)[1]): p.read_bytes() for p in folder.glob("trace_rank_*")}
    report = analyze(dumps, pids={r: 900 + r for r in dumps}, gpus=dict(enumerate(GPUS)))
    w, engine, clock = setup(stall_after_s=30.0)
    run_steps(w, engine, clock)
    assert w.name_collective("drafter", report, engine, clock.t) == []  # not stalled yet
    w.collectives.clear()
    clock.t += 31.0
    (alert,) = feed(w, engine, clock, [])
    assert alert.message == "drafter stalled: no step for 31 s"
    w.name_collective("drafter", report, engine, clock.t)
    (alert,) = [a for a in engine.active() if a.kind == "job_stalled"]
    said = "drafter stalled: rank 2 (GPU 6, PID 902) never entered all_reduce #17 (ranks 0, 1, 3"
    assert alert.message.startswith(said)
    assert alert.facts.collective == report and alert.peak_message == alert.message
    assert alert.facts.gpu is not None and alert.facts.gpu.index == 6
    clock.t += 5.0
    (alert,) = feed(w, engine, clock, [])  # the next judgement keeps the named rank
    assert alert.message.startswith(said)
    clock.t += 1.0
    assert feed(w, engine, clock, [step(11)]) == []
    assert "drafter" not in w.collectives
    clock.t += 31.0
    (alert,) = feed(w, engine, clock, [])
    assert alert.message == "drafter stalled: no step for 31 s"
