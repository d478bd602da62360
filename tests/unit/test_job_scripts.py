"""The job-control scripts as real files: shipped as package data, assembled with their
includes into valid sh, and passed as ``sh -c SCRIPT gpumon-job ARG...``."""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

import pytest

from gpumon.backends.actions import job_status
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.remote.scripts import job_script
from gpumon.backends.transport import LocalTransport, RunResult

ROOT = Path(__file__).parents[2]
REMOTE = ROOT / "backends" / "remote"
SCRIPTS = ("status", "signal", "launch", "stop")  # what gpumon runs; the rest are included


def test_every_shell_script_is_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["gpumon.backends.remote"]
    files = sorted(p.relative_to(REMOTE).as_posix() for p in REMOTE.rglob("*.sh"))
    assert files, "no job scripts found"
    assert [f for f in files if not any(fnmatch(f, g) for g in globs)] == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_assembled_scripts_are_valid_sh_with_their_includes_in_place(name: str) -> None:
    text = job_script(name)
    assert subprocess.run(["sh", "-n", "-c", text]).returncode == 0
    assert not any(line.startswith(". ./") for line in text.splitlines()), "an include left"
    if name != "stop":
        assert "read_record() {" in text  # funcs.sh
    if name == "launch":  # the runner travels inside, between the heredoc's markers
        runner = (REMOTE / "jobs" / "runner.sh").read_text()
        body = text.split("<<'GPUMON_RUNNER_EOF'\n", 1)[1].split("\nGPUMON_RUNNER_EOF\n")[0]
        assert body == runner.rstrip("\n")


def test_an_unknown_script_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        job_script("nope")


class Recorder(LocalTransport):
    """This machine as a job target, keeping the argv of each command it runs."""

    def __init__(self, state: Path) -> None:
        super().__init__(HostConfig(name="box", kind="local"))
        self.job_state_dir = str(state)
        self.argvs: list[list[str]] = []

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> RunResult:
        self.argvs.append(list(argv))
        return await super().run(argv, input=input, timeout=timeout)


async def test_values_travel_as_positional_arguments_after_the_script(tmp_path: Path) -> None:
    transport = Recorder(tmp_path / "jobs")
    log = f"$(touch {tmp_path}/pwned).log"  # run if it were ever spliced into the script
    job = JobConfig(name="drafter", log=log, workdir=str(tmp_path / "w d"))
    status = await job_status(transport, job)
    assert status.record is None and status.log_path == f"{tmp_path}/w d/{log}"
    [argv] = transport.argvs
    assert argv[:3] == ["sh", "-c", job_script("status")]
    assert argv[3:] == ["gpumon-job", str(tmp_path / "jobs"), "drafter", log, f"{tmp_path}/w d"]
    assert not (tmp_path / "pwned").exists()
