"""A job's configured ``env`` on the real local shell: the job-control scripts export its
NAME=VALUE pairs only where the job's command runs, so pairs named like the scripts' own
variables reach the job exactly and leave the launch, the PID record, the exit record and
the launch lock where gpumon looks for them."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.actions import JobRecord, JobStatus, job_status, launch_job
from gpumon.backends.actions.jobs import run_stop_command
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.transport import LocalTransport

from job_records import kill_recorded_jobs

pytestmark = pytest.mark.system

# The names launch.sh and runner.sh use (or used) for their own variables.
SCRIPT_NAMES = ("dir", "session", "i", "a", "job", "log", "cmd", "wd", "method", "token")
# What the job's command does: saves its environment and working directory, writes a line
# to its log (stdout), exits 7.
DUMP = (
    "import json, os, sys; "
    "json.dump({'env': dict(os.environ), 'cwd': os.getcwd()}, open(sys.argv[1], 'w')); "
    "print('job ran', flush=True); sys.exit(7)"
)


class JobBox(LocalTransport):
    """This machine as a job target, its records in a test directory."""

    def __init__(self, state: Path, method: str) -> None:
        super().__init__(HostConfig(name="box", kind="local"))
        self.job_state_dir = str(state)
        self.job_launch_method = method


@pytest.fixture(params=["setsid", "tmux"])
def method(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sh", "bash"])
def shell(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The target's ``sh``: this machine's, or bash (``/bin/sh`` on some distributions),
    found first on PATH for every ``sh`` the scripts start."""
    name = str(request.param)
    if name != "sh":
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"{name} is not installed")
        shim = tmp_path / "shim"
        shim.mkdir()
        (shim / "sh").symlink_to(real)
        monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return name


@pytest.fixture
def box(
    method: str, shell: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[JobBox]:
    """A target launching with ``method`` (tmux: a tmux server of the test's own) in
    ``shell``; afterwards every process group recorded in its jobs dir is killed."""
    tmux_dir = Path(tempfile.mkdtemp(prefix="gje"))  # short: a socket path has 108 bytes
    if method == "tmux":
        if shutil.which("tmux") is None:
            pytest.skip("tmux is not installed")
        monkeypatch.setenv("TMUX_TMPDIR", str(tmux_dir))
        monkeypatch.delenv("TMUX", raising=False)
    yield JobBox(tmp_path / "jobs", method)
    kill_recorded_jobs(tmp_path / "jobs")
    if method == "tmux":
        subprocess.run(["tmux", "kill-server"], capture_output=True)
    shutil.rmtree(tmux_dir, ignore_errors=True)


def _colliding_env(tmp_path: Path, method: str) -> dict[str, str]:
    """A value for each of the scripts' names, each one that breaks the launch or the
    runner if it ever lands in their variables: real directories that are not the jobs dir
    or the workdir, another job's name, the other launch method, shell text."""
    for d in ("elsewhere", "other-wd"):
        (tmp_path / d).mkdir()
    return {
        "dir": str(tmp_path / "elsewhere"),
        "session": "gpumon-other } 'quoted'",
        "i": "99",
        "a": "",
        "job": "other-job",
        "log": str(tmp_path / "elsewhere" / "other.log"),
        "cmd": f"touch {tmp_path}/pwned; exit 0",
        "wd": str(tmp_path / "other-wd"),
        "method": "setsid" if method == "tmux" else "tmux",
        "token": f"1.2\nline two $(touch {tmp_path}/pwned) `id`",
    }


async def _finished(box: JobBox, job: JobConfig, record: JobRecord) -> JobStatus:
    """The job's status once the exit record of the run ``record`` describes is read."""
    for _ in range(100):
        status = await job_status(box, job)
        assert status.record is not None and status.record.token == record.token
        if status.exit_code is not None:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"no exit record for {job.name} within 10 s: {status}")


async def _launch_twice(box: JobBox, tmp_path: Path, env: dict[str, str]) -> None:
    """Launch a job with ``env`` twice (the second launch is refused if the first left its
    lock behind), each time checking the run's records, its environment, workdir and log."""
    workdir, jobs = tmp_path / "work", tmp_path / "jobs"
    workdir.mkdir()
    job = JobConfig(name="j.env", log=str(tmp_path / "j.log"), workdir=str(workdir), env=env)
    seen = tmp_path / "seen.json"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(DUMP)} {shlex.quote(str(seen))}"
    for run in (1, 2):
        seen.unlink(missing_ok=True)
        record = await launch_job(box, job, command)
        assert (record.job, record.log, record.method) == ("j.env", job.log, box.job_launch_method)
        tmux = box.job_launch_method == "tmux"
        assert record.session == ("gpumon-j_env" if tmux else None)
        status = await _finished(box, job, record)
        assert status.exit_code == 7, f"run {run}: {status}"
        got = json.loads(seen.read_text())
        assert {k: got["env"].get(k) for k in env} == env
        assert got["env"]["GPUMON_JOB"] == "j.env"
        assert [k for k in got["env"] if k.startswith(("GPUMON_JOB_", "gpumon_"))] == []
        assert got["cwd"] == str(workdir)
        assert Path(job.log or "").read_text().count("job ran\n") == run
        assert sorted(p.name for p in jobs.iterdir()) == [
            "gpumon-run.sh",
            "j.env.exit",
            "j.env.json",
            "j.env.launch.err",
        ]
        assert list((tmp_path / "elsewhere").iterdir()) == []
        assert list((tmp_path / "other-wd").iterdir()) == []
        assert not (tmp_path / "pwned").exists()


async def test_a_job_whose_env_names_every_script_variable_gets_exactly_its_own_values(
    box: JobBox, tmp_path: Path
) -> None:
    env = _colliding_env(tmp_path, box.job_launch_method)
    assert set(env) == set(SCRIPT_NAMES)
    await _launch_twice(box, tmp_path, env)


@pytest.mark.parametrize("shell", ["sh"])
@pytest.mark.parametrize("method", ["setsid"])
@pytest.mark.parametrize("name", SCRIPT_NAMES)
async def test_a_job_whose_env_names_one_script_variable_gets_its_own_value(
    box: JobBox, tmp_path: Path, name: str
) -> None:
    env = _colliding_env(tmp_path, box.job_launch_method)
    await _launch_twice(box, tmp_path, {name: env[name]})


async def test_a_stop_command_whose_job_env_names_the_scripts_variables_gets_its_own(
    shell: str, tmp_path: Path
) -> None:
    env = _colliding_env(tmp_path, "setsid")
    workdir = tmp_path / "work"
    workdir.mkdir()
    job = JobConfig(name="j", workdir=str(workdir), env=env)
    seen = tmp_path / "seen.json"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(DUMP)} {shlex.quote(str(seen))}"
    box = JobBox(tmp_path / "jobs", "setsid")
    res = await run_stop_command(box, job, command, JobStatus(job="j"), timeout=20.0)
    assert (res.exit_code, res.stdout) == (7, "job ran\n"), res.stderr
    got = json.loads(seen.read_text())
    assert {k: got["env"].get(k) for k in SCRIPT_NAMES} == env
    assert got["env"]["GPUMON_JOB"] == "j" and got["cwd"] == str(workdir)
    assert not (tmp_path / "pwned").exists() and not (workdir / "pwned").exists()
