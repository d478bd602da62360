"""Restarting real jobs over a real sshd: detached launch, PID records, SIGTERM/SIGKILL,
waiting for GPU memory (the simulator), the registry, read-only, quoting, surviving a cut
connection, and the headless ``gpumon restart`` against the built-in demo."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sglang_watchdog import AFTER, BEFORE, WATCHDOG_DUMP

from gpumon.backends.actions import JobTarget, RunRegistry, audit, job_status, launch_job, make_plan
from gpumon.backends.config import Config, HostConfig, load_config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor, make_transport

import waiting
from job_records import kill_recorded_jobs
from sshd_server import SshServer, descendants, free_port, processes_matching
from upstream_captures import UPSTREAM
from waiting import until

pytestmark = pytest.mark.integration

JOB_SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "job_script.py")
GPUMON_RESTART = [sys.executable, "-m", "gpumon.tui.cli", "restart"]


@pytest.fixture
def target(sshd: SshServer) -> Iterator[Path]:
    """Give the target's sessions their own XDG_STATE_HOME (job records) and tmux socket
    dir; returns that state dir. Afterwards every job recorded there is killed."""
    state = sshd.root / "target-state"
    tmux_dir = Path(tempfile.mkdtemp(prefix="gt"))  # short: a socket path has 108 bytes
    config = sshd.root / "sshd_config"
    text = config.read_text()
    config.write_text(
        re.sub(
            r"^SetEnv (.*)$",
            rf"SetEnv \1 XDG_STATE_HOME={state} TMUX_TMPDIR={tmux_dir}",
            text,
            flags=re.M,
        )
    )
    sshd.kill()
    sshd.start()
    try:
        yield state
    finally:
        kill_recorded_jobs(state / "gpumon" / "jobs")
        subprocess.run(
            ["tmux", "kill-server"],
            env={**os.environ, "TMUX_TMPDIR": str(tmux_dir)},
            capture_output=True,
        )
        shutil.rmtree(tmux_dir, ignore_errors=True)


def job_name() -> str:
    return "t" + uuid.uuid4().hex[:8]


def job_table(name: str, *, flags: str = "", **keys: object) -> str:
    """A ``[hosts.ct200.jobs.NAME]`` table running job_script.py with ``{tag}``."""
    start = f"{shlex.quote(sys.executable)} {shlex.quote(JOB_SCRIPT)} {flags} {{tag}}".replace(
        "  ", " "
    )
    values: dict[str, object] = {"start": start, "verify_s": 0.8, "stop_timeout": 5, **keys}
    lines = [f"[hosts.ct200.jobs.{name}]"]
    for key, value in values.items():
        lines.append(f"{key} = {json.dumps(value)}")
    lines += [f"[hosts.ct200.jobs.{name}.params]", 'tag = "plain"']
    return "\n".join(lines) + "\n"


def write_config(tmp_path: Path, sshd: SshServer, *tables: str, **host: Any) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(sshd.config_toml(**host) + "".join(tables))
    return path


def restart(
    args: list[str], env: dict[str, str], stdin: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUMON_RESTART, *args], env=env, stdin=stdin, capture_output=True, text=True, timeout=90
    )


def entries(env: dict[str, str], job: str) -> list[dict[str, Any]]:
    return [e for e in audit.read_entries(env) if e["job"] == job]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def record(state: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((state / "gpumon" / "jobs" / f"{name}.json").read_text())
    return data


def host_for(cfg: Path) -> HostConfig:
    return resolve_host(load_config(cfg), "ct200")


# --- through the command line -------------------------------------------------------------


def test_restart_gives_new_pid_whose_log_advances_and_audits_ok(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name, log = job_name(), tmp_path / "job.log"
    cfg = write_config(tmp_path, sshd, job_table(name, log=str(log)), container=200)
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[stop] nothing to stop" in first.stdout
    old_pid = int(record(target, name)["pid"])

    second = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert second.returncode == 0, second.stdout + second.stderr
    new_pid = int(record(target, name)["pid"])
    assert new_pid != old_pid
    assert not alive(old_pid) and alive(new_pid)
    assert f"started PID {new_pid}" in second.stdout and "OK:" in second.stdout
    size = log.stat().st_size
    time.sleep(0.5)
    assert log.stat().st_size > size  # the new run keeps writing
    assert re.search(r"progress \d+ pid \d+", log.read_text())
    ok = entries(client_env, name)
    assert [e["outcome"] for e in ok] == ["ok", "ok"]
    assert ok[1]["action"] == "restart" and ok[1]["host"] == "ct200"
    assert old_pid in ok[1]["pids"]
    assert any(JOB_SCRIPT in c for c in ok[1]["commands"])
    assert ok[1]["duration_s"] is not None


def test_start_that_fails_is_reported_with_its_stderr(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name = job_name()
    table = job_table(name, flags="--fail-at-start 'cannot open dataset /data/shard-7'", verify_s=3)
    cfg = write_config(tmp_path, sshd, table)
    res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED" in res.stderr and "exited with code 3" in res.stderr
    assert "cannot open dataset /data/shard-7" in res.stderr  # the job's stderr, from its log
    [entry] = entries(client_env, name)
    assert entry["outcome"] == "failed"
    assert "cannot open dataset" in str(entry["detail"])


def test_gpus_that_never_free_time_out_naming_the_pids(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    # The sshd's nvidia-smi is the simulator near demo time 10: the drafter holds GPU 5.
    name = job_name()
    cfg = write_config(tmp_path, sshd, job_table(name, gpus=[5]), interval=0.3)
    args = ["--config", str(cfg), "ct200", name, "--yes", "--free-timeout", "3"]
    res = restart(args, client_env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "GPU 5 still uses" in res.stderr
    assert "PIDs 2418873 hold it" in res.stderr  # the simulated drafter process on GPU 5
    assert "[start]" not in res.stdout  # nothing was started
    assert not (target / "gpumon" / "jobs" / f"{name}.json").exists()
    assert [e["outcome"] for e in entries(client_env, name)] == ["failed"]


def test_read_only_refuses_and_is_audited(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name = job_name()
    cfg = write_config(tmp_path, sshd, job_table(name), read_only=True)
    res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert res.returncode == 2
    assert "read-only" in res.stderr
    assert not (target / "gpumon" / "jobs" / f"{name}.json").exists()
    assert [e["outcome"] for e in entries(client_env, name)] == ["refused"]
    cfg = write_config(tmp_path, sshd, job_table(name))  # the global flag as well
    res = restart(["--config", str(cfg), "ct200", name, "--yes", "--read-only"], client_env)
    assert res.returncode == 2 and "--read-only" in res.stderr


def test_parameter_value_stays_one_literal_argument(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name, log, mark = job_name(), tmp_path / "job.log", uuid.uuid4().hex[:8]
    evil = f"x; touch /tmp/pwned-{mark} $(touch /tmp/pwned2-{mark}) `id` \"'"
    cfg = write_config(tmp_path, sshd, job_table(name, log=str(log)))
    res = restart(
        ["--config", str(cfg), "ct200", name, "--yes", "--param", f"tag={evil}"], client_env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    argv_line = next(line for line in log.read_text().splitlines() if line.startswith("argv: "))
    assert json.loads(argv_line.removeprefix("argv: ")) == [evil]
    assert not Path(f"/tmp/pwned-{mark}").exists() and not Path(f"/tmp/pwned2-{mark}").exists()
    assert entries(client_env, name)[0]["parameters"] == {"tag": evil}


def test_dry_run_unknown_param_and_no_terminal_change_nothing(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name = job_name()
    cfg = write_config(tmp_path, sshd, job_table(name))
    base = ["--config", str(cfg), "ct200", name]
    dry = restart([*base, "--dry-run", "--param", "tag=new"], client_env)
    assert dry.returncode == 0, dry.stderr
    assert f"{shlex.quote(JOB_SCRIPT)} new" in dry.stdout  # the exact command
    assert "tag = 'new' (default 'plain')" in dry.stdout and "dry run" in dry.stdout
    unknown = restart([*base, "--yes", "--param", "tga=1"], client_env)
    assert unknown.returncode == 2
    assert "unknown parameter 'tga'" in unknown.stderr and "known: tag" in unknown.stderr
    no_tty = restart(base, client_env, stdin=subprocess.DEVNULL)
    assert no_tty.returncode == 2 and "no terminal to confirm" in no_tty.stderr
    assert not (target / "gpumon" / "jobs" / f"{name}.json").exists()
    assert entries(client_env, name) == []  # nothing was attempted


# --- in process ---------------------------------------------------------------------------


@pytest.fixture
def local_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "client-state"))
    return tmp_path / "client-state"


async def test_job_ignoring_sigterm_is_killed_after_stop_timeout(
    sshd: SshServer, target: Path, local_env: Path, tmp_path: Path
) -> None:
    name = job_name()
    cfg = write_config(tmp_path, sshd, job_table(name, flags="--ignore-sigterm", stop_timeout=1))
    host = host_for(cfg)
    transport = make_transport(host)
    try:
        job = host.job(name)
        assert job is not None and job.start is not None
        first = await launch_job(transport, job, job.start.replace("{tag}", "a"))
        await asyncio.sleep(0.5)
        steps: list[str] = []
        t = JobTarget(host, transport)
        plan = await make_plan(t, name, "restart")
        assert first.pid in plan.pids
        run = RunRegistry().start(plan, t, progress=lambda s, m: steps.append(f"{s}: {m}"))
        outcome = await run.wait()
        assert outcome.ok, outcome
        assert not alive(first.pid)
        assert any("still running after 1 s: SIGKILL" in s for s in steps), steps
        assert outcome.pid is not None and outcome.pid != first.pid and alive(outcome.pid)
        [entry] = entries({"XDG_STATE_HOME": str(local_env)}, name)
        assert first.pid in entry["pids"]
    finally:
        await transport.close()


async def test_second_restart_while_one_runs_returns_the_running_one(
    sshd: SshServer, target: Path, local_env: Path, tmp_path: Path
) -> None:
    name = job_name()
    cfg = write_config(tmp_path, sshd, job_table(name, verify_s=1))
    host = host_for(cfg)
    transport = make_transport(host)
    registry = RunRegistry()
    try:
        t = JobTarget(host, transport)
        one = registry.start(await make_plan(t, name), t)
        two = registry.start(await make_plan(t, name, params={"tag": "other"}), t)
        assert two is one and registry.running("ct200", name) is one
        outcome = await one.wait()
        assert outcome.ok, outcome
        assert registry.running("ct200", name) is None
        status = await job_status(transport, t.host.jobs[0])
        assert status.record is not None and status.record.pid == outcome.pid
        pythons = [
            (pid, cmd)
            for pid, cmd in processes_matching(JOB_SCRIPT, "cmdline")
            if pid in status.pids and cmd.startswith(sys.executable)
        ]
        assert len(pythons) == 1  # one job, not two
        assert "plain" in pythons[0][1]  # the first plan's
        assert [e["outcome"] for e in entries({"XDG_STATE_HOME": str(local_env)}, name)] == ["ok"]
    finally:
        await transport.close()


@pytest.mark.parametrize("method", ["tmux", "setsid"])
async def test_job_survives_the_ssh_connection_being_cut(
    sshd: SshServer, target: Path, local_env: Path, tmp_path: Path, method: str
) -> None:
    name, log = job_name(), tmp_path / "job.log"
    cfg = write_config(tmp_path, sshd, job_table(name, log=str(log)), container=200)
    host = host_for(cfg)
    transport = make_transport(host)
    setattr(transport, "job_launch_method", method)  # noqa: B010 - what a transport may set
    job = host.job(name)
    assert job is not None and job.start is not None
    rec = await launch_job(transport, job, job.start.replace("{tag}", "a"))
    assert rec.method == method and (rec.session is not None) == (method == "tmux")
    assert sshd.proc is not None
    assert rec.pid not in descendants(sshd.proc.pid)  # re-parented away from sshd
    sshd.kill()  # kills the server and every process it still parents
    await transport.close()
    await asyncio.sleep(0.3)
    assert alive(rec.pid)
    size = log.stat().st_size
    await asyncio.sleep(0.6)
    assert log.stat().st_size > size

    sshd.start()  # a later gpumon finds the job by its record and stops it
    transport = make_transport(host)
    try:
        t = JobTarget(host, transport)
        plan = await make_plan(t, name, "stop")
        assert rec.pid in plan.pids
        outcome = await RunRegistry().start(plan, t).wait()
        assert outcome.ok and rec.pid in outcome.signalled
        assert not alive(rec.pid)
    finally:
        await transport.close()


# --- the demo -------------------------------------------------------------------------------


def test_headless_restart_of_the_demo_drafter_refills_gpu6(client_env: dict[str, str]) -> None:
    res = restart(["demo", "drafter", "--yes", "--demo-time", "70"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr
    # dead after its OOM at 60 s: GPU 6 keeps only CT 201's jupyter (another container's
    # 6.0 GiB, which the wait does not count)...
    free = re.search(r"\[wait_free\] GPUs free: .*GPU 6: 6\.0 GiB \(held by host PID", res.stdout)
    after = re.search(r"\[verify\] PID \d+ alive .*GPU 6: ([\d.]+) GiB", res.stdout)
    assert free and after, res.stdout
    assert float(after.group(1)) >= 6.1  # ...and the drafter filling up again beside it
    [entry] = [e for e in audit.read_entries(client_env) if e["host"] == "demo"]
    assert entry["outcome"] == "ok" and entry["job"] == "drafter"


async def test_demo_restart_in_process_gpu6_memory_rises(local_env: Path) -> None:
    host = dataclasses.replace(resolve_host(Config(path=None), "demo"), interval=0.3)
    monitor = make_monitor(host, demo_settings(demo_time=70))
    monitor.start()
    try:
        while monitor.latest is None:
            await monitor.wait_for_update(1.0)
        t = JobTarget.from_monitor(monitor)
        outcome = await RunRegistry().start(await make_plan(t, "drafter"), t).wait()
        assert outcome.ok, outcome
        seen: list[int] = []
        for _ in range(4):
            await monitor.wait_for_update(2.0)
            assert monitor.latest is not None
            used = monitor.latest.gpus[6].memory_used_mib
            assert used is not None
            seen.append(used)
        assert seen[-1] > seen[0] > 1024, seen  # refilling after the restart
    finally:
        await monitor.stop()


# --- the evidence kept before the stop (issue 37 point 1) -----------------------------------


def evidence_job(
    name: str, log: Path, prefix: Path, evidence_s: float = 15, start: str | None = None
) -> str:
    """A job whose environment sets the flight recorder's dump prefix as PyTorch reads it
    (TORCH_FR_DUMP_TEMP_FILE + the rank: torch/csrc/distributed/c10d/FlightRecorder.cpp at
    ad55c3b, DebugInfoWriter; docs/formats.md 8)."""
    other = {} if start is None else {"start": start}  # another program than job_script.py
    return job_table(name, log=str(log), evidence_s=evidence_s, **other) + (
        f"[hosts.ct200.jobs.{name}.env]\n"
        f"TORCH_FR_DUMP_TEMP_FILE = {json.dumps(str(prefix))}\n"
        'TORCH_FR_BUFFER_SIZE = "2000"\n'
    )


def bundle_files(path: str) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for member in tar.getmembers():
            data = tar.extractfile(member)
            if data is not None:
                out[member.name.split("/", 1)[1]] = data.read()
        return out


def test_restart_keeps_the_flight_recorder_dump_in_a_bundle_before_the_kill(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name, log, fr = job_name(), tmp_path / "job.log", tmp_path / "fr"
    fr.mkdir()
    cfg = write_config(tmp_path, sshd, evidence_job(name, log, fr / "trace_rank_"))
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[evidence] nothing to keep" in first.stdout
    old_pid = int(record(target, name)["pid"])
    # What the job's flight recorder wrote on its watchdog timeout: rank 0's dump, and a
    # file beside it that is no dump of this prefix.
    dump = bytes(range(256)) * 64
    (fr / "trace_rank_0").write_bytes(dump)
    (fr / "other.bin").write_bytes(b"not a dump")

    second = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert second.returncode == 0, second.stdout + second.stderr
    out = second.stdout
    assert out.index("[evidence] kept in ") < out.index("[stop] stopping")
    entry = entries(client_env, name)[-1]
    assert entry["outcome"] == "ok" and old_pid in entry["pids"]
    bundle = entry["bundle"]
    assert bundle in out and Path(bundle).stat().st_mode & 0o777 == 0o600
    files = bundle_files(bundle)
    assert files["flight-recorder/trace_rank_0"] == dump  # byte for byte
    assert "flight-recorder/other.bin" not in files
    assert "progress" in files[f"logs/00-{str(log).strip('/').replace('/', '_')}"].decode()
    index = files["index.txt"].decode()
    assert str(fr / "trace_rank_0") in index
    # its absence is said where the target has none (the test lock has it)
    if shutil.which("py-spy", path=sshd.session_path) is None:
        assert "py-spy: not on the target (gpumon installs nothing there)" in index
    else:  # the job's python process is dumped; its shell launcher, no Python, is said
        stacks = [n for n in files if n.startswith("py-spy-")]
        assert stacks and all(b"Thread" in files[n] for n in stacks), (sorted(files), index)
        assert f"py-spy-{old_pid}.txt" in files or f"py-spy-{old_pid}.txt: failed" in index


def test_evidence_s_0_goes_straight_to_the_stop(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name, log = job_name(), tmp_path / "job.log"
    table = evidence_job(name, log, tmp_path / "trace_rank_", evidence_s=0)
    cfg = write_config(tmp_path, sshd, table)
    for _ in range(2):
        res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
        assert res.returncode == 0, res.stdout + res.stderr
    assert "[evidence] off (evidence_s = 0 in the job's config)" in res.stdout
    assert "[evidence] kept" not in res.stdout
    assert "bundle" not in entries(client_env, name)[-1]
    assert not list((Path(client_env["XDG_STATE_HOME"]) / "gpumon").glob("bundles/*"))


def test_a_hung_evidence_step_is_cut_at_evidence_s_and_the_restart_goes_on(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    # A py-spy that never answers (as one attached to a process stuck in the kernel).
    spy = sshd.bin / "py-spy"
    spy.write_text("#!/bin/sh\nexec sleep 600\n")
    spy.chmod(0o755)
    name, log = job_name(), tmp_path / "job.log"
    table = evidence_job(name, log, tmp_path / "trace_rank_", evidence_s=4)
    cfg = write_config(tmp_path, sshd, table)
    restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr
    took = re.search(r"\[evidence\] kept in (\S+) after ([\d.]+) s", res.stdout)
    assert took, res.stdout
    assert float(took.group(2)) <= 4.0
    index = bundle_files(took.group(1))["index.txt"].decode()
    assert re.search(r"py-spy-\d+\.txt: .*timed out", index), index
    assert not [c for _, c in processes_matching(str(sshd.bin)) if "sleep 600" in c]


FR_RANK = str(Path(__file__).resolve().parents[1] / "support" / "fr_rank.py")


def pipe_job(name: str, log: Path, fr: Path, flags: str = "", evidence_s: float = 15) -> str:
    """A job of 2 stand-in ranks (tests/support/fr_rank.py) with the flight recorder on,
    its dumps at ``fr/trace_rank_`` and a debug pipe each at ``fr/pipe_rank_<rank>.pipe``
    (TORCH_NCCL_DEBUG_INFO_PIPE_FILE: DumpPipe, torch/csrc/distributed/c10d/
    ProcessGroupNCCL.hpp, 2.5; docs/formats.md 8)."""
    start = f"{shlex.quote(sys.executable)} {shlex.quote(FR_RANK)} --ranks 2 {flags}".strip()
    values = {"start": start, "verify_s": 0.8, "stop_timeout": 5, "log": str(log)}
    lines = [f"[hosts.ct200.jobs.{name}]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in {**values, "evidence_s": evidence_s}.items()]
    lines += [
        f"[hosts.ct200.jobs.{name}.env]",
        f"TORCH_FR_DUMP_TEMP_FILE = {json.dumps(str(fr / 'trace_rank_'))}",
        f"TORCH_NCCL_DEBUG_INFO_PIPE_FILE = {json.dumps(str(fr / 'pipe_rank_'))}",
        'TORCH_FR_BUFFER_SIZE = "2000"',
    ]
    return "\n".join(lines) + "\n"


def wait_for_pipes(fr: Path, ranks: int) -> None:
    def made() -> bool:
        return all(stat_is_fifo(fr / f"pipe_rank_{r}.pipe") for r in range(ranks))

    asyncio.run(waiting.until(made, 30, "the ranks' debug pipes"))


def stat_is_fifo(path: Path) -> bool:
    try:
        return path.is_fifo()
    except OSError:
        return False


def test_restart_asks_each_rank_for_a_dump_through_its_debug_pipe(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    """A job that never timed out wrote no dump; its debug pipes make each rank write one
    now, and the restart keeps them before the stop."""
    name, log, fr = job_name(), tmp_path / "job.log", tmp_path / "fr"
    fr.mkdir()
    cfg = write_config(tmp_path, sshd, pipe_job(name, log, fr))
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    wait_for_pipes(fr, 2)
    assert not list(fr.glob("trace_rank_*"))  # nothing dumped until asked

    second = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert second.returncode == 0, second.stdout + second.stderr
    files = bundle_files(entries(client_env, name)[-1]["bundle"])
    for rank in range(2):
        assert (
            files[f"flight-recorder/trace_rank_{rank}"]
            == f"dump of rank {rank} on demand 1".encode()
        )
    assert "flight-recorder rank" not in files["index.txt"].decode()


def test_a_rank_that_never_dumps_is_said_and_the_restart_keeps_within_evidence_s(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    name, log, fr = job_name(), tmp_path / "job.log", tmp_path / "fr"
    fr.mkdir()
    table = pipe_job(name, log, fr, flags="--silent-rank 1", evidence_s=6)
    cfg = write_config(tmp_path, sshd, table)
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    wait_for_pipes(fr, 2)
    res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr
    took = re.search(r"\[evidence\] kept in (\S+) after ([\d.]+) s", res.stdout)
    assert took, res.stdout
    assert float(took.group(2)) <= 6.0
    files = bundle_files(took.group(1))
    assert files["flight-recorder/trace_rank_0"] == b"dump of rank 0 on demand 1"
    assert "flight-recorder/trace_rank_1" not in files
    index = files["index.txt"].decode()
    pipe = fr / "pipe_rank_1.pipe"
    assert re.search(rf"flight-recorder rank 1: .*{re.escape(str(pipe))}: no dump within", index), (
        index
    )


def test_doctor_says_per_running_job_whether_it_will_leave_evidence(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    ready, bare, idle = job_name(), job_name(), job_name()
    fr = tmp_path / "fr"
    fr.mkdir()
    tables = [
        evidence_job(ready, tmp_path / "a.log", fr / "trace_rank_")
        + 'TORCH_NCCL_DUMP_ON_TIMEOUT = "1"\n',
        job_table(bare, log=str(tmp_path / "b.log")),  # no flight recorder at all
        job_table(idle),  # never started
    ]
    cfg = write_config(tmp_path, sshd, *tables, python=sys.executable)
    for name in (ready, bare):
        res = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
        assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "--config", str(cfg), "doctor", "ct200", "--json"],
        env=client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks[f"{ready} flight recorder"]["status"] == "ok", checks[f"{ready} flight recorder"]
    assert "TORCH_FR_BUFFER_SIZE=2000" in checks[f"{ready} flight recorder"]["evidence"]
    assert checks[f"{ready} dump on timeout"]["status"] == "ok"
    folder = checks[f"{ready} dump folder"]
    assert folder["status"] == "ok", folder
    assert f"{fr}/trace_rank_RANK (TORCH_FR_DUMP_TEMP_FILE)" in folder["evidence"]
    off = checks[f"{bare} flight recorder"]
    assert off["status"] == "warning" and "neither set" in off["evidence"]
    assert off["fix"] == (
        f'add to [hosts.ct200.jobs.{bare}.env]: TORCH_FR_BUFFER_SIZE = "2000" (then restart it)'
    )
    assert checks[f"{bare} dump on timeout"]["fix"].endswith('TORCH_NCCL_DUMP_ON_TIMEOUT = "1"')
    # no prefix set: PyTorch's default under the job's HOME, which PyTorch creates itself
    assert (
        "comm_lib_trace_rank_RANK (PyTorch's default)" in checks[f"{bare} dump folder"]["evidence"]
    )
    assert checks[f"{idle} evidence"]["status"] == "n/a"
    spy = checks["py-spy"]
    if shutil.which("py-spy", path=sshd.session_path) is None:
        assert spy["status"] == "warning" and "pip install py-spy" in spy["fix"]
    else:  # the test lock's py-spy, beside the target's python
        assert spy["status"] == "ok", spy


async def test_r_on_a_hung_server_that_is_a_job_restarts_it_verified_by_its_health(
    sshd: SshServer,
    target: Path,
    local_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36.2: a server configured as a job (``server = PORT``) is the job of its
    ``sglang_hung``: its incident offers ``r restart NAME``, and the restart stops it,
    starts it with the job's command and is verified by ``/health_generate`` answering
    200 (the stand-in server hangs 3 s after its start; the restarted one decodes)."""
    from gpumon.backends.alerts.incident import incidents
    from gpumon.backends.alerts.store import Alert
    from gpumon.backends.model import Health
    from gpumon.backends.sim.scenario import HANG_AT
    from gpumon.tui.dashboard.actions import alert_job

    from sshd_server import free_port
    from waiting import until

    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    name, port = job_name(), free_port()
    sim = demo_settings("hang", demo_time=HANG_AT - 3.0)
    server = "-m gpumon.backends.sim.sglang_server --fresh"  # a new process: it starts now
    start = f"{shlex.quote(sys.executable)} {server} --ports {port}"
    table = (
        f"[hosts.ct200.jobs.{name}]\nstart = {json.dumps(start)}\nserver = {port}\n"
        "verify_s = 30\nstop_timeout = 5\nevidence = false\n"
        f"[hosts.ct200.jobs.{name}.env]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in sim.to_env().items())
        + f"[hosts.ct200.sglang]\nports = [{port}]\ndiscover = false\nhung_after_s = 5\n"
    )
    cfg = write_config(tmp_path, sshd, table, container=200, interval=0.5)
    host = host_for(cfg)
    job = host.job(name)
    assert job is not None and job.server == port and job.start is not None
    monitor = make_monitor(host, record=False)
    transport = make_transport(host)
    first = await launch_job(transport, job, job.start)
    monitor.start()

    def hung() -> Alert | None:
        return next((a for a in monitor.alerts.active() if a.key == f"sglang_hung:{port}"), None)

    def critical() -> Alert | None:
        alert = hung()
        return alert if alert is not None and alert.severity is Health.CRITICAL else None

    try:
        alert = await until(critical, 90, "the server's sglang_hung")
        assert alert is not None
        assert alert.job == name
        assert alert_job(monitor, alert) == job  # what r in the dashboard restarts
        [incident] = [i for i in incidents(monitor.alerts.active()) if i.cause.key == alert.key]
        assert ("r", f"restart {name}") in [(f.key, f.words) for f in incident.fixes]
        steps: list[str] = []
        t = JobTarget(host, transport)
        plan = await make_plan(t, name, "restart", state="running", last_alert=alert.message)
        assert first.pid in plan.pids
        verify = f":{port}/health_generate answers 200 within 30 s"
        assert any(verify in line for line in plan.lines()), plan.lines()
        run = RunRegistry().start(plan, t, progress=lambda s, m: steps.append(f"{s}: {m}"))
        outcome = await run.wait()
        assert outcome.ok, (outcome, steps)
        assert not alive(first.pid)
        assert f":{port}/health_generate answered 200" in outcome.message
        assert any("waiting up to 30 s for" in s for s in steps), steps
        [entry] = entries({"XDG_STATE_HOME": str(local_env)}, name)
        assert entry["outcome"] == "ok" and first.pid in entry["pids"]
        # the restarted server makes tokens: its hang ends
        await until(lambda: hung() is None, 60, "sglang_hung to end")
    finally:
        await monitor.stop()
        await transport.close()


