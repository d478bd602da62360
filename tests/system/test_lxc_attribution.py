"""Host-side process attribution on real kernel facts (``tests/support/proxmox_host``):
two "containers" (PID + mount + user namespaces in cgroup v2 ``lxc/200/ns`` and
``lxc/201/ns``, root = host uid 100000), GPU processes holding ``/dev/nvidiaN`` in them,
and a fake driver. The host collector (Python and the shell loop) maps each host PID to
its container, its PID in there (``NSpid``) and its user (``uid_map``); the agent inside
CT 200 lists the device-file users and the driver's PIDs, translated or not; a demo beside
the stand-in lists none of its processes. Skipped, with the reason printed, where unshare,
cgroup2 or root is missing."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from proxmox_host import SYSTEM_PYTHON, GpuProc, ProxmoxHost, skip_reason

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import ProcessSource
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.monitor.sources.agent import agent_argv
from gpumon.backends.parsers.nvidia_smi import PROCESS_FIELDS, QUERY_FIELDS, parse_compute_apps
from gpumon.backends.parsers.processes import container_view, foreign, from_record
from gpumon.backends.remote import host_procs, procfacts, protocol

from waiting import until

pytestmark = pytest.mark.system

REASON = skip_reason()


@pytest.fixture
def pve() -> Iterator[tuple[ProxmoxHost, GpuProc, GpuProc]]:
    if REASON is not None:
        print(f"SKIPPED (no test Proxmox host here): {REASON}")
        pytest.skip(REASON)
    host = ProxmoxHost()
    try:
        host.start_container(200)
        host.start_container(201)
        train = host.start_gpu_process(200, (0, 1), 30000, "train.py --cfg drafter.yaml")
        jupyter = host.start_gpu_process(201, (6,), 6144, "jupyter-lab --no-browser")
        yield host, train, jupyter
    finally:
        host.stop()
    assert not host.cgroup.exists() and not host.root.exists()  # nothing left behind


def by_host_pid(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["host_pid"]: r for r in records}


def test_the_host_collector_maps_each_host_pid_to_its_container(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc],
) -> None:
    host, train, jupyter = pve
    assert train.pid != train.host_pid and train.pid > 1  # a real nested PID namespace
    collector = host_procs.HostCollector({"nvidia_smi": str(host.bin / "nvidia-smi")})
    records, error = collector.poll()
    assert error is None
    got = by_host_pid(records)
    t, j = got[train.host_pid], got[jupyter.host_pid]
    assert (t["container"], t["pid"], t["memory_mib"]) == ("200", train.pid, 30000)
    assert (j["container"], j["pid"], j["memory_mib"]) == ("201", jupyter.pid, 6144)
    assert (t["host_uid"], t["uid"], t["user"], t["host_user"]) == (100000, 0, "root", "100000")
    assert "/train.py " in t["command"] and "--cfg drafter.yaml" in t["command"]
    assert t["rss_mib"] > 1
    assert abs(t["started"] - time.time()) < 120
    assert t["cpu_pct"] is None  # the first poll has nothing to compare with
    again, _ = collector.poll()
    assert by_host_pid(again)[train.host_pid]["cpu_pct"] is not None

    procs = [from_record(r, "host", 200) for r in records]
    mine = next(p for p in procs if p.host_pid == train.host_pid)
    theirs = next(p for p in procs if p.host_pid == jupyter.host_pid)
    assert mine.pid == train.pid and theirs.pid is None  # no PID inside CT 200
    assert foreign(procs, 200) == (theirs,)


def test_the_shell_loop_reads_the_same_facts(pve: tuple[ProxmoxHost, GpuProc, GpuProc]) -> None:
    host, train, jupyter = pve
    argv = ["sh", "-c", host_procs.SHELL_LOOP, "gpumon-host-procs", "1"]
    out = subprocess.run(
        [*argv, str(host.bin / "nvidia-smi"), "/proc", "once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    rounds = host_procs.ShellRound()
    done = [d for d in map(rounds.feed, out.stdout.splitlines()) if d is not None]
    [(records, error)] = done
    assert error is None
    python, _ = host_procs.HostCollector({"nvidia_smi": str(host.bin / "nvidia-smi")}).poll()
    keys = ("container", "pid", "uid", "user", "command", "memory_mib", "gpu_uuid", "start_ticks")
    for pid in (train.host_pid, jupyter.host_pid):
        shell, py = by_host_pid(records)[pid], by_host_pid(python)[pid]
        assert {k: shell[k] for k in keys} == {k: py[k] for k in keys}
        assert abs(shell["started"] - py["started"]) < 2.0  # USER_HZ assumed 100 in sh


def agent_stream(
    host: ProxmoxHost,
    enough: Callable[[list[tuple[str, protocol.Message]]], bool],
    timeout: float = 20.0,
    **options: Any,
) -> list[tuple[str, protocol.Message]]:
    """Run gpumon's agent inside CT 200 (``pct exec``; ``options`` over the test's
    ``AgentOptions``): its messages, (type, message) in the order sent, until ``enough``."""
    settings = {
        "fields": list(QUERY_FIELDS),
        "process_fields": list(PROCESS_FIELDS),
        "nvidia_smi": str(host.bin / "nvidia-smi"),
        "interval": 0.5,
        "process_interval": 0.5,
        "nvml": False,
        **options,
    }
    argv, data = agent_argv(SYSTEM_PYTHON, protocol.AgentOptions(**settings))
    proc = subprocess.Popen(
        [str(host.pct_path), "exec", "200", "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    got: list[tuple[str, protocol.Message]] = []
    deadline = time.monotonic() + timeout
    try:
        while not enough(got) and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                break
            raw = json.loads(line)
            got.append((raw["type"], protocol.MESSAGES[raw["type"]].from_wire(raw)))
    finally:
        proc.stdin.close()  # the agent exits when its stdin closes
        proc.wait(timeout=10)
    assert enough(got), (got, proc.stderr.read() if proc.stderr else b"")
    return got


def agent_messages(host: ProxmoxHost, until: set[str]) -> dict[str, protocol.Message]:
    """The agent inside CT 200 until it has sent each type: the last of each."""
    got = agent_stream(host, lambda got: until <= {kind for kind, _ in got})
    return dict(got)


@pytest.mark.parametrize("mode", ["host", "translate"])
def test_inside_the_container_the_agent_lists_device_file_users(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc], mode: str
) -> None:
    host, train, jupyter = pve
    host.set_mode(mode)
    got = agent_messages(host, {"procs", "proc_records"})
    files = got["proc_records"]
    assert isinstance(files, protocol.ProcRecords) and files.source == "device-files"
    [rec] = files.records  # only CT 200's process is in this PID namespace
    assert (rec["pid"], rec["minors"], rec["user"], rec["host_pid"]) == (
        train.pid,
        [0, 1],
        "root",
        None,
    )
    rows = got["procs"]
    assert isinstance(rows, protocol.Procs)
    driver = parse_compute_apps(rows.rows).processes
    files_procs = [from_record(r, "device-files", 200) for r in files.records]
    view = container_view(driver, files_procs, 200)
    mine = [p for p in view if p.command and "train.py" in p.command]
    assert [p.pid for p in mine] == [train.pid]
    if mode == "host":  # old driver: host PIDs, both CTs' processes; none resolve here
        assert {p.pid for p in driver} == {train.host_pid, jupyter.host_pid}
        assert mine[0].source == ProcessSource.DEVICE_FILES and mine[0].memory_mib is None
        unresolved = [p for p in view if p.pid is None]
        assert {p.host_pid for p in unresolved} == {train.host_pid, jupyter.host_pid}
    else:  # new driver: our own PIDs, the other container's dropped
        assert {p.pid for p in driver} == {train.pid}
        assert mine[0].source == ProcessSource.CONTAINER_NVML and mine[0].memory_mib == 30000


def test_an_agent_told_not_to_list_device_files_lists_none_inside_the_container(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc],
) -> None:
    """``device_files`` off (the simulator's agent) holds inside a real container too,
    where the test above gets the list: three process polls, no device-file list."""
    host, _, _ = pve
    got = agent_stream(
        host,
        lambda got: [kind for kind, _ in got].count("procs") >= 3,
        device_files=False,
        process_fallback_s=0.5,  # a poll every 0.5 s (no memory changes here)
    )
    kinds = [kind for kind, _ in got]
    assert "proc_records" not in kinds, kinds


def test_a_scan_from_another_mount_namespace_finds_none_of_the_containers_holders(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc],
) -> None:
    """This test runs where PIDs are shared with the stand-in containers but ``/dev`` is
    not (as an agent in a Docker container started with the host's PID namespace, or a
    test's agent beside another test's stand-in, since this machine has /.dockerenv). The
    containers' processes hold *their* ``/dev/nvidia0``, ``/dev/nvidia6``: files that are
    not this namespace's (it has none). The scan used to list them by their path, so a
    test's agent named another test's process as its GPU's holder (CI at load 15: ``held
    by host PID 4243`` where the driver's PID should have stood as it was)."""
    _, train, jupyter = pve
    assert not Path("/dev/nvidia0").exists()  # this namespace has no GPU device files
    for gpu in (train, jupyter):  # they do hold files named so, in their namespaces
        targets = {os.readlink(f) for f in Path(f"/proc/{gpu.host_pid}/fd").iterdir()}
        assert f"/dev/nvidia{gpu.gpus[0]}" in targets, targets
    held = procfacts.device_file_holders()
    assert train.host_pid not in held and jupyter.host_pid not in held, held
    assert procfacts.held_devices("/proc", train.host_pid) == []


async def test_a_demo_beside_the_stand_in_lists_none_of_its_processes(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc],
) -> None:
    """The demo's agent runs on this machine; where that is a container (a CI runner has
    /.dockerenv) it used to list this machine's holders of /dev/nvidiaN as the simulated
    CT200's: another test's stand-in GPU processes, running beside a demo under
    ``pytest -n``, then showed in the demo's process list (and made the driver's PIDs
    unresolved there). Without the Proxmox host's list (``host_processes = false``) the
    demo shows its container's own view, which any device-file list joins."""
    host = replace(resolve_host(Config(path=None), "demo"), host_processes=False)
    monitor = make_monitor(host, demo_settings(demo_time=20), record=False)
    lists: list[float] = []  # each process list's time: the driver's and any device files'

    def two_lists() -> bool:
        at = monitor.processes_time
        if at is not None and at not in lists:
            lists.append(at)
        return len(lists) >= 2  # the first poll's device-file list came, had it been sent

    monitor.start()
    try:
        await until(two_lists, 60, "two process lists", pause=monitor.wait_for_update)
        assert monitor.processes and not [
            p for p in monitor.processes if p.source == ProcessSource.DEVICE_FILES
        ]
        assert not [p for p in monitor.processes if p.command and "gpu-proc-" in p.command]
    finally:
        await monitor.stop()


class FakeNvml:
    """The few NVML calls the host collector makes, listing the test's GPU processes by
    host PID (what NVML on the Proxmox host says)."""

    class NVMLError(Exception):
        pass

    def __init__(self, procs: list[GpuProc]) -> None:
        self.procs = procs

    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return type("Pci", (), {"busId": f"00000000:{h:02X}:00.0"})()

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [
            type("P", (), {"pid": p.host_pid, "usedGpuMemory": p.memory_mib << 20})()
            for p in self.procs
            if p.gpus[0] == h
        ]


def test_the_host_collector_reads_nvml_where_the_host_has_it(
    pve: tuple[ProxmoxHost, GpuProc, GpuProc],
) -> None:
    _, train, jupyter = pve
    collector = host_procs.HostCollector({}, FakeNvml([train, jupyter]))
    records, error = collector.poll()
    assert error is None
    got = by_host_pid(records)
    assert (got[train.host_pid]["container"], got[train.host_pid]["pid"]) == ("200", train.pid)
    assert got[train.host_pid]["gpu_uuid"] == "GPU-0"
    assert (got[jupyter.host_pid]["container"], got[jupyter.host_pid]["memory_mib"]) == (
        "201",
        6144,
    )
