"""Job templates and quoting, the status parser, the confirmation plan and the auto-restart
policy. Runs on real local processes: tests/system/test_restart_jobs.py."""

from __future__ import annotations

import shlex

import pytest

from gpumon.backends.actions import (
    ActionPlan,
    AutoRestartPolicy,
    JobRecord,
    JobStatus,
    ParamError,
    ParamValue,
    Step,
    check_template,
    merge_params,
    parse_status,
    render_command,
)
from gpumon.backends.actions.job_watch import OOM_CRASHES
from gpumon.backends.config import JobConfig

from job_records import record_text

# --- templates and parameters ----------------------------------------------------------


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


def test_parse_status_reads_record_pids_log_and_exit() -> None:
    text = "\n".join(
        [
            "dir=/s",
            "log=/var/log/d.log",
            "tmux=1",
            f"record={record_text()}",
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
    gone = parse_status("drafter", f"record={record_text()}\nalive=0\npids=\nexit=1 5 t1")
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
    assert "until GPUs 5, 6, 7 use < 1.0 GiB" in text
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
    delays = [
        policy.decide(t, True, "CUDA out of memory on GPU 6", oom=True) for t in (0.0, 60.0, 120.0)
    ]
    assert [(d.restart, d.delay_s, d.give_up) for d in delays] == [
        (True, 10.0, False),
        (True, 20.0, False),
        (True, 40.0, False),
    ]
    assert "automatic restart 3/3 in 40 s" in delays[2].message
    four = policy.decide(180.0, True, "OOM", oom=True)
    assert (four.restart, four.give_up) == (False, True)
    assert "gives up" in four.message and "10 min" in four.message
    again = policy.decide(900.0, True, "OOM", oom=True)  # the window passed, but it gave up
    assert (again.restart, again.give_up) == (False, False)
    policy.reset()
    assert policy.decide(1000.0, True, "OOM", oom=True).restart


def test_policy_window_forgets_old_restarts_and_ignores_other_crashes() -> None:
    policy = AutoRestartPolicy(_job(auto_restart=True, max_restarts=1, restart_window=100.0))
    assert policy.decide(0.0, True, "torch.OutOfMemoryError", oom=True).restart
    assert policy.decide(150.0, True, "CUDA OOM", oom=True).restart  # the first left the window
    assert not policy.decide(160.0, False, None).restart
    segv = policy.decide(170.0, True, "Segmentation fault")
    assert not segv.restart and not segv.give_up and "OOMs only" in segv.message
    # whether it was an OOM is the caller's typed fact, never read out of the words
    said_oom = policy.decide(175.0, True, "CUDA out of memory")
    assert not said_oom.restart and "OOMs only" in said_oom.message
    off = AutoRestartPolicy(_job()).decide(0.0, True, "OOM", oom=True)
    assert not off.restart and "auto-restart is off" in off.message
    never = AutoRestartPolicy(_job(auto_restart=True, max_restarts=0))
    assert never.decide(0, True, "oom", oom=True).give_up
    # the crashes the restart follows: a job's CUDA OOM and its GPU's memory collapsing,
    # not a crash of its own (a Python exception), nor the kernel's or a cgroup's kill
    assert sorted(OOM_CRASHES) == ["cuda_oom", "oom_death"]


def test_gpu_memory_in_dialogs_reads_as_one_number() -> None:
    from gpumon.backends.actions.plan import mib

    assert mib(86214) == "84.2 GiB"  # not "86 214 MiB", which reads as two numbers
    assert mib(1024) == "1.0 GiB"
    assert mib(12) == "12 MiB"
    assert mib(None) == "not reported"
