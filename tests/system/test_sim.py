"""The simulated machine: the model, the stand-in nvidia-smi executable and the training job.

The executables run for real (through the ``/bin/sh`` wrappers in tmp_path) and their
output goes through the real parsers, exactly as the agent would see it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.model import Health
from gpumon.backends.parsers import (
    QUERY_FIELDS,
    classify_smi_failure,
    parse_compute_apps,
    parse_query_gpu,
)
from gpumon.backends.sim import (
    DEFAULT_T0,
    DRAFTER_GPUS,
    ENV_VARS,
    GPU_COUNT,
    GPU_FIELDS,
    MEMORY_RESERVED_MIB,
    MEMORY_TOTAL_MIB,
    OOM_AT,
    OOM_GPU,
    PROCESS_FIELDS,
    TARGET_GPUS,
    UUIDS,
    SimSettings,
    compute_processes,
    gpu_states,
    job,
    read_restarts,
    record_restart,
    scenario_time,
    smi,
    with_state,
    write_job_wrapper,
    write_wrapper,
)
from gpumon.backends.sim.scenario import (
    JUPYTER_MIB,
    JUPYTER_PID,
    held,
    released_at,
    wall_time,
)

pytestmark = pytest.mark.system

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia"
ALL_GPU_NAMES = [n for f in GPU_FIELDS for n in (f.name, *f.aliases)]
ALL_PROCESS_NAMES = [n for f in PROCESS_FIELDS for n in (f.name, *f.aliases)]
PROCESS_QUERY = "--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id"


def clean_env() -> dict[str, str]:
    """This environment without any GPUMON_SIM_* (the wrappers must carry their own)."""
    return {k: v for k, v in os.environ.items() if k not in ENV_VARS}


def smi_at(tmp_path: Path, settings: SimSettings, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the wrapper-installed nvidia-smi once with ``settings``."""
    exe = write_wrapper(tmp_path / "bin", settings)
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=30, env=clean_env()
    )


def frozen(t: float, **kw: Any) -> SimSettings:
    return SimSettings(frozen_at=t, **kw)


# ------------------------------------------------------------------------------ the model


def test_same_seed_and_time_give_the_same_values_and_another_seed_other_noise() -> None:
    s = SimSettings(seed=3)
    assert gpu_states(s, 12.3) == gpu_states(SimSettings(seed=3), 12.3)
    assert compute_processes(s, 12.3) == compute_processes(SimSettings(seed=3), 12.3)
    other = gpu_states(SimSettings(seed=4), 12.3)
    assert [g.power_w for g in other] != [g.power_w for g in gpu_states(s, 12.3)]


def test_noise_changes_with_the_sample_tick() -> None:
    s = SimSettings()
    powers = {tuple(g.power_w for g in gpu_states(s, t)) for t in (1.0, 2.0, 3.0, 4.0)}
    assert len(powers) == 4


def test_gpu6_crosses_95_percent_before_45_s_and_is_near_full_before_the_oom() -> None:
    # `gpumon check demo --demo-time 45` must already warn about GPU 6.
    s = SimSettings()
    times = [t / 4 for t in range(0, int(OOM_AT * 4))]
    fraction = {t: gpu_states(s, t)[OOM_GPU].memory_used_mib / MEMORY_TOTAL_MIB for t in times}
    crossing = next(t for t in times if fraction[t] >= 0.95)
    assert 38.0 <= crossing <= 43.0
    assert fraction[0.0] < 0.87  # starts around 84.5 GB
    assert fraction[59.75] > 0.99
    assert all(fraction[t] < 0.95 for t in times if t < crossing)


