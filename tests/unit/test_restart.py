"""Job templates and quoting, the status parser, the confirmation plan, the auto-restart
policy and driver, and the run's cancel / refuse rules (on local processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.actions import (
    ActionPlan,
    AutoRestarter,
    AutoRestartPolicy,
    GpuReadings,
    GpuUse,
    JobRecord,
    JobStatus,
    JobTarget,
    ParamError,
    ParamValue,
    RestartRun,
    RunRegistry,
    Step,
    audit,
    check_template,
    is_oom,
    job_status,
    make_plan,
    merge_params,
    parse_status,
    render_command,
    signal_job,
)
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.model import Health
from gpumon.backends.transport import LocalTransport

import job_script

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


# --- templates and parameters ----------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_is_one_literal_word_in_a_real_shell(value: str) -> None:
    command = render_command("printf '[%s]\\n' {v} --flag={v}", {"v": value})
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout == f"[{value}]\n[--flag={value}]\n"


def test_values_are_formatted_and_quoted() -> None:
    values: dict[str, ParamValue] = {"resume": "latest", "budget": 65536, "lr": 2.5e-4, "fp8": True}
    command = render_command("train --resume {resume} -b {budget} --lr {lr} --fp8 {fp8}", values)
    assert command == "train --resume latest -b 65536 --lr 0.00025 --fp8 true"
    assert shlex.split(render_command("run {x}", {"x": "a; b"})) == ["run", "a; b"]


@pytest.mark.parametrize(
    "template",
    ['run "{x}"', "run '{x}'", "echo $(( {x} + 1 ))", "cat <<EOF\n{x}\nEOF", 'a "b" "--x={x}"'],
)
def test_placeholders_where_quoting_would_not_hold_are_refused(template: str) -> None:
    with pytest.raises(ParamError, match="write it unquoted"):
        render_command(template, {"x": "v"})


def test_template_checks_names_and_control_characters() -> None:
    assert check_template("run {a} --b={b} {a}") == {"a", "b"}
    assert check_template("awk '{print $1}' {f}") == {"f"}
    with pytest.raises(ParamError, match="no value for b"):
        render_command("run {a} {b}", {"a": 1})
    with pytest.raises(ParamError, match="control characters"):
        render_command("run {a}", {"a": "x\ntouch /tmp/pwned"})


def _job(**kw: object) -> JobConfig:
    base: dict[str, object] = {
        "name": "drafter",
        "start": "train --resume {resume} --budget {token_budget}",
        "params": {"resume": "latest", "token_budget": 65536, "fp8": False},
    }
    return JobConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_merge_params_parses_to_the_default_type_and_lists_known_names() -> None:
    job = _job()
    assert merge_params(job) == {"resume": "latest", "token_budget": 65536, "fp8": False}
    merged = merge_params(job, {"token_budget": "32768", "fp8": "yes", "resume": "step-900"})
    assert merged == {"resume": "step-900", "token_budget": 32768, "fp8": True}
    with pytest.raises(
        ParamError, match=r"unknown parameter 'budget'.*known: fp8, resume, token_budget"
    ):
        merge_params(job, {"budget": "1"})
    with pytest.raises(ParamError, match="token_budget: expected an integer, got 'lots'"):
        merge_params(job, {"token_budget": "lots"})
    with pytest.raises(ParamError, match="fp8: expected true or false"):
        merge_params(job, {"fp8": "maybe"})


# --- status ------------------------------------------------------------------------------


def _record_text(pid: int = 100, token: str = "t1") -> str:
    return json.dumps(
        {
            "job": "drafter",
            "pid": pid,
            "pgid": pid,
            "sid": pid,
            "proc_start": "5",
            "started": 1,
            "method": "tmux",
            "session": "gpumon-drafter",
            "token": token,
            "log": "/l",
        }
    )


def test_parse_status_reads_record_pids_log_and_exit() -> None:
    text = "\n".join(
        [
            "dir=/s",
            "log=/var/log/d.log",
            "tmux=1",
            f"record={_record_text()}",
            "alive=1",
            "stale=0",
            "pids=100 101 ",
            "exit=1 1700000000 t1",
            "logstat=2048 1700000001",
        ]
    )
    st = parse_status("drafter", text)
    assert st.record is not None and st.record.pid == 100 and st.record.session == "gpumon-drafter"
    assert st.alive and st.pids == (100, 101) and st.running and st.tmux and not st.setsid
    assert (st.log_path, st.log_size, st.log_mtime) == ("/var/log/d.log", 2048, 1700000001.0)
    assert st.exit_code == 1
    other_run = parse_status("drafter", text.replace("exit=1 1700000000 t1", "exit=1 17 old"))
    assert other_run.exit_code is None  # an exit file of an earlier run does not count
    gone = parse_status("drafter", f"record={_record_text()}\nalive=0\npids=\nexit=1 5 t1")
    assert not gone.running and gone.describe() == "exited (code 1)"
    assert parse_status("drafter", "dir=/s\n").describe() == "not started by gpumon"


# --- the plan ----------------------------------------------------------------------------


def _plan(**kw: object) -> ActionPlan:
    job = _job(stop_timeout=30.0, gpus=(5, 6, 7))
    record = JobRecord("drafter", 100, 100, "setsid", "/l")
    status = JobStatus("drafter", record, alive=True, pids=(100, 101), log_path="/l")
    base: dict[str, object] = {
        "action": "restart",
        "host": "ct200",
        "host_label": "ssh root@pve1 -> pct exec 200",
        "job": job,
        "params": merge_params(job),
        "start_command": render_command(job.start or "", merge_params(job)),
        "stop_command": None,
        "status": status,
        "state": "crashed (CUDA OOM on GPU 6)",
        "last_alert": "GPU 6: CUDA out of memory",
    }
    return ActionPlan(**{**base, **kw})  # type: ignore[arg-type]


def test_plan_lines_show_state_alert_params_commands_and_pids() -> None:
    plan = _plan()
    text = "\n".join(plan.lines())
    assert text.startswith("Restart drafter on ct200 (ssh root@pve1 -> pct exec 200)")
    assert "state:      crashed (CUDA OOM on GPU 6)" in text
    assert "last alert: GPU 6: CUDA out of memory" in text
    assert "SIGTERM to process group 100 (PIDs 100 101), SIGKILL after 30 s" in text
    assert "until GPUs 5, 6, 7 use < 1024 MiB" in text
    assert "train --resume latest --budget 65536" in text
    assert plan.pids == (100, 101)
    assert plan.commands == [
        "kill -TERM -100; kill -KILL -100 after 30 s",
        "train --resume latest --budget 65536",
    ]
    assert "REFUSED" not in text


def test_plan_rows_carry_levels_and_steps_and_lines_print_them() -> None:
    plan = _plan(refusal="read-only: the host is read_only")
    rows = plan.rows()
    assert [(r.label, r.level) for r in rows if r.level != "info"] == [
        ("last alert", "warning"),
        ("REFUSED", "problem"),
    ]
    assert [r.step for r in rows if r.step] == list(plan.steps)
    stop = next(r for r in rows if r.step is Step.STOP)
    assert stop.text == "SIGTERM to process group 100 (PIDs 100 101), SIGKILL after 30 s"
    assert plan.title == "Restart drafter on ct200 (ssh root@pve1 -> pct exec 200)"
    assert plan.lines() == [plan.title] + [f"  {r.label + ':':<11} {r.text}" for r in rows]


def test_plan_with_params_rerenders_and_rejects_unknown_names() -> None:
    plan = _plan().with_params({"token_budget": "32768", "resume": "x y"})
    assert plan.start_command == "train --resume 'x y' --budget 32768"
    assert "token_budget = 32768 (default 65536)" in "\n".join(plan.lines())
    with pytest.raises(ParamError, match="known: fp8, resume, token_budget"):
        plan.with_params({"nope": "1"})
    refused = _plan(refusal="read-only: the host is read_only", action="stop")
    assert refused.lines()[-1] == "  REFUSED:    read-only: the host is read_only"
    assert refused.commands == ["kill -TERM -100; kill -KILL -100 after 30 s"]


# --- the auto-restart policy ---------------------------------------------------------------


def test_policy_restarts_ooms_with_backoff_then_gives_up_once() -> None:
    policy = AutoRestartPolicy(_job(auto_restart=True, max_restarts=3, restart_window=600.0))
    delays = [policy.decide(t, True, "CUDA out of memory on GPU 6") for t in (0.0, 60.0, 120.0)]
    assert [(d.restart, d.delay_s, d.give_up) for d in delays] == [
        (True, 10.0, False),
        (True, 20.0, False),
        (True, 40.0, False),
    ]
    assert "automatic restart 3/3 in 40 s" in delays[2].message
    four = policy.decide(180.0, True, "OOM")
    assert (four.restart, four.give_up) == (False, True)
    assert "gives up" in four.message and "10 min" in four.message
    again = policy.decide(900.0, True, "OOM")  # the window passed, but it gave up: stays off
    assert (again.restart, again.give_up) == (False, False)
    policy.reset()
    assert policy.decide(1000.0, True, "OOM").restart


def test_policy_window_forgets_old_restarts_and_ignores_other_crashes() -> None:
    policy = AutoRestartPolicy(_job(auto_restart=True, max_restarts=1, restart_window=100.0))
    assert policy.decide(0.0, True, "torch.OutOfMemoryError").restart
    assert policy.decide(150.0, True, "CUDA OOM").restart  # the first left the window
    assert not policy.decide(160.0, False, None).restart
    segv = policy.decide(170.0, True, "Segmentation fault")
    assert not segv.restart and not segv.give_up and "OOMs only" in segv.message
    off = AutoRestartPolicy(_job()).decide(0.0, True, "OOM")
    assert not off.restart and "auto-restart is off" in off.message
    assert AutoRestartPolicy(_job(auto_restart=True, max_restarts=0)).decide(0, True, "oom").give_up
    assert is_oom("CUDA out of memory") and not is_oom("zoom") and not is_oom(None)


# --- runs on local processes ---------------------------------------------------------------


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
    for record in (tmp_path / "jobs").glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            pgid = int(json.loads(record.read_text())["pgid"])
            if pgid > 1 and pgid != os.getpgid(0):
                os.killpg(pgid, signal.SIGKILL)


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
    policy = AutoRestartPolicy(job, backoff_first_s=0.0)
    registry = RunRegistry()
    finished: list[RestartRun] = []
    registry.finished.add(finished.append)
    driver = AutoRestarter(
        _target(box, job),
        "j",
        alert=lambda h, m: alerts.append((h, m)),
        registry=registry,
        policy=policy,
    )
    try:
        decision = driver.notify(True, "CUDA out of memory", crash_key="oom@60")
        assert decision is not None and decision.restart
        assert driver.notify(True, "CUDA out of memory", crash_key="oom@60") is None  # same crash
        assert driver.pending is not None
        outcome = await driver.pending
        assert outcome is not None and outcome.ok, outcome
        assert [r.automatic for r in finished] == ["crash: CUDA out of memory"]  # its registry
        assert _audit_outcomes() == [("auto-restart", "ok")]
        assert "automatic (crash: CUDA out of memory)" in str(audit.read_entries()[0]["detail"])
        given_up = driver.notify(True, "CUDA out of memory", crash_key="oom@200")
        assert given_up is not None and given_up.give_up
        assert [h for h, _ in alerts] == [Health.WARNING, Health.CRITICAL]
        assert "automatic restart 1/1" in alerts[0][1] and "gives up" in alerts[1][1]
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
        _target(box, job), "j", alert=lambda h, m: alerts.append((h, m)), registry=RunRegistry()
    )
    first = driver.notify(True, "CUDA out of memory")
    assert first is not None and not first.restart and "auto-restart is off" in first.message
    assert driver.notify(True, "CUDA out of memory") is None  # still the same crash
    assert driver.notify(False) is None
    assert driver.notify(True, "CUDA out of memory") is not None  # crashed again
    assert alerts == [] and driver.pending is None


async def test_a_record_whose_pid_was_reused_is_never_signalled(
    box: JobBox, tmp_path: Path
) -> None:
    # A record pointing at a live process that started at another time (this test's own
    # process stands in for an unrelated process that got the old PID).
    (tmp_path / "jobs").mkdir()
    me = os.getpid()
    record = json.loads(_record_text(pid=me)) | {"pgid": os.getpgid(0), "proc_start": "1"}
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
    from gpumon.backends.monitor import demo_settings
    from gpumon.backends.sim import read_restarts, write_job_wrapper

    state = tmp_path / "state"
    state.mkdir()
    settings = replace(demo_settings(demo_time=70.0, speed=20.0), state_dir=str(state))
    exe = write_job_wrapper(tmp_path / "bin", settings)
    log = tmp_path / "drafter.log"
    proc = subprocess.Popen([str(exe), "--log", str(log), "--restarted"])
    try:
        deadline = time.monotonic() + 10
        while "run 1 resumed" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        [restart_at] = read_restarts(str(state))
        assert 70.0 <= restart_at < 90.0
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
    finished: list[RestartRun] = []
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
