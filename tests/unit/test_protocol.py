"""The agent's wire protocol, one module for both ends: every message survives the wire,
the client's dispatch table covers it, and nothing the target sends is trusted."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gpumon.backends.config import HostConfig
from gpumon.backends.monitor import make_monitor
from gpumon.backends.monitor.sources.agent import dispatch, handlers
from gpumon.backends.remote import protocol


def sample_messages() -> list[protocol.Message]:
    return [
        protocol.Hello(protocol.AGENT_VERSION, "agent/nvml", "3.8.18", "ct200", 42, "note"),
        protocol.Gpus(1.5, ["index", "name"], ["0, RTX"]),
        protocol.Procs(1.5, ["1, python, 100, GPU-1, 00:01"]),
        protocol.Procs(1.5, ["1, python, 100, GPU-1, 00:01"], {"GPU-1": 700}),
        protocol.Procs(
            1.5,
            ["1, python, 100, GPU-1, 00:01"],
            {"GPU-1": 700},
            [["GPU-1", 1, 42, 17], ["3", 1, None, None]],
            "nvml",
            [{"pid": 1, "user": "root", "command": "python train.py --rank 1", "ppid": 0}],
        ),
        protocol.ProcRecords(1.5, "host", [{"host_pid": 9, "container": "200", "pid": 1}]),
        protocol.Minors(1.5, {"00000000:18:00.0": 4}, "nvml"),
        protocol.Minors(1.5, {}, "procfs", "/proc/driver/nvidia/gpus: No such file or directory"),
        protocol.Mig(
            1.5,
            "nvidia-smi",
            ["GPU-95d3a06c-4f21-4c8e-b7a9-0a6e2f81c4d5"],
            [{"gpu": "GPU-95d3a06c-4f21-4c8e-b7a9-0a6e2f81c4d5", "gi": 5, "pids": [2419511]}],
        ),
        protocol.Mig(1.5, "nvml", [], [], "GPU 0: Not Supported"),
        protocol.SmiError(1.5, 9, "NVIDIA-SMI has failed"),
        protocol.Log("job:drafter", "/root/train.log", 1.5, True, ["step 1"], 3),
        protocol.Kernel(1.5, ["NVRM: Xid 79"]),
        protocol.MemoryEvents(1.5, "oom 1\n"),
        protocol.Http("sglang:30000", 1.5, 200, "sglang:x 1\n"),
        protocol.Note("kernel log not readable here"),
        protocol.LogProblem("watch", "/var/log/x.log", "Permission denied"),
        protocol.ThreadDied(1.5, "procs", "NVMLLibraryMismatchError: ...", "agent.py:9 in f"),
        protocol.HostStats(1.5, 12.5, 64, 1000, 500, 100, 50, [1.0, 2.0, 3.0]),
        protocol.FirstRound("discover", [30000, 31613]),
        protocol.FirstRound("logs"),
        protocol.ServerInfo("vllm", 8000, 4242, 4, None, 2, [4, 5, 6, 7]),
    ]


def test_every_message_survives_the_wire_and_has_a_client_handler() -> None:
    messages = sample_messages()
    assert {type(m) for m in messages} == set(protocol.MESSAGES.values())
    for message in messages:
        wire = json.loads(protocol.encode(message))
        assert wire["type"] == message.TYPE
        assert protocol.MESSAGES[wire["type"]].from_wire(wire) == message
    monitor = make_monitor(HostConfig(name="box", kind="local"))
    table = handlers(monitor, on_hello=lambda hello: False)
    assert set(table) == set(protocol.MESSAGES)  # the dispatch table covers the protocol


def test_a_hostile_message_is_coerced_never_trusted() -> None:
    server = protocol.ServerInfo.from_wire(
        {"type": "server_info", "port": 70000, "tp": True, "pp": 0, "minors": [3, "4", -1, 3]}
    )
    assert (server.port, server.tp, server.pp, server.minors) == (0, None, None, [3])
    bad: dict[str, Any] = {"type": "log", "tag": 5, "lines": "not a list", "backlog": "yes"}
    log = protocol.Log.from_wire(bad)
    assert (log.tag, log.path, log.lines, log.t, log.dropped) == ("5", "5", [], 0.0, 0)
    hello = protocol.Hello.from_wire({"type": "hello", "agent": "1", "pid": True})
    assert hello.agent == -1 and hello.pid is None
    problem = protocol.version_problem(hello)
    assert problem is not None and "unknown version" in problem
    assert protocol.version_problem(protocol.Hello(protocol.AGENT_VERSION, "x")) is None
    minors = protocol.Minors.from_wire({"minors": {"a": 1, "c": True, "d": "2", "e": 2.0}})
    assert (minors.minors, minors.source, minors.error) == ({"a": 1}, "", None)
    assert protocol.Minors.from_wire({"minors": [4]}).minors == {}
    http = protocol.Http.from_wire({"type": "http", "tag": "sglang:1", "status": 200.5})
    assert http.status is None and http.body == ""
    assert protocol.decode_command('{"cmd": "interval", "seconds": 2}') == protocol.SetInterval(2)
    for line in ("", "[1]", '{"cmd": "interval", "seconds": true}', '{"cmd": "rm"}'):
        assert protocol.decode_command(line) is None


def test_lines_that_are_not_messages_are_counted_and_unknown_types_ignored() -> None:
    monitor = make_monitor(HostConfig(name="box", kind="local"))
    table = handlers(monitor, on_hello=lambda hello: False)
    assert dispatch(monitor, table, b"not json\n") is False
    assert dispatch(monitor, table, b"[1, 2]\n") is False
    assert monitor.skipped_lines == 2
    assert dispatch(monitor, table, b'{"type": "from_a_newer_agent"}\n') is False
    assert monitor.skipped_lines == 2


def test_options_round_trip_through_argv() -> None:
    options = protocol.AgentOptions(
        fields=["index"],
        process_fields=["pid"],
        interval=0.5,
        logs=[{"path": "/x", "tag": "t"}],
        device_files=False,  # the default is True: a value that must make the trip
    )
    assert protocol.AgentOptions.from_wire(json.loads(options.to_json())) == options
    assert {f.name for f in protocol.fields(options)} == set(json.loads(options.to_json()))


def test_records_behave_as_the_dataclasses_they_stand_for() -> None:
    """protocol's classes are made by its own ``record`` (dataclasses is not imported on
    the target): the same constructor, equality, hash, repr and frozenness as the
    ``@dataclass(frozen=True)`` the type checker sees."""

    @dataclasses.dataclass(frozen=True)
    class Real:
        t: float
        rows: list[str]
        memory: dict[str, int] = dataclasses.field(default_factory=dict)
        usage: list[list[Any]] = dataclasses.field(default_factory=list)
        usage_source: str = ""
        details: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    hello = protocol.Hello(1, "agent/nvml", pid=7)
    assert "__dataclass_fields__" not in vars(protocol.Hello)  # the record, not a dataclass
    assert hello == protocol.Hello(agent=1, source="agent/nvml", python="", pid=7)
    assert hello != protocol.Hello(1, "agent/nvml", pid=8)
    assert hello.__eq__(Real(1.0, [])) is NotImplemented
    assert repr(hello) == (
        "Hello(agent=1, source='agent/nvml', python='', hostname='', pid=7, note=None)"
    )
    assert hash(hello) == hash(protocol.Hello(1, "agent/nvml", pid=7))
    assert protocol.Hello.__match_args__ == ("agent", "source", "python", "hostname", "pid", "note")
    with pytest.raises(AttributeError):
        hello.pid = 8  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del hello.pid
    ours = protocol.Procs(1.0, ["1"])
    real = Real(1.0, ["1"])
    assert [f.name for f in protocol.fields(ours)] == [
        "t", "rows", "memory", "usage", "usage_source", "details"
    ]  # fmt: skip
    assert repr(ours).replace("Procs", "Real") == repr(real)[repr(real).index("Real(") :]
    for make in (protocol.Procs, Real):
        with pytest.raises(TypeError):
            make(1.0)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            make(1.0, [], rows=[])  # type: ignore[misc]
        with pytest.raises(TypeError):
            make(1.0, [], nope=1)  # type: ignore[call-arg]
    a = protocol.AgentOptions([], [])
    b = protocol.AgentOptions([], [])
    assert a.logs == [] and a.logs is not b.logs  # default_factory: one list each
    assert protocol.AgentOptions.interval == 1.0  # a plain default stays on the class
    assert not hasattr(protocol.AgentOptions, "logs")  # a factory's does not
    with pytest.raises(TypeError):
        hash(ours)  # a list inside: unhashable, as the dataclass is