def test_after_the_oom_the_drafter_gpus_are_released_and_its_processes_are_gone() -> None:
    s = SimSettings()
    before = compute_processes(s, OOM_AT - 0.5)
    assert {p.gpu_index for p in before} == set(range(GPU_COUNT))
    for t in (OOM_AT, OOM_AT + 1.0, OOM_AT + 30.0):
        gpus = gpu_states(s, t)
        for i in DRAFTER_GPUS:  # CT 201's jupyter keeps its share of GPU 6: not the drafter's
            held = JUPYTER_MIB if i == OOM_GPU else 0
            assert held <= gpus[i].memory_used_mib <= held + 3
            assert gpus[i].utilization_pct == 0
            assert 30.0 <= gpus[i].power_w <= 40.0
        assert all(gpus[i].utilization_pct >= 97 for i in TARGET_GPUS)  # targets continue
        procs = compute_processes(s, t)
        assert {p.gpu_index for p in procs if p.pid != JUPYTER_PID} == set(TARGET_GPUS)
        assert [(p.gpu_index, p.used_memory_mib) for p in procs if p.pid == JUPYTER_PID] == [
            (OOM_GPU, JUPYTER_MIB)
        ]
    assert gpu_states(s, OOM_AT + 1.0)[OOM_GPU].pstate == "P0"
    assert gpu_states(s, OOM_AT + 10.0)[OOM_GPU].pstate == "P8"


@pytest.mark.parametrize("scenario", ["training-oom", "sglang"])
def test_values_stay_within_physical_bounds(scenario: str) -> None:
    s = SimSettings(scenario=scenario, seed=7, restarts=(90.0,))
    for k in range(0, 600):
        for g in gpu_states(s, k * 0.25):
            assert 0 <= g.memory_used_mib <= MEMORY_TOTAL_MIB - MEMORY_RESERVED_MIB
            assert g.memory_free_mib >= 0
            assert 0 <= g.utilization_pct <= 100 and 0 <= g.memory_utilization_pct <= 100
            assert 0 < g.power_w <= 600.0 and 0 < g.power_instant_w <= 620.0
            assert 25 <= g.temperature_c <= 90 and g.sm_clock_mhz <= 3090
        for p in compute_processes(s, k * 0.25):
            assert 0 <= p.used_memory_mib <= MEMORY_TOTAL_MIB


def test_sglang_runs_one_steady_busy_server_per_gpu() -> None:
    s = SimSettings(scenario="sglang")
    for t in (0.0, 61.0, 500.0):
        gpus = gpu_states(s, t)
        assert all(86000 <= g.memory_used_mib <= 88000 for g in gpus)
        assert all(90 <= g.utilization_pct <= 100 and 450 <= g.power_w <= 590 for g in gpus)
        procs = compute_processes(s, t)
        assert [p.gpu_index for p in procs] == list(range(GPU_COUNT))
        assert {p.name for p in procs} == {"sglang::scheduler_TP0"}


def test_a_restart_refills_the_drafter_which_then_does_not_oom(tmp_path: Path) -> None:
    assert record_restart(str(tmp_path), 80.0) == (80.0,)
    s = with_state(SimSettings(state_dir=str(tmp_path)))
    assert s.restarts == read_restarts(str(tmp_path)) == (80.0,)
    assert gpu_states(s, 79.0)[OOM_GPU].memory_used_mib <= JUPYTER_MIB + 3  # the jupyter's
    refilling = gpu_states(s, 90.0)[OOM_GPU].memory_used_mib
    steady = [gpu_states(s, t)[OOM_GPU].memory_used_mib for t in (101.0, 150.0, 400.0)]
    assert 1000 < refilling < 80000
    assert all(87000 <= m <= 89000 for m in steady)  # ~88 GB, below the OOM level
    pids = {p.gpu_index: p.pid for p in compute_processes(s, 101.0)}
    assert set(DRAFTER_GPUS) <= set(pids)
    assert pids[OOM_GPU] != {p.gpu_index: p.pid for p in compute_processes(s, 30.0)}[OOM_GPU]


