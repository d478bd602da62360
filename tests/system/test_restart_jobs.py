"""Restarts on this machine's real processes: values as one word in a real shell, a run's
cancel / refuse rules, verify and stop, a reused PID, the auto-restarter driving real jobs,
and the simulator's restartable job."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.actions import (
    AutoRestarter,
    AutoRestartPolicy,
    GpuReadings,
    GpuUse,
    JobRun,
    JobTarget,
    RunRegistry,
    Step,
    audit,
    job_status,
    make_plan,
    render_command,
    signal_job,
)
from gpumon.backends.alerts.facts import Restart
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.model import Health
from gpumon.backends.transport import LocalTransport

import job_script
from held_demo import HeldDemo
from job_records import kill_recorded_jobs, record_text

pytestmark = pytest.mark.system


HOSTILE = [
    "x; touch /tmp/pwned",
    "$(id)",
    "`id`",
    "a b  c",
    "it's",
    'say "hi"',
    "*",
    "~root",
    "-rf",
    "",
    "back\\slash",
    "tab\there",
    "€ unicode",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_is_one_literal_word_in_a_real_shell(value: str) -> None:
    command = render_command("printf '[%s]\\n' {v} --flag={v}", {"v": value})
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout == f"[{value}]\n[--flag={value}]\n"


class JobBox(LocalTransport):
    """This machine as a job target, with its job records in a test directory."""

    def __init__(self, state: Path) -> None:
        super().__init__(HostConfig(name="box", kind="local"))
        self.job_state_dir = str(state)
        self.job_launch_method = "setsid"


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobBox]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "audit"))
    transport = JobBox(tmp_path / "jobs")
    yield transport
    kill_recorded_jobs(tmp_path / "jobs")


def _local_job(tmp_path: Path, **kw: object) -> JobConfig:
    start = f"{shlex.quote(sys.executable)} {shlex.quote(job_script.__file__)} {{tag}}"
    base: dict[str, object] = {
        "name": "j",
        "start": start,
        "params": {"tag": "a"},
        "log": str(tmp_path / "j.log"),
        "verify_s": 0.6,
        "stop_timeout": 2.0,
    }
    return JobConfig(**{**base, **kw})  # type: ignore[arg-type]


def _target(box: JobBox, job: JobConfig, **kw: object) -> JobTarget:
    host = HostConfig(name="box", kind="local", jobs=(job,))
    return JobTarget(host, box, **kw)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone, just not reaped


def _audit_outcomes() -> list[tuple[str, str]]:
    return [(str(e["action"]), str(e["outcome"])) for e in audit.read_entries()]


async def test_cancel_while_waiting_for_gpus_starts_nothing(box: JobBox, tmp_path: Path) -> None:
    busy = GpuReadings(1e12, {0: GpuUse(90_000, (4242,))})  # never frees
    target = _target(box, _local_job(tmp_path, gpus=(0,)), readings=lambda: busy)
    seen: list[Step] = []
    run = RunRegistry().start(
        await make_plan(target, "j"), target, progress=lambda s, m: seen.append(s)
    )
    while Step.WAIT_FREE not in seen:
        await asyncio.sleep(0.05)
    assert run.cancel().cancelled
    outcome = await run.wait()
    assert outcome.status == "cancelled" and outcome.pid is None
    assert (outcome.step, outcome.level) == (Step.WAIT_FREE, "warning")
    assert Step.START not in seen and seen[-1] is Step.DONE
    assert not (tmp_path / "jobs" / "j.json").exists()
    assert _audit_outcomes() == [("restart", "cancelled")]


async def test_cancel_is_refused_once_the_job_is_starting(box: JobBox, tmp_path: Path) -> None:
    target = _target(box, _local_job(tmp_path))
    answers: list[str] = []
    registry = RunRegistry()

    def progress(step: Step, message: str) -> None:
        if step is Step.START and not answers:
            result = registry.running("box", "j").cancel()  # type: ignore[union-attr]
            answers.append(f"{result.cancelled}: {result.message}")

    run = registry.start(await make_plan(target, "j", "start"), target, progress=progress)
    outcome = await run.wait()
    assert answers and answers[0].startswith("False: j is being started")
    assert outcome.ok and outcome.pid is not None
    assert (outcome.step, outcome.level) == (None, "ok")
    assert [s for s, _ in run.history][-2:] == [Step.VERIFY, Step.DONE]


async def test_read_only_and_missing_start_are_refused_and_audited(
    box: JobBox, tmp_path: Path
) -> None:
    target = _target(box, _local_job(tmp_path), read_only=True)
    plan = await make_plan(target, "j")
    assert plan.refusal is not None and "--read-only" in plan.refusal
    outcome = await RunRegistry().start(plan, target).wait()
    assert (outcome.status, outcome.step, outcome.level) == ("refused", None, "warning")
    no_start = _target(box, _local_job(tmp_path, start=None, params={}))
    plan = await make_plan(no_start, "j")
    assert plan.refusal == "job j has no start command in the config"
    assert _audit_outcomes() == [("restart", "refused")]
    assert not (tmp_path / "jobs" / "j.json").exists()


async def test_auto_restarter_restarts_an_oom_and_gives_up_critically(
    box: JobBox, tmp_path: Path
) -> None:
    job = _local_job(tmp_path, auto_restart=True, max_restarts=1)
    alerts: list[tuple[Health, str]] = []
    said: list[Restart] = []

    def alert(level: Health, message: str, restart: Restart) -> None:
        alerts.append((level, message))
        said.append(restart)

    policy = AutoRestartPolicy(job, backoff_first_s=0.0)
    registry = RunRegistry()
    finished: list[JobRun] = []
    registry.finished.add(finished.append)
    driver = AutoRestarter(
        _target(box, job),
        "j",
        alert=alert,
        registry=registry,
        policy=policy,
    )
    try:
        decision = driver.notify(True, "CUDA out of memory", oom=True, crash_key="oom@60")
        assert decision is not None and decision.restart
        assert (
            driver.notify(True, "CUDA out of memory", oom=True, crash_key="oom@60") is None
        )  # same crash
        assert driver.pending is not None
        outcome = await driver.pending
        assert outcome is not None and outcome.ok, outcome
        assert [r.automatic for r in finished] == ["crash: CUDA out of memory"]  # its registry
        assert _audit_outcomes() == [("auto-restart", "ok")]
        assert "automatic (crash: CUDA out of memory)" in str(audit.read_entries()[0]["detail"])
        given_up = driver.notify(True, "CUDA out of memory", oom=True, crash_key="oom@200")
        assert given_up is not None and given_up.give_up
        assert [h for h, _ in alerts] == [Health.WARNING, Health.CRITICAL]
        assert "automatic restart 1/1" in alerts[0][1] and "gives up" in alerts[1][1]
        # what it decided travels typed, as the alerts' facts (notify reads those)
        assert said == [Restart("due", 1, 1, 0.0), Restart("gave_up", attempts=1)]
    finally:
        await driver.close()


async def test_a_job_alive_whose_log_does_not_grow_fails_verify(
    box: JobBox, tmp_path: Path
) -> None:
    target = _target(box, _local_job(tmp_path, start="sleep 30 # {tag}"))
    outcome = await RunRegistry().start(await make_plan(target, "j", "start"), target).wait()
    assert (outcome.status, outcome.step, outcome.level) == ("failed", Step.VERIFY, "problem")
    assert "is alive but its log" in outcome.message and "did not grow" in outcome.message
    assert _audit_outcomes() == [("start", "failed")]


async def test_stop_command_runs_with_the_job_pgid_and_is_audited(
    box: JobBox, tmp_path: Path
) -> None:
    job = _local_job(tmp_path, stop='kill -s TERM -- "-$GPUMON_JOB_PGID" # {tag}')
    target = _target(box, job)
    started = await RunRegistry().start(await make_plan(target, "j", "start"), target).wait()
    assert started.ok and started.pid is not None
    again = await make_plan(target, "j", "start")
    assert again.refusal is not None and "already running" in again.refusal
    plan = await make_plan(target, "j", "stop")
    assert plan.commands == ['kill -s TERM -- "-$GPUMON_JOB_PGID" # a']
    steps: list[str] = []
    stopped = await RunRegistry().start(plan, target, progress=lambda s, m: steps.append(m)).wait()
    assert stopped.ok and started.pid in stopped.signalled
    assert not any("SIGKILL" in m or "failed" in m for m in steps), steps
    assert not _alive(started.pid)
    last = audit.read_entries()[-1]
    assert (last["action"], last["outcome"]) == ("stop", "ok")
    assert last["commands"] == plan.commands


def test_auto_restarter_counts_each_crash_once(box: JobBox, tmp_path: Path) -> None:
    alerts: list[tuple[Health, str]] = []
    job = _local_job(tmp_path)  # auto_restart off: decisions without restarts
    driver = AutoRestarter(
        _target(box, job), "j", alert=lambda h, m, _: alerts.append((h, m)), registry=RunRegistry()
    )
    first = driver.notify(True, "CUDA out of memory", oom=True)
    assert first is not None and not first.restart and "auto-restart is off" in first.message
    assert driver.notify(True, "CUDA out of memory", oom=True) is None  # still the same crash
    assert driver.notify(False) is None
    assert driver.notify(True, "CUDA out of memory", oom=True) is not None  # crashed again
    assert alerts == [] and driver.pending is None


async def test_a_record_whose_pid_was_reused_is_never_signalled(
    box: JobBox, tmp_path: Path
) -> None:
    # A record pointing at a live process that started at another time (this test's own
    # process stands in for an unrelated process that got the old PID).
    (tmp_path / "jobs").mkdir()
    me = os.getpid()
    record = json.loads(record_text(pid=me)) | {"pgid": os.getpgid(0), "proc_start": "1"}
    path = tmp_path / "jobs" / "j.json"
    path.write_text(json.dumps(record))
    job = _local_job(tmp_path)
    try:
        status = await job_status(box, job)
        assert status.record is not None and status.record.pid == me
        assert not status.running and status.pids == ()
        assert await signal_job(box, job, "TERM") == ()
        plan = await make_plan(_target(box, job), "j", "start")
        assert plan.refusal is None  # not running: it may be started
    finally:
        path.unlink()  # (the fixture kills the groups of the records it finds)


def test_restarted_sim_job_records_its_restart_and_ends_with_its_state_dir(
    tmp_path: Path,
) -> None:
    """The restart is recorded at the scenario time the job starts: held at 70 s until
    then (at 20x a loaded machine's slow interpreter start ran the clock past 90 s)."""
    from gpumon.backends.sim import read_restarts, write_job_wrapper

    state = tmp_path / "state"
    state.mkdir()
    held = HeldDemo(tmp_path)
    settings = replace(held.settings(demo_time=70.0, speed=20.0), state_dir=str(state))
    exe = write_job_wrapper(tmp_path / "bin", settings)
    log = tmp_path / "drafter.log"
    proc = subprocess.Popen([str(exe), "--log", str(log), "--restarted"])
    try:
        deadline = time.monotonic() + 30
        while "run 1 resumed" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        [restart_at] = read_restarts(str(state))
        assert restart_at == pytest.approx(70.0)
        held.release()  # its next line comes, and with it the look at its state dir
        shutil.rmtree(state)
        assert proc.wait(timeout=5) == 0  # the demo is gone: so is its job
    finally:
        proc.kill()
        proc.wait()


OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


async def test_a_session_tells_the_runs_host_once_and_no_other(box: JobBox, tmp_path: Path) -> None:
    """One path for finished runs: the session's registry -> the JobWatch of the run's host."""
    from gpumon.backends.actions import Session
    from gpumon.backends.monitor import AgentSource, HostMonitor
    from gpumon.backends.workloads import JobState

    job = _local_job(tmp_path)
    host = HostConfig(name="box", kind="local", jobs=(job,))
    monitors = [HostMonitor(h, AgentSource(box)) for h in (host, replace(host, name="other"))]
    for m in monitors:  # both saw the job die of an OOM (the monitors need not run)
        m.alerts.on_log_lines(job.log or "", [OOM_LINE], job="j")
        m.workloads.apply_alerts(m.alerts, m.clock())
        assert m.workloads.jobs["j"].state is JobState.CRASHED
    session = Session()
    assert all(session.watch(m) is not None for m in monitors)
    finished: list[JobRun] = []
    session.runs.finished.add(finished.append)
    target = JobTarget.from_monitor(monitors[0])
    run = session.runs.start(await make_plan(target, "j", "start"), target)
    assert (await run.wait()).ok
    assert finished == [run]
    mine, other = monitors
    assert not [a for a in mine.alerts.active() if a.kind == "cuda_oom"]  # cleared
    assert mine.workloads.jobs["j"].state is JobState.RUNNING
    assert [a.kind for a in other.alerts.active()] == ["cuda_oom"]  # another host's job
    assert other.workloads.jobs["j"].state is JobState.CRASHED
    await session.close()
    assert len(session.runs.finished) == 1  # only ours is left listening