def test_restart_names_the_rank_that_never_arrived_from_the_real_dumps(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    """A 4-rank job whose ranks' dumps (torch 2.13.0's capture: rank 2 skipped all_reduce
    #17) are where its environment says: the restart keeps each rank's dump and the
    analysis, names rank 2 with its PID (its RANK, read from its environment) before the
    stop, and the job restarts."""
    name, log, fr = job_name(), tmp_path / "job.log", tmp_path / "fr"
    fr.mkdir()
    # 4 stand-in ranks (tests/support/fr_rank.py) without a debug pipe: what they dumped is
    # only what the test puts where their TORCH_FR_DUMP_TEMP_FILE says
    start = f"{shlex.quote(sys.executable)} {shlex.quote(FR_RANK)} --ranks 4"
    table = evidence_job(name, log, fr / "trace_rank_", start=start)
    cfg = write_config(tmp_path, sshd, table)
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    ranks = wait_for_ranks(target, name)
    capture = UPSTREAM / "flight-recorder" / "torch-2.13.0" / "on-demand"
    for rank in range(4):
        shutil.copy(capture / f"trace_rank_{rank}", fr / f"trace_rank_{rank}")

    second = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert second.returncode == 0, second.stdout + second.stderr
    out = second.stdout
    said = f"{name} stalled: rank 2 (PID {ranks[2]}) never entered all_reduce #17 (ranks 0, 1, 3"
    assert said in out, out
    assert out.index(said) < out.index("[stop] stopping")
    entry = entries(client_env, name)[-1]
    assert entry["outcome"] == "ok"
    files = bundle_files(entry["bundle"])
    for rank in range(4):
        kept = files[f"flight-recorder/trace_rank_{rank}"]
        assert kept == (capture / f"trace_rank_{rank}").read_bytes()
    analysis = files["flight-recorder/analysis.txt"].decode()
    assert analysis.startswith(said)
    assert "process group 0 (default_pg), inputs 65536 Float, timeout 8 s" in analysis
    assert not any(alive(pid) for pid in ranks.values())
    restarted = wait_for_ranks(target, name)
    assert not set(restarted.values()) & set(ranks.values())


def rank_pids(state: Path, name: str) -> dict[int, int] | None:
    """The job's 4 processes with a RANK in their environment, by rank (None: not all
    4 yet): the children of the recorded launcher."""
    out = {}
    for pid in descendants(int(record(state, name)["pid"])):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((e[5:].decode() for e in environ if e.startswith(b"RANK=")), None)
        if rank is not None and rank.isdigit():
            out[int(rank)] = pid
    return out if len(out) == 4 else None


def wait_for_ranks(state: Path, name: str) -> dict[int, int]:
    found: dict[int, int] | None = None

    def ranks() -> dict[int, int] | None:
        nonlocal found
        found = rank_pids(state, name)
        return found

    asyncio.run(until(ranks, 30, "the job's 4 ranks"))
    assert found is not None
    return found


# --- an SGLang server's evidence (issue 37 point 1) ------------------------------------------

SGLANG_STAND_IN = Path(__file__).resolve().parents[1] / "support" / "sglang_stand_in"


def test_restart_of_a_hung_sglang_server_keeps_its_server_info_watchdog_dump_and_crash_dump(
    sshd: SshServer, target: Path, client_env: dict[str, str], tmp_path: Path
) -> None:
    """The stand-in launcher (tests/support/sglang_stand_in: SGLang's command line, the
    simulator's pages, the watchdog dump of SGLang 0.5.23's utils/watchdog.py in its log)
    started by gpumon as a job; its restart keeps what SGLang itself left: /server_info,
    the watchdog's lines of its log, and the newest crash dump of its
    --crash-dump-folder, a relative one (its working directory's), written as
    TokenizerManager.dump_requests_before_crash names it (FOLDER/HOSTNAME/crash_dump_
    %Y-%m-%d_%H-%M-%S.pkl, sglang 0.5.23 managers/tokenizer_manager.py)."""
    name, log, work, port = job_name(), tmp_path / "server.log", tmp_path / "work", free_port()
    work.mkdir()
    start = (
        f"exec {shlex.quote(sys.executable)} -m sglang.launch_server --port {port} "
        "--crash-dump-folder dumps"
    )
    table = (
        f"[hosts.ct200.jobs.{name}]\n"
        f"start = {json.dumps(start)}\nlog = {json.dumps(str(log))}\n"
        f"workdir = {json.dumps(str(work))}\nverify_s = 0.8\nstop_timeout = 5\n"
        f"[hosts.ct200.jobs.{name}.env]\n"
        f"PYTHONPATH = {json.dumps(f'{SGLANG_STAND_IN}{os.pathsep}{SGLANG_STAND_IN.parent}')}\n"
    )
    cfg = write_config(tmp_path, sshd, table)
    first = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert first.returncode == 0, first.stdout + first.stderr
    serving = waiting.until(lambda: "gpumon-sim-sglang: serving" in log.read_text(), 30, "serving")
    asyncio.run(serving)
    # What SGLang wrote on an earlier crash (the older file) and on this one (the newer).
    folder = work / "dumps" / "gpu-host"
    folder.mkdir(parents=True)
    old, new = (
        folder / "crash_dump_2026-01-04_10-00-00.pkl",
        folder / "crash_dump_2026-01-05_03-12-41.pkl",
    )
    old.write_bytes(b"older")
    new.write_bytes(bytes(range(256)) * 16)
    os.utime(old, (time.time() - 86400, time.time() - 86400))

    second = restart(["--config", str(cfg), "ct200", name, "--yes"], client_env)
    assert second.returncode == 0, second.stdout + second.stderr
    bundle = entries(client_env, name)[-1]["bundle"]
    files = bundle_files(bundle)
    info = json.loads(files[f"sglang/{port}-server_info.json"])
    assert info["model_path"]  # the stand-in's own page, fetched on the target's loopback
    watchdog = files[f"sglang/{port}-watchdog.txt"].decode()
    assert watchdog == WATCHDOG_DUMP  # its lines, and only those
    assert BEFORE.strip() not in watchdog and AFTER.strip() not in watchdog
    assert "sglang.launch_server --port" in files[f"sglang/{port}-command.txt"].decode()
    assert files[f"sglang/{port}-{new.name}"] == new.read_bytes()  # byte for byte
    assert f"sglang/{port}-{old.name}" not in files
    assert f"{new.name} (4096 bytes" in files["index.txt"].decode()