def test_settings_round_trip_through_the_environment() -> None:
    s = SimSettings("sglang", 5, 2.5, 1234.5, 17.0, "/tmp/x y", "xid_noise,gpu_lost:3")
    assert SimSettings.from_env(s.to_env()) == s
    assert SimSettings.from_env({}) == SimSettings(t0=DEFAULT_T0)
    assert scenario_time(SimSettings(t0=100.0, speed=2.0), 110.0) == 20.0
    assert scenario_time(frozen(7.0, t0=100.0), 1e9) == 7.0
    with pytest.raises(ValueError, match="GPUMON_SIM_SPEED"):
        SimSettings.from_env({"GPUMON_SIM_SPEED": "fast"})
    with pytest.raises(ValueError, match="scenario"):
        SimSettings(scenario="nope")
    with pytest.raises(ValueError, match="fault"):
        SimSettings(fault="gpu_lost:9")


def test_a_held_clock_reads_its_start_until_its_file_exists_then_runs_on(tmp_path: Path) -> None:
    go = tmp_path / "go"
    s = SimSettings(t0=100.0, speed=2.0, hold_file=str(go), hold_at=48.0)  # held from 124.0
    assert scenario_time(s, 110.0) == 20.0  # before the hold (a demo starts at it)
    assert scenario_time(s, 124.0) == scenario_time(s, 1e6) == 48.0
    assert held(s) and wall_time(s, 40.0) == 120.0  # its past is where it was
    go.touch()
    os.utime(go, (200.0, 200.0))  # let go at 200.0: 76 s of wall time after the hold began
    assert not held(s) and released_at(s) == 200.0
    assert scenario_time(s, 150.0) == 48.0  # still held then
    assert scenario_time(s, 203.0) == 54.0  # on from 48 s at 2x
    assert wall_time(s, 54.0) == 203.0 and wall_time(s, 40.0) == 120.0
    os.utime(go, (50.0, 50.0))  # the file was there before the hold: it holds nothing
    assert scenario_time(s, 130.0) == (130.0 - 100.0) * 2.0
    assert scenario_time(frozen(7.0, hold_file=str(go), hold_at=3.0), 1e9) == 7.0  # frozen wins
    assert SimSettings.from_env(s.to_env()) == s
    assert "GPUMON_SIM_HOLD" not in SimSettings().to_env()  # no hold: the demo as it was
    with pytest.raises(ValueError, match="held"):
        SimSettings(hold_file=str(go))


def test_a_held_drafter_waits_for_its_file_and_nvidia_smi_with_it(tmp_path: Path) -> None:
    """Separate processes share the hold: the drafter job and nvidia-smi stay before the
    OOM for as long as the file is missing, well past when it would have come, and both
    go on from there once it exists."""
    from gpumon.backends.monitor import demo_settings

    state, go, log = tmp_path / "state", tmp_path / "go", tmp_path / "drafter.log"
    state.mkdir()
    settings = dataclasses.replace(
        demo_settings(demo_time=OOM_AT - 0.5, speed=4.0, hold=str(go)), state_dir=str(state)
    )
    due = settings.t0 + OOM_AT / settings.speed  # the OOM's wall time without the hold
    exe = write_job_wrapper(tmp_path / "bin", settings)
    job = subprocess.Popen([str(exe), "--log", str(log)], env=clean_env())
    try:
        assert len(wait_for_lines(log, int(OOM_AT), timeout=20)) == int(OOM_AT)  # its past
        while time.time() < due + 1.0:
            time.sleep(0.05)
        assert job.poll() is None and "OutOfMemoryError" not in log.read_text()
        out = smi_at(tmp_path, settings, PROCESS_QUERY, "--format=csv,noheader")
        assert {int(r.split(", ")[0]) for r in out.stdout.splitlines()} >= {2418873, 2418874}
        go.touch()
        assert job.wait(timeout=20) == 1  # the OOM, 0.125 s after the release
    finally:
        if job.poll() is None:
            job.kill()
    last = log.read_text().splitlines()[-1]
    assert last.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    out = smi_at(tmp_path, settings, PROCESS_QUERY, "--format=csv,noheader")
    assert not {int(r.split(", ")[0]) for r in out.stdout.splitlines()} & {2418873, 2418874}


