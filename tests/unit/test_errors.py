"""Every error the library raises for its user is a GpumonError (the CLI catches that once),
and keeps the base it had, so existing ``except ValueError`` callers still catch it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import gpumon.backends
from gpumon.backends.actions import JobError, ParamError
from gpumon.backends.config import ConfigError
from gpumon.backends.errors import GpumonError
from gpumon.backends.parsers import ProgressSpecError, SglangParseError
from gpumon.backends.recording import RecordingError
from gpumon.backends.torchenv import ProbeError
from gpumon.backends.transport import TransportError

# Exceptions that never reach the user as they are, and why.
NOT_FOR_THE_USER = {
    "gpumon.backends.config.schema.Invalid": "turned into a ConfigError naming the key",
    "gpumon.backends.monitor.sources.agent._TooOld": "control flow: the probes then choose",
    "gpumon.backends.sim.smi.UsageError": "the simulated nvidia-smi's own usage error",
    "gpumon.backends.sim.smi._Stop": "control flow: SIGTERM ends the simulator's loop",
}


def library_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in gpumon.backends, by dotted name; the code that runs
    on the target (remote/) is standard library only and raises none of gpumon's."""
    found = {}
    for info in pkgutil.walk_packages(gpumon.backends.__path__, "gpumon.backends."):
        if info.name.startswith("gpumon.backends.remote"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_library_error_is_a_gpumon_error() -> None:
    exceptions = library_exceptions()
    assert set(NOT_FOR_THE_USER) <= set(exceptions)  # the exemptions are still real
    outside = [
        name
        for name, cls in exceptions.items()
        if not issubclass(cls, GpumonError) and name not in NOT_FOR_THE_USER
    ]
    assert outside == []
    assert len(exceptions) - len(NOT_FOR_THE_USER) >= 9


def test_names_and_value_error_bases_are_kept() -> None:
    for cls in (ConfigError, TransportError, JobError, ProbeError, RecordingError):
        assert issubclass(cls, GpumonError)
    for value_error in (ParamError, ProgressSpecError, SglangParseError):
        assert issubclass(value_error, GpumonError) and issubclass(value_error, ValueError)
    assert str(ConfigError("expected a number", source="c.toml", key="hosts.a.port")) == (
        "c.toml: hosts.a.port: expected a number"
    )


def test_the_command_line_says_a_refusal_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from gpumon.tui.cli import main

    assert main(["check", "bad\x1bname"]) == 3  # UNKNOWN, as check promises
    said = capsys.readouterr()  # check is a Nagios plugin: its verdict on stdout
    assert said.err == "" and said.out.startswith("UNKNOWN: command line: host ")
    assert main(["snapshot", "bad\x1bname"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpumon: ")
    assert "\x1b" not in said.out + "".join(lines)
