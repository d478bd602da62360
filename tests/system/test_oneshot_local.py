"""``gpumon check local`` starts the agent before gpumon's imports (``transport.prestart``,
``tui.cli.launch``); on gpumon's own interpreter the agent runs from the installed
modules. ``snapshot local`` runs the agent's round in gpumon's own process instead. Run
for real: the agent's child processes, the fake NVML of tests/support/fake_nvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.parsers import PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.remote import AgentOptions
from gpumon.backends.transport import prestart
from gpumon.tui.cli import launch

from sshd_server import processes_matching

pytestmark = pytest.mark.system

FAKE_NVML = Path(__file__).parents[1] / "support" / "fake_nvml"


def _read_json_line(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the agent said nothing"
    got: dict[str, Any] = json.loads(line)
    return got


def _fake_nvml_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(FAKE_NVML)}


def test_the_installed_agent_reads_its_options_from_stdin_and_uses_nvml() -> None:
    argv = prestart.installed_argv(sys.executable, "agent", prestart.AGENT_FLAGS)
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_fake_nvml_env()
    )
    assert proc.stdin is not None
    try:
        options = AgentOptions(list(QUERY_FIELDS), list(PROCESS_FIELDS), interval=0.2)
        proc.stdin.write(json.dumps([options.to_json()]).encode() + b"\n")
        proc.stdin.flush()
        hello = _read_json_line(proc)
        assert hello["type"] == "hello" and hello["source"] == "agent/nvml", hello
        assert "found without site processing" in hello["note"]  # -S, as shipped
        # the messages of one sample come in no fixed order and their number grows with
        # the protocol (minors came with AGENT_VERSION 2): read until the GPUs, bounded
        types: list[str] = []
        while "gpus" not in types and len(types) < 40:
            types.append(_read_json_line(proc)["type"])
        assert "gpus" in types, types
    finally:
        proc.stdin.close()  # the client is gone: the agent ends by itself
    assert proc.wait(timeout=5) == 0


def test_an_installed_agent_whose_stdin_closes_before_its_options_exits_quietly() -> None:
    argv = prestart.installed_argv(sys.executable, "agent", prestart.AGENT_FLAGS)
    res = subprocess.run(argv, input=b"", capture_output=True, timeout=10, env=_fake_nvml_env())
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")


@pytest.fixture
def early_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty config, the fake NVML for the agent, and a mark in the environment that
    every process started from here inherits: what ``processes_matching`` looks for."""
    mark = f"GPUMON_EARLY_TEST={uuid.uuid4()}"
    config = tmp_path / "gpumon.toml"
    config.write_text("")
    monkeypatch.setenv("GPUMON_CONFIG", str(config))
    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML))
    monkeypatch.setenv(*mark.split("="))
    return mark


class Spy:
    """Records what ``prestart`` started, handed over and ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[list[str] | None] = []
        self.taken: list[subprocess.Popen[bytes] | None] = []
        self.discarded: list[int] = []
        start, take, discard = prestart.start_agent, prestart.take, prestart.discard

        def spy_start() -> list[str] | None:
            self.started.append(start())
            return self.started[-1]

        def spy_take(argv: Any) -> subprocess.Popen[bytes] | None:
            self.taken.append(take(argv))
            return self.taken[-1]

        def spy_discard() -> int:
            self.discarded.append(discard())
            return self.discarded[-1]

        monkeypatch.setattr(prestart, "start_agent", spy_start)
        monkeypatch.setattr(prestart, "take", spy_take)
        monkeypatch.setattr(prestart, "discard", spy_discard)


def _alive(mark: str) -> list[tuple[int, str]]:
    deadline = time.monotonic() + 5  # a killed process is reaped at once; its children soon
    while (found := processes_matching(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_snapshot_local_starts_no_agent_process(
    early_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``snapshot local`` runs the agent's round in gpumon's own process
    (``monitor.oneshot``): no early agent, none adopted (tests/system/
    test_oneshot_in_process.py compares its answer with the agent process's)."""
    spy = Spy(monkeypatch)
    code = (
        "from gpumon.tui.cli import main\n"
        "from gpumon.backends.transport import prestart\n"
        "assert main(['snapshot', 'local', '--json']) == 0\n"
        "assert prestart._started == []\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["source"] == "agent/nvml" and len(snap["gpus"]) == 1, snap
    assert spy.started == [] and spy.taken == []  # nothing of prestart in this process either
    assert _alive(early_env) == []


def test_check_local_uses_the_early_agent(
    early_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spy = Spy(monkeypatch)
    code = launch.main(["check", "--window", "0", "local"])
    line = capsys.readouterr().out
    assert code in (0, 1) and line.startswith(("OK", "WARNING")), line  # the fake GPU's state
    assert [p is not None for p in spy.taken] == [True] and spy.discarded == [0]
    assert _alive(early_env) == []


def test_an_early_agent_is_ended_when_the_config_is_bad(
    early_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(os.environ["GPUMON_CONFIG"]).write_text("[hosts.x\n")
    spy = Spy(monkeypatch)
    assert launch.main(["check", "local"]) == 3  # check's UNKNOWN
    assert capsys.readouterr().out.startswith("UNKNOWN: ")
    assert spy.started[0] is not None and spy.taken == [] and spy.discarded == [1]
    assert _alive(early_env) == []


def test_an_early_agent_is_not_used_by_another_interpreter_and_is_ended(
    early_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``[defaults] python`` names another interpreter (a link to this one, so it runs):
    the agent is shipped to it as to any target; the early one is ended unused."""
    other = tmp_path / "python3"
    other.symlink_to(sys.executable)
    Path(os.environ["GPUMON_CONFIG"]).write_text(f'[defaults]\npython = "{other}"\n')
    spy = Spy(monkeypatch)
    code = launch.main(["check", "--window", "0", "local"])
    line = capsys.readouterr().out
    assert code in (0, 1) and line.startswith(("OK", "WARNING")), line
    assert spy.started[0] is not None and spy.discarded == [1]
    assert spy.taken and not any(spy.taken)  # asked for (the probe, the agent), not given
    assert _alive(early_env) == []