# ------------------------------------------------------------------ the nvidia-smi executable


@pytest.mark.parametrize("fmt", ["csv,noheader,nounits", "csv"])
def test_every_supported_field_prints_one_well_formed_cell_per_gpu(
    tmp_path: Path, fmt: str
) -> None:
    out = smi_at(
        tmp_path, frozen(30.0), f"--query-gpu={','.join(ALL_GPU_NAMES)}", f"--format={fmt}"
    )
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    if fmt == "csv":
        header = lines.pop(0).split(", ")
        canonical = [f.name for f in GPU_FIELDS for _ in (f.name, *f.aliases)]
        assert [re.sub(r" \[.*\]$", "", h) for h in header] == canonical
        assert "memory.used [MiB]" in header and "temperature.gpu" in header
    assert len(lines) == GPU_COUNT
    for index, line in enumerate(lines):
        cells = dict(zip(ALL_GPU_NAMES, line.split(", "), strict=True))
        assert cells["index"] == str(index)
        assert all(cells.values())
        unit = "" if fmt.endswith("nounits") else " MiB"
        assert re.fullmatch(r"\d+" + unit, cells["memory.used"])
        assert re.fullmatch(r"\d+\.\d\d" + unit.replace("MiB", "W"), cells["power.draw"])
        assert cells["clocks.sm"] == cells["clocks.current.sm"]
        assert cells["fan.speed"] == "[N/A]" and cells["temperature.memory"] == "N/A"


