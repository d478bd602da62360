"""The agent, the local/sim transports, the monitor and the headless reports, run for real
on this machine (the GPU is the simulator's)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import Config, HostConfig, resolve_host
from gpumon.backends.model import CheckCode, ConnState, Health, Source
from gpumon.backends.monitor import (
    HostMonitor,
    backoff_delay,
    check_verdict,
    demo_settings,
    make_monitor,
    snapshot_json,
    snapshot_table,
)
from gpumon.backends.parsers import PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.remote import AgentOptions, agent, program_argv, program_tag
from gpumon.backends.sim import SimTransport, write_wrapper
from gpumon.backends.sim.scenario import JUPYTER_MIB, JUPYTER_PID
from gpumon.backends.transport import ssh_command, wrap_container

from held_demo import HeldDemo, drafter_read
from waiting import until

pytestmark = pytest.mark.system

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia"
ROWS = (FIXTURES / "query_gpu_8x_rtxpro6000.csv").read_text().splitlines()


def test_row_batcher_splits_rounds_on_index_reset_and_keeps_junk() -> None:
    b = agent.RowBatcher(QUERY_FIELDS.index("index"), len(QUERY_FIELDS))
    out = [b.feed(r) for r in ROWS]
    assert out == [None] * 8
    assert b.feed("NVRM: Xid (PCI:0000:ba:00): 79, pid=1, name=x, GPU has fallen off") is None
    first = b.feed(ROWS[0])  # index 0 again: the previous round is complete
    assert first is not None and first[:8] == ROWS and "Xid" in first[8]
    assert b.flush() == [ROWS[0]]
    assert b.flush() is None


def test_bootstrap_reads_exactly_the_source_and_keeps_stdin_open(tmp_path: Path) -> None:
    options = AgentOptions(
        fields=list(QUERY_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi=str(write_wrapper(tmp_path, demo_settings(demo_time=5, frozen=True))),
        interval=0.2,
        nvml=False,
    )
    argv, src = program_argv(sys.executable, "agent", args=[options.to_json()], flags=("-u",))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(src)
    proc.stdin.flush()
    hello = json.loads(proc.stdout.readline())
    assert hello["type"] == "hello" and hello["source"] == Source.AGENT_SMI.value
    kinds: set[str] = set()
    while not {"gpus", "procs"} <= kinds:
        msg = json.loads(proc.stdout.readline())
        kinds.add(msg["type"])
        if msg["type"] == "gpus":
            assert len(msg["rows"]) == 8 and msg["fields"] == list(QUERY_FIELDS)
    # stdin closing is how the agent learns its client is gone: it exits within 2 s.
    t0 = time.monotonic()
    proc.stdin.close()
    assert proc.wait(timeout=2) == 0
    assert time.monotonic() - t0 < 2


def test_quoting_keeps_every_word_literal() -> None:
    argv = ["nvidia-smi", "--query-gpu=a,b", "x; touch /tmp/pwned", "$(id)", "it's"]
    assert wrap_container(argv, 200)[:4] == ["pct", "exec", "200", "--"]
    cmd = ssh_command(argv, 200)
    assert shlex.split(cmd) == ["pct", "exec", "200", "--", *argv]
    assert ssh_command(argv, None) == shlex.join(argv)


def test_backoff_is_capped_exponential_with_jitter() -> None:
    import random

    rng = random.Random(1)
    delays = [backoff_delay(a, rng) for a in range(1, 12)]
    assert 0.5 <= delays[0] <= 1.0
    assert 1.0 <= delays[1] <= 2.0
    assert all(d <= 30.0 for d in delays) and delays[-1] >= 15.0
    assert len({round(backoff_delay(5, rng), 6) for _ in range(5)}) > 1  # jittered


async def _sampled(monitor: HostMonitor, count: int = 1, timeout: float = 15) -> None:
    """Until ``count`` samples and a process list have come (the shared ``until``)."""
    await until(
        lambda: monitor.samples >= count and monitor.processes_time is not None,
        timeout,
        lambda: f"{count} samples and a process list ({monitor.status})",
        pause=monitor.wait_for_update,
        step=0.5,
    )


async def test_demo_monitor_histories_and_interval_change() -> None:
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(replace(host, interval=0.2), demo_settings(demo_time=20))
    monitor.start()
    try:
        await _sampled(monitor, 3)
        assert _state(monitor) == ConnState.CONNECTED
        assert monitor.status.source == Source.AGENT_SMI
        assert sorted(monitor.histories) == list(range(8))
        assert len(monitor.histories[6]) >= 3
        assert monitor.latest is not None and len(monitor.latest.processes) == 8
        monitor.set_interval(0.5)  # the agent restarts nvidia-smi at the new rate
        await until(lambda: _sampling_every(monitor) == [b"500"], 30, "nvidia-smi at 500 ms")
        n = monitor.samples
        await until(lambda: monitor.samples > n + 1, 30, "samples at the new rate")
    finally:
        await monitor.stop()
    assert _state(monitor) == ConnState.STOPPED


async def test_a_shorter_interval_reaches_an_idle_nvidia_smi_loop_at_once() -> None:
    """Between rounds the agent's nvidia-smi loop sleeps until its next line (no fixed
    short poll); a new interval still restarts it at once, not at the next round: here an
    hour away (the agent's longest interval), so only a restart brings the next sample."""
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(replace(host, interval=3600.0), demo_settings(demo_time=20))
    monitor.start()
    try:
        await _sampled(monitor, 1)  # the loop's first round comes at once
        n = monitor.samples
        monitor.set_interval(0.2)
        await until(lambda: monitor.samples > n, 30, "a restarted loop's first round")
        assert _sampling_every(monitor) == [b"200"]
    finally:
        await monitor.stop()


def _sampling_every(monitor: HostMonitor) -> list[bytes]:
    """The ``-lms`` of each of the demo's nvidia-smi loops now running."""
    assert isinstance(monitor.transport, SimTransport)
    loops = [_cmdline(p).split(b"\0") for p in _pids_with(str(monitor.transport.root))]
    return [argv[argv.index(b"-lms") + 1] for argv in loops if b"-lms" in argv[:-1]]


def _state(monitor: HostMonitor) -> ConnState:
    """Read afresh (the state changes under awaits; mypy would keep it narrowed)."""
    return monitor.status.state


async def test_nvidia_smi_failure_is_a_host_error_and_values_are_kept(tmp_path: Path) -> None:
    """nvidia-smi breaks after data arrived: error quoted, last values kept (stale)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    settings = demo_settings(demo_time=5)
    smi = write_wrapper(bin_dir, settings)
    marker = "GPUMON_SIM_T0=" + settings.to_env()["GPUMON_SIM_T0"]
    good = smi.read_text()
    host = HostConfig(
        name="box", kind="local", python=sys.executable, nvidia_smi=str(smi), interval=0.2
    )
    monitor = make_monitor(host)
    monitor.start()
    try:
        await _sampled(monitor, 2)
        before = monitor.latest
        write_wrapper(bin_dir, replace(settings, fault="driver_not_loaded"))
        # Kill the running loop so the agent has to start nvidia-smi again.
        for pid in _pids_with(marker):
            os.kill(pid, 9)
        deadline = time.monotonic() + 15
        while not monitor.status.error:
            assert time.monotonic() < deadline, "error never reported"
            await monitor.wait_for_update(0.5)
        assert "couldn't communicate with the NVIDIA driver" in monitor.status.error
        # The last values stay (stale), never blanked: the last good sample, which may be one
        # the loop read after ``before`` and before the kill took effect (0.2 s rounds).
        kept = monitor.latest
        assert kept is not None and before is not None and kept.time >= before.time
        assert [g.index for g in kept.gpus] == [g.index for g in before.gpus]
        assert [g.memory_total_mib for g in kept.gpus] == [97887] * len(before.gpus)
        assert all(g.memory_used_mib is not None for g in kept.gpus)
        smi.write_text(good)
        deadline = time.monotonic() + 40
        while monitor.status.error:
            assert time.monotonic() < deadline, "never recovered"
            await monitor.wait_for_update(0.5)
        assert monitor.latest is not before
    finally:
        await monitor.stop()


def _pids_with(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (the simulator's unique T0)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return [p for p in pids if p != os.getpid()]


async def test_snapshot_json_contract_and_check_verdicts(tmp_path: Path) -> None:
    settings = replace(demo_settings(demo_time=5, frozen=True), fault="gpu_lost:4")
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, settings)
    monitor.start()
    try:
        await _sampled(monitor)
    finally:
        await monitor.stop()
    now = time.time()
    data = snapshot_json(monitor, now)
    keys = ["host", "time", "source", "stale_s", "error", "gpus", "alerts", "sglang", "vllm"]
    last = ["jobs", "logs", "incomplete", "incidents", "unreadable_gpus", "notes"]
    assert list(data) == [*keys, *last]
    for flow in data["logs"]:  # the demo job's log, followed by the agent
        assert list(flow) == ["path", "tag", "lines", "lines_dropped", "bytes_skipped"]
        assert flow["lines_dropped"] == 0 and flow["bytes_skipped"] == 0
    assert {a["kind"] for a in data["alerts"]} == {"gpu_health"}  # GPU 4 is lost
    assert data["host"] == "demo" and data["source"] == "agent/nvidia-smi"
    gpu_keys = [
        "index", "uuid", "name", "bus_id", "memory_used_mib", "memory_total_mib",
        "utilization_pct", "temperature_c", "power_w", "power_limit_w", "health",
        "problems", "health_facts", "processes", "memory_unattributed_mib", "minor", "mig",
    ]  # fmt: skip
    assert all(list(g) == gpu_keys for g in data["gpus"])
    process_keys = [
        "pid", "host_pid", "container", "user", "host_user", "name", "command", "cpu_pct",
        "rss_mib", "started", "memory_mib", "sm_pct", "mem_bw_pct", "ppid", "parent", "source",
        "gpus", "minors",
    ]  # fmt: skip
    assert all(list(p) == process_keys for g in data["gpus"] for p in g["processes"])
    lost = data["gpus"][4]
    assert lost["health"] == "critical" and lost["memory_used_mib"] is None
    assert lost["temperature_c"] is None and lost["power_w"] is None
    assert data["gpus"][0]["processes"][0]["pid"] > 0
    json.dumps(data)  # serialisable as is
    code, line = check_verdict(monitor)
    assert code == CheckCode.CRITICAL and line.startswith("CRITICAL demo: GPU 4")
    table = snapshot_table(monitor)
    lost_row = next(row for row in table.splitlines() if row.startswith("  4  "))
    assert "n/a" in lost_row and "critical" in table
    # (Much later the same data is stale, UNKNOWN: tests/unit/test_headless_text.py. A
    # stopped monitor's ages stand at its stop, as a one-shot judges them.)


def test_hostile_process_names_are_escaped_in_the_table() -> None:
    from gpumon.backends.model import GpuProcess, GpuSample, HostSample
    from gpumon.backends.untrusted import printable

    assert printable("evil\x1b[2Jname\x07") == "evil\\x1b[2Jname\\x07"
    assert printable("普通") == "普通"
    gpu = GpuSample(index=0, uuid="GPU-1", health=Health.OK)
    sample = HostSample(
        "h", time.time(), None, (gpu,), (GpuProcess(1, "\x1b]0;x\x07", 5, "GPU-1"),)
    )
    assert sample.processes_for(gpu)[0].pid == 1


async def test_demo_drafter_job_dies_of_oom_and_releases_memory() -> None:
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, demo_settings(demo_time=65))
    transport = monitor.transport
    assert isinstance(transport, SimTransport)
    monitor.start()
    try:
        await _sampled(monitor)
        deadline = time.monotonic() + 10
        while "OutOfMemoryError" not in (
            transport.job_log.read_text() if transport.job_log.exists() else ""
        ):
            assert time.monotonic() < deadline, "the drafter log never got its traceback"
            await asyncio.sleep(0.1)
        last = transport.job_log.read_text().rstrip().splitlines()[-1]
        assert last.startswith("torch.OutOfMemoryError: CUDA out of memory.")
        assert monitor.latest is not None
        gpu6 = monitor.latest.gpus[6]  # only CT 201's jupyter is left on it
        assert gpu6.memory_used_mib is not None and gpu6.memory_used_mib < JUPYTER_MIB + 100
        left = {p.host_pid or p.pid for p in monitor.latest.processes_for(gpu6)}
        assert left <= {JUPYTER_PID}
    finally:
        await monitor.stop()
    assert not transport.root.exists()  # the simulator cleans up after itself


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_check_demo_warns_before_the_oom_and_is_critical_after() -> None:
    before = _cli("check", "demo", "--demo-time", "45")
    assert before.returncode == 1, before.stdout + before.stderr
    assert before.stdout.startswith("WARNING demo: drafter: GPU 6 memory ")
    after = _cli("check", "demo", "--demo-time", "90")
    assert after.returncode == 2, after.stdout + after.stderr
    assert after.stdout.startswith(
        "CRITICAL demo: drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free"
    )
    assert "before gpumon started" not in after.stdout  # still the job's state
    snap = json.loads(_cli("snapshot", "demo", "--demo-time", "90", "--json").stdout)
    # the OOM was in the log's backlog: history; the drafter, configured and still down
    # since, is one job_crashed condition in the OOM's words (issue 34 point 7)
    assert not any(a["kind"] == "cuda_oom" for a in snap["alerts"])
    down = [a for a in snap["alerts"] if a["kind"] == "job_crashed"]
    assert len(down) == 1 and down[0]["gpu"] == 6 and down[0]["severity"] == "critical"
    assert down[0]["job"] == "drafter" and "CUDA out of memory" in down[0]["message"]
    record = Alert("k", Health.CRITICAL, "job_crashed", "demo", 6, None, "m", 0.0, 0.0)
    assert list(down[0]) == list(record.to_json())  # the documented keys (test_alerts pins)


def test_demo_workloads_in_the_snapshot() -> None:
    sglang = json.loads(_cli("snapshot", "demo", "--scenario", "sglang", "--json").stdout)
    servers = sglang["sglang"]
    assert len(servers) == 8 and all(s["up"] for s in servers)
    assert all(1000 < s["gen_tokens_per_s"] < 1400 for s in servers)  # ~1,180 tok/s each
    assert {s["model"] for s in servers} == {"Qwen/Qwen3-8B"}
    assert sglang["jobs"] == []
    training = json.loads(_cli("snapshot", "demo", "--demo-time", "30", "--json").stdout)
    (job,) = training["jobs"]
    assert job["name"] == "drafter" and job["state"] == "running" and job["gpus"] == [5, 6, 7]
    assert 12000 <= job["tokens_per_s"] <= 13500 and job["eta_s"] > 0  # ~12.8 Ktok/s
    crashed = json.loads(_cli("snapshot", "demo", "--demo-time", "90", "--json").stdout)
    (job,) = crashed["jobs"]
    assert job["state"] == "crashed" and job["crash_reason"] == "OOM on GPU 6"


async def test_demo_reconnects_after_its_agent_dies() -> None:
    """A session ending is not the machine ending: the simulator survives reconnects."""
    host = resolve_host(Config(path=None), "demo")
    settings = demo_settings(demo_time=20)
    monitor = make_monitor(replace(host, interval=0.2), settings)
    monitor.start()
    try:
        await _sampled(monitor, 2)
        assert isinstance(monitor.transport, SimTransport)
        marker = str(monitor.transport.root)  # on the PATH of everything the demo runs
        agents = [p for p in _pids_with(marker) if program_tag("agent").encode() in _cmdline(p)]
        assert agents, "the agent runs"
        for pid in agents:
            os.kill(pid, 9)
        count = monitor.samples
        deadline = time.monotonic() + 20
        while monitor.samples < count + 3:
            assert time.monotonic() < deadline, f"no recovery: {monitor.status}"
            await monitor.wait_for_update(0.5)
        assert monitor.status.state == ConnState.CONNECTED and monitor.status.error is None
    finally:
        await monitor.stop()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_history_keeps_the_newest_when_resized() -> None:
    from gpumon.backends.model import GpuHistory, GpuSample

    hist = GpuHistory(5)
    for i in range(5):
        hist.append(float(i), GpuSample(index=0, memory_used_mib=i))
    hist.resize(3)
    assert list(hist.times) == [2.0, 3.0, 4.0] and list(hist.memory_used_mib) == [2, 3, 4]
    hist.resize(10)
    for i in range(5, 9):
        hist.append(float(i), GpuSample(index=0, memory_used_mib=i))
    assert len(hist) == 7 and hist.maxlen == 10


async def test_auto_restart_brings_the_demo_drafter_back_after_its_oom(tmp_path: Path) -> None:
    """The automatic restart does not walk back into the OOM's cause (issue 36 point 3):
    CT 201's jupyter keeps 6 GiB of GPU 6, and the drafter was seen to need more than that
    leaves (what it held there at its OOM and the 2 GiB it tried). Its wait for free GPUs
    names the jupyter; once K stops it (the dashboard's kill, over the same transport),
    the drafter is started and refills its GPUs."""
    from gpumon.backends.actions import Session, Step, audit
    from gpumon.backends.actions.kill import kill_plan, send_signal

    # The scenario clock held at 40 s until the agent has read the drafter's log (an OOM
    # already in the log's backlog at start is never restarted automatically), then at 4x:
    # the OOM 5 s after the release, and the restarted drafter refills its GPU four times
    # as fast (the backoff and the verify time stay real seconds).
    held = HeldDemo(tmp_path)
    monitor = make_monitor(resolve_host(Config(path=None), "demo"), held.settings(40, 4.0))
    drafter = monitor.host.job("drafter")
    assert drafter is not None and not drafter.auto_restart  # off by default
    monitor.host = replace(monitor.host, jobs=(replace(drafter, auto_restart=True),))
    session = Session()
    session.watch(monitor)
    monitor.start()
    try:
        await until(lambda: drafter_read(monitor), 60, "the drafter's log read")
        held.release()

        def waiting_for_the_jupyter() -> bool:
            run = session.runs.last("demo", "drafter")
            return run is not None and any(
                step is Step.WAIT_FREE and "CT 201 jupyter-lab holds 6.0 GiB" in message
                for step, message in run.history
            )

        await until(
            waiting_for_the_jupyter,
            60,
            lambda: (
                "the automatic restart naming the jupyter: "
                + repr(getattr(session.runs.last("demo", "drafter"), "history", None))
                + repr([a.message for a in monitor.alerts.active()])
            ),
        )
        jupyter = next(p for p in monitor.processes if p.host_pid == JUPYTER_PID)
        plan = kill_plan(
            "demo",
            jupyter,
            host_access=monitor.host_side_fresh(),
            container=monitor.host.container,
            host_proc=monitor.transport.host_proc_root,
        )
        assert (await send_signal(monitor.transport, plan, "TERM")).ok
        deadline = time.monotonic() + 90
        seen_empty = refilled = False
        while not refilled:
            assert time.monotonic() < deadline, f"no automatic restart: {monitor.alerts.active()}"
            await monitor.wait_for_update(0.5)
            used = monitor.latest.gpus[6].memory_used_mib if monitor.latest else None
            seen_empty |= used is not None and used < 1000  # CT 201's went too
            refilled = seen_empty and used is not None and used > 50_000
        kinds = [a.kind for a in monitor.alerts.history()]
        assert "cuda_oom" in kinds and "auto_restart" in kinds
        auto = [a for a in monitor.alerts.history() if a.kind == "auto_restart"]
        assert auto[0].job == "drafter" and "automatic restart 1/3" in auto[0].message
        assert not [a for a in monitor.alerts.active() if a.kind == "cuda_oom"]  # cleared
        # The GPUs refill before the run's verification ends; its outcome is audited then.
        while (run := session.runs.last("demo", "drafter")) is None or run.outcome is None:
            assert time.monotonic() < deadline, "the automatic restart never ended"
            await asyncio.sleep(0.1)
        entries = [(e["action"], e["outcome"]) for e in audit.read_entries()]
        assert ("auto-restart", "ok") in entries
        run = session.runs.last("demo", "drafter")  # the session's registry ran it
        assert run is not None and run.automatic is not None and run.outcome is not None
    finally:  # bounded: a teardown that hangs would stall the whole run
        async with asyncio.timeout(30):
            await session.close()
            await monitor.stop()


def test_snapshot_local_runs_the_agent_on_gpumons_own_interpreter(tmp_path: Path) -> None:
    """Issue 17 point 13: a pipx/venv install on a GPU box. ``python3`` on PATH is one
    without pynvml (here: one that does not even run); gpumon's own interpreter has
    nvidia-ml-py, so ``local`` says ``agent/nvml`` (pynvml is the stand-in of
    tests/support/fake_nvml on its path: this machine has no GPU)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    for name in ("python3", "python"):
        (shim / name).write_text("#!/bin/sh\nexit 1\n")
        (shim / name).chmod(0o755)
    config = tmp_path / "gpumon.toml"
    config.write_text("")
    fake = Path(__file__).parents[1] / "support" / "fake_nvml"
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH")) if p),
        "GPUMON_CONFIG": str(config),
    }
    res = subprocess.run(
        [sys.executable, "-m", "gpumon.tui.cli", "snapshot", "local", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["source"] == "agent/nvml" and len(snap["gpus"]) == 1, snap
