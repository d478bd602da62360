"""The agent's NVML worker (one thread for every call) and what tells its process loop
that there is work (``memory_key``); tests/system/test_agent_loops.py has what takes real
time (a hung call given up on, the host-stats loop's heap trims)."""

from __future__ import annotations

import threading

import pytest

from gpumon.backends.parsers import QUERY_FIELDS
from gpumon.backends.remote import agent, procfacts
from gpumon.backends.remote.agent import NvmlWorker, memory_key
from gpumon.backends.remote.protocol import AgentOptions


def test_every_call_runs_in_one_long_lived_thread() -> None:
    worker = NvmlWorker()
    before = threading.active_count()
    threads = [worker.call(lambda: threading.get_ident(), 5.0) for _ in range(20)]
    assert {done for done, _ in threads} == {True}
    assert len({ident for _, ident in threads}) == 1
    assert threading.get_ident() not in {ident for _, ident in threads}
    assert threading.active_count() == before + 1


def test_an_exception_is_the_answer() -> None:
    def fail() -> None:
        raise RuntimeError("driver in trouble")

    done, answer = NvmlWorker().call(fail, 5.0)
    assert done and isinstance(answer, RuntimeError) and str(answer) == "driver in trouble"


def row(index: int, used: int, name: str = "NVIDIA H200") -> str:
    values = {"index": str(index), "memory.used": str(used), "name": name}
    return ", ".join(values.get(f, "1") for f in QUERY_FIELDS)


def test_the_memory_key_is_each_gpus_index_and_used_memory() -> None:
    fields = list(QUERY_FIELDS)
    rows = [row(0, 1024), row(1, 80000)]
    assert memory_key(fields, rows) == ("0", "1024", "1", "80000")
    assert memory_key(fields, [row(0, 1024), row(1, 80001)]) != memory_key(fields, rows)
    assert memory_key(fields, rows[:1]) != memory_key(fields, rows)  # a GPU fell off


def test_the_memory_key_skips_junk_and_allows_for_a_name_with_a_comma() -> None:
    fields = list(QUERY_FIELDS)
    xid = "NVRM: Xid (PCI:0000:ba:00): 79, pid=1, name=x, GPU has fallen off"
    rows = [row(0, 1024, name="NVIDIA A100, SXM4"), xid]
    assert memory_key(fields, rows) == ("0", "1024")
    assert memory_key(fields, [xid]) == ()


def test_without_memory_used_the_key_is_the_gpu_count() -> None:
    assert memory_key(["index", "name"], ["0, a", "1, b"]) == ("0", "1")
    assert memory_key(["name"], ["a"]) == ()


class _Out:
    """Output's ``send``: keeps the messages."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, msg: object) -> None:
        self.sent.append(msg)


def test_device_file_holders_are_scanned_again_only_when_they_may_have_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading every /proc/*/fd is the costly part of a process poll inside a container:
    it is done again when the driver's PIDs change, a holder is gone, or
    ``DEVICE_RESCAN_S`` has passed; in between only the holders are described again (so
    their CPU and RSS stay fresh)."""
    import os

    scans: list[int] = []
    me = os.getpid()
    holders = {me: [0]}

    def scan(proc: str = "/proc") -> dict[int, list[int]]:
        scans.append(1)
        return dict(holders)

    monkeypatch.setattr(procfacts, "device_file_holders", scan)
    options = AgentOptions(fields=list(QUERY_FIELDS), process_fields=[], nvidia_smi="nvidia-smi")
    out = _Out()
    loop = agent.Agent(options, out)  # type: ignore[arg-type]
    loop.device_files = True  # as inside a container
    loop.send_device_users({"4242"})
    loop.send_device_users({"4242"})
    assert len(scans) == 1
    sent = [m for m in out.sent if getattr(m, "source", None) == "device-files"]
    assert len(sent) == 2 and [r["pid"] for r in sent[1].records] == [me]  # type: ignore[attr-defined]
    loop.send_device_users({"4242", "5151"})  # a new process in the driver's list
    assert len(scans) == 2
    holders.clear()
    holders[2**22 + 7] = [1]  # a holder that then exits
    loop.send_device_users({"4242"})
    assert len(scans) == 3
    loop.send_device_users({"4242"})  # the held PID is gone: scanned again
    assert len(scans) == 4
    holders.clear()
    holders[me] = [0]
    loop.send_device_users({"4242"})
    loop.send_device_users({"4242"})
    assert len(scans) == 5  # the gone PID made the first of these rescan, not the second
    monkeypatch.setattr(agent, "DEVICE_RESCAN_S", 0.0)
    loop.send_device_users({"4242"})
    assert len(scans) == 6
    loop.send_device_users(None)  # no driver list this poll: who holds what is unknown
    assert len(scans) == 7


def test_rounds_faster_than_the_interval_are_sent_as_the_newest_one_per_interval() -> None:
    pacer = agent.RoundPacer()
    assert pacer.offer(["0, 1"], 10.0, 1.0) == ["0, 1"]  # the first at once
    assert pacer.offer(["0, 2"], 10.1, 1.0) is None  # held for the rest of the interval
    assert pacer.offer(["0, 3"], 10.2, 1.0) is None and pacer.dropped == 1  # replaced
    assert pacer.wait(10.2, 1.0) == pytest.approx(0.8)
    assert pacer.due(10.9, 1.0) is None
    assert pacer.due(11.0, 1.0) == ["0, 3"] and pacer.held is None
    # a steady sampler whose round comes a little early is held that little, never dropped
    assert pacer.offer(["0, 4"], 11.98, 1.0) is None
    assert pacer.due(12.0, 1.0) == ["0, 4"]
    assert pacer.offer(["0, 5"], 13.5, 1.0) == ["0, 5"] and pacer.dropped == 1
