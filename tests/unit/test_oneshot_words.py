"""Which command lines start the agent early (``tui.cli.launch``), and that the early
agent's argv is the one ``AgentSource`` asks for on gpumon's own interpreter (adoption
is an exact argv match: a drift between the two would silently lose the early start)."""

from __future__ import annotations

import json
import sys

import pytest

from gpumon.backends.monitor.sources.agent import agent_argv, python_usable
from gpumon.backends.remote import AgentOptions, program_tag
from gpumon.backends.remote.doctor_probe_fs import is_gpumon_program
from gpumon.backends.transport.prestart import AGENT_FLAGS, REMOTE_DIR, installed_argv
from gpumon.tui.cli.launch import early_agent_wanted


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "local"],
        ["--config", "/x.toml", "check", "--window", "0", "local"],
        ["check", "--timeout", "5", "local", "--read-only"],
    ],
)
def test_one_shots_on_local_start_the_agent_early(argv: list[str]) -> None:
    assert early_agent_wanted(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["local"],  # the dashboard
        # the agent's round runs in gpumon's own process (monitor.oneshot): no early agent
        ["snapshot", "local"],
        ["snapshot", "--timeout", "5", "local", "--json"],
        ["snapshot", "demo"],
        ["snapshot", "box"],
        ["check", "localhost"],
        ["restart", "local", "job"],
        ["--config", "local", "snapshot", "demo"],  # "local" is the option's value
        ["snapshot", "--timeout", "local"],
        ["snapshot", "--", "local"],
        ["watch", "local"],
    ],
)
def test_anything_else_does_not(argv: list[str]) -> None:
    assert not early_agent_wanted(argv)


def test_the_early_argv_is_the_one_the_agent_source_starts_on_gpumons_interpreter() -> None:
    options = AgentOptions(fields=["index"], process_fields=["pid"], interval=0.5)
    argv, data = agent_argv(sys.executable, options, installed=True)
    assert argv == installed_argv(sys.executable, "agent", AGENT_FLAGS)
    assert argv[1:3] == ["-u", "-S"] and argv[argv.index("-c") + 2] == program_tag("agent")
    assert argv[-2] == REMOTE_DIR and argv[-1] == "agent"
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert json.loads(data) == [options.to_json()]
    assert is_gpumon_program(argv)  # the doctor still tells it from a user of the venv
    shipped, source = agent_argv(sys.executable, options)  # any other Python: shipped
    assert shipped[-1] == options.to_json() and len(source) > 10_000


@pytest.mark.parametrize(
    ("version", "usable"),
    [
        ("3.8.0", True),
        ("3.11.7", True),
        ("3.10", True),
        ("4.0.1", True),
        ("3.7.17", False),
        ("2.7.18", False),
        ("3", False),
        ("", False),
        ("3.x", False),
    ],
)
def test_a_hello_names_a_usable_python_as_the_probe_judges_one(version: str, usable: bool) -> None:
    assert python_usable(version) is usable