def test_output_parses_with_zero_skipped_lines_and_matches_the_model(tmp_path: Path) -> None:
    s = frozen(45.0, seed=2)
    plain = smi_at(
        tmp_path, s, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"
    )
    units = smi_at(tmp_path, s, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
    model = gpu_states(s, 45.0)
    for out in (plain, units):
        parsed = parse_query_gpu(out.stdout)
        assert parsed.skipped == 0 and len(parsed.gpus) == GPU_COUNT
        for gpu, sim in zip(parsed.gpus, model, strict=True):
            assert (gpu.index, gpu.uuid, gpu.memory_used_mib) == (
                sim.index,
                sim.uuid,
                sim.memory_used_mib,
            )
            assert gpu.power_w == sim.power_w and gpu.health is Health.OK
            assert gpu.memory_total_mib == MEMORY_TOTAL_MIB and gpu.fan_pct is None
    apps = smi_at(tmp_path, s, PROCESS_QUERY, "--format=csv")
    procs = parse_compute_apps(apps.stdout)
    assert procs.skipped == 0
    assert [p.pid for p in procs.processes] == [p.pid for p in compute_processes(s, 45.0)]
    assert apps.stdout.startswith(
        "pid, process_name, used_gpu_memory [MiB], gpu_uuid, gpu_bus_id\n"
    )


def test_the_same_frozen_settings_print_the_same_bytes(tmp_path: Path) -> None:
    args = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
    first = smi_at(tmp_path, frozen(20.0, seed=1), *args).stdout
    assert smi_at(tmp_path, frozen(20.0, seed=1), *args).stdout == first
    assert smi_at(tmp_path, frozen(20.0, seed=2), *args).stdout != first


def test_unknown_field_fails_the_whole_query_like_nvidia_smi(tmp_path: Path) -> None:
    out = smi_at(tmp_path, frozen(1.0), "--query-gpu=index,gpu_recovery_actoin", "--format=csv")
    assert out.returncode == 2
    assert (
        out.stdout.splitlines()[0] == 'Field "gpu_recovery_actoin" is not a valid field to query.'
    )
    failure = classify_smi_failure(out.stdout, out.returncode)
    assert failure is not None and failure.kind == "invalid_field"


@pytest.mark.parametrize(
    "args",
    [
        ["-q", "-d", "MEMORY"],  # a -q section the simulator does not print
        ["--query-gpu=index"],
        ["--query-gpu=index", "--format=json"],
        ["-L", "-lms", "5"],
        [],
    ],
)
def test_unsupported_command_lines_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    out = smi_at(tmp_path, frozen(1.0), *args)
    assert out.returncode == 2
    assert "Please run 'nvidia-smi -h' for help." in out.stdout


FAULT_FILES = {
    "driver_not_loaded": ("driver_not_loaded.txt", 9),
    "version_mismatch": ("driver_library_version_mismatch.txt", 18),
    "nvml_unknown_error": ("nvml_unknown_error.txt", 255),
    "no_devices": ("no_devices_found.txt", 6),
    "device_handle": ("device_handle_unknown_error.txt", 255),
    "library_not_found": (None, 12),
}


@pytest.mark.parametrize("fault", sorted(FAULT_FILES))
def test_each_fault_prints_the_tool_text_and_exit_code(tmp_path: Path, fault: str) -> None:
    name, code = FAULT_FILES[fault]
    out = smi_at(
        tmp_path,
        frozen(1.0, fault=fault),
        f"--query-gpu={','.join(QUERY_FIELDS)}",
        "--format=csv,noheader,nounits",
    )
    assert out.returncode == code
    if name is not None:
        assert out.stdout == (FIXTURES / "nvidia_smi_errors" / name).read_text(encoding="utf-8")
    else:
        assert out.stdout.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so library")
    failure = classify_smi_failure(out.stdout, out.returncode)
    assert failure is not None and failure.kind == fault


def test_manifest_exit_codes_match_the_fault_table() -> None:
    rows = (
        (FIXTURES / "nvidia_smi_errors" / "manifest.tsv").read_text(encoding="utf-8").splitlines()
    )
    codes = {r.split("\t")[0]: r.split("\t")[1] for r in rows[1:]}
    for fault, (name, code) in FAULT_FILES.items():
        assert smi.FAULTS[fault][1] == code
        if name is not None and codes[name].isdigit():
            assert int(codes[name]) == code


def test_a_lost_gpu_prints_gpu_is_lost_in_the_fixture_columns(tmp_path: Path) -> None:
    out = smi_at(
        tmp_path,
        frozen(10.0, fault="gpu_lost:4"),
        f"--query-gpu={','.join(QUERY_FIELDS)}",
        "--format=csv,noheader,nounits",
    )
    fixture = (FIXTURES / "query_gpu_with_na.csv").read_text(encoding="utf-8").splitlines()[4]
    row = out.stdout.splitlines()[4].split(", ")
    assert row[1:] == fixture.split(", ")[1:]  # all but the timestamp
    parsed = parse_query_gpu(out.stdout)
    assert parsed.skipped == 0 and parsed.gpus[4].health is Health.CRITICAL
    assert parsed.gpus[3].health is Health.OK
    apps = smi_at(
        tmp_path, frozen(10.0, fault="gpu_lost:4"), PROCESS_QUERY, "--format=csv,noheader"
    )
    assert UUIDS[4] not in {p.gpu_uuid for p in parse_compute_apps(apps.stdout).processes}
    assert len(apps.stdout.splitlines()) == GPU_COUNT - 1


def test_no_compute_processes_print_nothing_without_header_and_the_header_with(
    tmp_path: Path,
) -> None:
    s = frozen(OOM_AT + 5.0)  # GPU 6 keeps CT 201's jupyter: GPUs 5 and 7 have nothing
    empty = smi_at(tmp_path, s, PROCESS_QUERY, "--format=csv,noheader,nounits", "-i", "5,7")
    assert empty.returncode == 0 and empty.stdout == ""
    header = smi_at(tmp_path, s, PROCESS_QUERY, "--format=csv", "-i", "5,7")
    assert header.stdout == (FIXTURES / "compute_apps_empty.txt").read_text(encoding="utf-8")


def test_help_list_and_version(tmp_path: Path) -> None:
    help_text = smi_at(tmp_path, frozen(1.0), "--help-query-gpu").stdout
    quoted = {w.strip('"') for w in help_text.split() if w.startswith('"') and w.endswith('"')}
    assert set(ALL_GPU_NAMES) <= quoted  # how the agent probes for supported fields
    assert '"memory.used"\n' in help_text and '"name" or "gpu_name"\n' in help_text
    apps_help = smi_at(tmp_path, frozen(1.0), "--help-query-compute-apps").stdout
    assert set(ALL_PROCESS_NAMES) <= {w.strip('"') for w in apps_help.split()}
    listing = smi_at(tmp_path, frozen(1.0), "-L").stdout.splitlines()
    assert len(listing) == GPU_COUNT
    assert listing[6] == (
        "GPU 6: NVIDIA RTX PRO 6000 Blackwell Server Edition "
        "(UUID: GPU-2e94b7f1-c358-40da-8a67-e1f03c95d2b8)"
    )
    version = smi_at(tmp_path, frozen(1.0), "--version").stdout
    assert version.splitlines()[0] == "NVIDIA-SMI version  : 590.48.01"


def test_loop_mode_streams_rounds_and_dies_quietly_when_its_pipe_closes(tmp_path: Path) -> None:
    exe = write_wrapper(tmp_path / "bin", SimSettings(t0=time.time() - 10.0))
    fields = ",".join(QUERY_FIELDS)
    proc = subprocess.Popen(
        [str(exe), f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # wait out interpreter start-up
    time.sleep(0.35)
    os.set_blocking(proc.stdout.fileno(), False)
    text = (first + (proc.stdout.read() or b"")).decode()
    proc.stdout.close()
    assert proc.wait(timeout=5) == 0
    assert proc.stderr.read() == b""  # no traceback, no "Exception ignored"
    parsed = parse_query_gpu(text.rsplit("\n", 1)[0])  # the last line may be cut mid-read
    rounds = [g for g in parsed.gpus if g.index == 0]
    assert len(rounds) >= 2 and parsed.skipped == 0
    assert len({g.timestamp for g in rounds}) == len(rounds)  # values move with the clock


def test_loop_mode_exits_zero_on_sigterm(tmp_path: Path) -> None:
    exe = write_wrapper(tmp_path / "bin", SimSettings(t0=time.time()))
    proc = subprocess.Popen(
        [str(exe), PROCESS_QUERY, "--format=csv", "-l", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"pid, process_name")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0
    assert proc.stderr.read() == b""


def test_xid_noise_adds_kernel_lines_the_parser_skips() -> None:
    cmd = smi.parse_args([f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"])
    printer = smi.Printer(cmd, frozen(5.0, fault="xid_noise"))
    lines = [printer.xid_line(n) for n in range(50)]
    xids = [x for x in lines if x]
    assert 0 < len(xids) < 50
    assert all(
        re.fullmatch(r"NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 43, pid=\d+, name=\S+, .*\n", x)
        for x in xids
    )
    stream = printer.gpu_round(5.0, 0.0) + xids[0] + printer.gpu_round(5.0, 1.0)
    parsed = parse_query_gpu(stream)
    assert parsed.skipped == 1 and len(parsed.gpus) == 2 * GPU_COUNT
    assert smi.Printer(cmd, frozen(5.0)).xid_line(0) == ""  # off without the fault


def test_a_loop_round_costs_well_under_a_millisecond_of_cpu() -> None:
    cmd = smi.parse_args([f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"])
    printer = smi.Printer(cmd, SimSettings(t0=time.time() - 20.0))
    start = time.process_time()
    for n in range(500):
        printer.refresh()
        printer.gpu_round(*printer.clock())
        printer.xid_line(n)
    per_round = (time.process_time() - start) / 500
    assert per_round < 0.002  # measured ~0.15 ms; generous for loaded CI machines


def test_wrapper_quotes_settings_and_does_not_inherit_stray_variables(tmp_path: Path) -> None:
    odd = tmp_path / "state dir's"
    odd.mkdir()
    exe = write_wrapper(tmp_path / "bin", frozen(2.0, state_dir=str(odd)))
    assert exe.name == "nvidia-smi" and os.access(exe, os.X_OK)
    env = clean_env() | {"GPUMON_SIM_FAULT": "driver_not_loaded"}
    out = subprocess.run([str(exe), "-L"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0 and len(out.stdout.splitlines()) == GPU_COUNT
    assert write_job_wrapper(tmp_path / "bin", frozen(2.0)).name == "gpumon-sim-job"


# ----------------------------------------------------------------------------- the job


def run_job(tmp_path: Path, settings: SimSettings, log: Path) -> subprocess.CompletedProcess[str]:
    exe = write_job_wrapper(tmp_path / "bin", settings)
    return subprocess.run(
        [str(exe), "--log", str(log)], capture_output=True, text=True, timeout=30, env=clean_env()
    )


def wait_for_lines(log: Path, count: int, timeout: float) -> list[str]:
    """The log's lines once it has ``count`` of them (or whatever it has at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_a_late_job_writes_the_whole_log_and_the_oom_traceback_then_exits_1(tmp_path: Path) -> None:
    settings = SimSettings(t0=time.time() - 3600.0)
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    started = time.monotonic()
    assert run_job(tmp_path, settings, first).returncode == 1
    assert time.monotonic() - started < 10
    assert run_job(tmp_path, settings, second).returncode == 1
    text = first.read_text(encoding="utf-8")
    assert text == second.read_text(encoding="utf-8")  # a function of scenario time only
    assert len(text.encode()) == job.missed_bytes(settings, "drafter", 3600.0)  # all at once
    lines = text.splitlines()
    assert lines[-1].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert re.search(
        r"GPU 1 has a total capacity of 94\.97 GiB of which [\d.]+ \w+ is free\.", lines[-1]
    )
    progress_line = re.compile(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] step \d+/5000 \| loss \d\.\d{4} "
        r"\| lr 2\.0e-04 \| \d+\.\d Ktok/s \| tokens \d+\.\d\dM"
    )
    progress = [ln for ln in lines if progress_line.fullmatch(ln)]
    assert len(progress) == int(OOM_AT) - 1
    cut = lines.index("Traceback (most recent call last):")
    assert lines[cut - 1] == "drafter ranks: CUDA_VISIBLE_DEVICES=5,6,7"
    # same frames, carets and message shape as the real traceback in the fixture
    fixture = (FIXTURES / "torch_oom_traceback.txt").read_text(encoding="utf-8").splitlines()
    frames = fixture[fixture.index("Traceback (most recent call last):") : -1]
    frames = [
        f.replace("/opt/venvs/train", "/root/venv").replace("/srv/drafter", "/root/drafter")
        for f in frames
    ]
    assert lines[cut:-1] == frames


async def test_the_demo_is_connected_once_its_drafter_has_written_its_past() -> None:
    """A demo that starts after the OOM (90 s): the drafter writes its log's past at its
    start, and ``connect`` returns only once it has (its interpreter took seconds to start
    on a loaded machine), so gpumon's first read finds the OOM as the log's backlog
    (history), never as a line written live (a fresh incident, a page)."""
    from gpumon.backends.config.load import HostConfig
    from gpumon.backends.monitor.compose import demo_settings, make_transport
    from gpumon.backends.sim.transport import SimTransport

    demo = make_transport(HostConfig(name="demo", kind="demo"), demo_settings(demo_time=90.0))
    assert isinstance(demo, SimTransport)
    try:
        await demo.connect()
        lines = demo.job_log.read_text(encoding="utf-8").splitlines()
        assert lines and lines[-1].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    finally:
        await demo.dispose()


def test_the_job_keeps_pace_with_the_clock_and_stops_at_once_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    exe = write_job_wrapper(tmp_path / "bin", SimSettings(t0=time.time() - 5.5))
    proc = subprocess.Popen([str(exe), "--log", str(log), "--name", "drafter-x"], env=clean_env())
    caught_up = wait_for_lines(log, 6, timeout=10)  # scenario seconds 0..5, written at once
    assert caught_up[0].endswith("drafter-x: run 0 resumed from checkpoint step 650, world size 3")
    assert caught_up[5].split("] ", 1)[1].startswith("step 655/5000 | loss ")
    later = wait_for_lines(log, 8, timeout=5)  # then one line per second of the clock
    assert len(later) == 8 and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=3) == -signal.SIGTERM


def test_a_job_started_after_a_restart_resumes_and_does_not_oom(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    record_restart(str(state), 70.0)
    settings = SimSettings(frozen_at=OOM_AT + 40.0, state_dir=str(state))
    log = tmp_path / "job.log"
    exe = write_job_wrapper(tmp_path / "bin", settings)
    proc = subprocess.Popen([str(exe), "--log", str(log)], env=clean_env())
    wait_for_lines(log, 31, timeout=10)
    time.sleep(0.3)  # a frozen clock: nothing more may come
    proc.terminate()
    proc.wait(timeout=3)
    lines = log.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 31 and "run 1 resumed from checkpoint" in lines[0]
    assert not any("OutOfMemoryError" in ln for ln in lines)


def test_the_job_has_nothing_to_do_in_the_sglang_scenario(tmp_path: Path) -> None:
    out = run_job(tmp_path, SimSettings(scenario="sglang"), tmp_path / "job.log")
    assert out.returncode == 0 and "no training job" in out.stdout
    assert not (tmp_path / "job.log").exists()


def test_format_size_follows_pytorch() -> None:
    assert job.format_size(90.0) == "90.00 MiB"
    assert job.format_size(1024.0) == "1024.00 MiB"
    assert job.format_size(2048.0) == "2.00 GiB"


def test_a_stopped_drafter_releases_its_gpus_until_restarted(tmp_path: Path) -> None:
    from gpumon.backends.sim import (
        DRAFTER_GPUS,
        drafter_run,
        record_restart,
        record_stop,
        with_state,
    )

    settings = SimSettings(state_dir=str(tmp_path))
    record_stop(str(tmp_path), 30.0)
    s = with_state(settings)
    assert s.stops == (30.0,) and drafter_run(s, 29.0) is not None
    assert drafter_run(s, 31.0) is None
    # CT 201's jupyter comes at 32 s and stays: only its share of GPU 6 is used
    used = [
        gpu_states(s, 35.0)[i].memory_used_mib - (JUPYTER_MIB if i == 6 else 0)
        for i in DRAFTER_GPUS
    ]
    assert all(0 <= u < 10 for u in used)
    procs = [p for p in compute_processes(s, 35.0) if p.gpu_index in DRAFTER_GPUS]
    assert [p.pid for p in procs] == [JUPYTER_PID]
    record_restart(str(tmp_path), 40.0)
    s = with_state(settings)
    run = drafter_run(s, 45.0)
    assert run is not None and run.number == 1 and s.stops == (30.0,)  # both kept
    assert gpu_states(s, 70.0)[OOM_GPU].memory_used_mib > 80_000  # refilled, no OOM


def test_sigterm_to_the_job_records_a_stop(tmp_path: Path) -> None:
    from gpumon.backends.monitor import demo_settings
    from gpumon.backends.sim import read_stops

    settings = dataclasses.replace(demo_settings(demo_time=10), state_dir=str(tmp_path))
    env = {**os.environ, **settings.to_env()}
    log = tmp_path / "drafter.log"
    job = subprocess.Popen(
        [sys.executable, "-m", "gpumon.backends.sim.job", "--log", str(log)], env=env
    )
    deadline = time.monotonic() + 10
    while not (log.exists() and log.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=5) == 128 + signal.SIGTERM
    (stop,) = read_stops(str(tmp_path))
    assert 9.0 <= stop <= 20.0  # the scenario time of the stop
