"""The job-control scripts run for real: each assembled script is valid sh with its includes in
place (`sh -n`), and values travel as positional arguments after the script, never spliced
into it (`sh -c SCRIPT gpumon-job ARG...` on this machine)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpumon.backends.actions import job_status
from gpumon.backends.config import HostConfig, JobConfig
from gpumon.backends.remote.scripts import job_script
from gpumon.backends.transport import LocalTransport, RunResult
from gpumon.backends.transport.base import RUN_MAX_BYTES

pytestmark = pytest.mark.system

REMOTE = Path(__file__).parents[2] / "backends" / "remote"
SCRIPTS = ("status", "signal", "launch", "stop")  # what gpumon runs; the rest are included


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


class Recorder(LocalTransport):
    """This machine as a job target, keeping the argv of each command it runs."""

    def __init__(self, state: Path) -> None:
        super().__init__(HostConfig(name="box", kind="local"))
        self.job_state_dir = str(state)
        self.argvs: list[list[str]] = []

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 30.0,
        on_host: bool = False,
        max_bytes: int = RUN_MAX_BYTES,
        keep_end: bool = False,
    ) -> RunResult:
        self.argvs.append(list(argv))
        return await super().run(
            argv,
            input=input,
            timeout=timeout,
            on_host=on_host,
            max_bytes=max_bytes,
            keep_end=keep_end,
        )


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
