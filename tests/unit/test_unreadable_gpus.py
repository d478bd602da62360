"""A GPU the host lists but gpumon cannot read is never dropped (issue 34 point 6): nvidia-smi's
``Unable to determine the device handle for GPU...`` in place of its row (the exact text of
tests/fixtures/nvidia/nvidia_smi_errors/device_handle_unknown_error.txt, and the older
spelling docs/formats.md section 3 quotes), NVML refusing the device's handle, a row that
does not parse, and a GPU listed before and gone are each an alert on that GPU by bus id,
through the real parser, alert engine and ``check`` verdict. A row split by a newline in
its name is read whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.config import HostConfig
from gpumon.backends.model import CheckCode, ConnState, GpuSample, Health, HostSample, UnreadableGpu
from gpumon.backends.monitor import HostMonitor, check_verdict, snapshot_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.parsers.nvidia_smi import QUERY_FIELDS, SAMPLE_FIELDS, parse_query_gpu
from gpumon.backends.recording.recorder import sample_from_json, sample_to_json
from gpumon.backends.remote import agent
from gpumon.backends.sim import smi
from gpumon.backends.sim.scenario import SimSettings
from gpumon.backends.transport import LocalTransport

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia"
FIXTURE_ROWS = (FIXTURES / "query_gpu_8x_rtxpro6000.csv").read_text(encoding="utf-8")
# the fixture machine with GPU 6 at 86 GiB instead of 99 %: no alert of its own
ROWS = FIXTURE_ROWS.replace(
    ", 97887, 637, 97012, 238, ", ", 97887, 637, 86214, 11036, "
).splitlines()
# GPU 4 of the fixture machine is at 00000000:9A:00.0, the bus of the upstream text
HANDLE = (FIXTURES / "nvidia_smi_errors" / "device_handle_unknown_error.txt").read_text()
HANDLE = HANDLE.strip()
OLD_SPELLING = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error"
LOST = (
    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. "
    "Reboot the system to recover this GPU"
)
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def _without_gpu_4() -> list[str]:
    assert HANDLE == "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error"
    assert ", 00000000:9A:00.0, " in ROWS[4]
    return [*ROWS[:4], HANDLE, *ROWS[5:]]


def test_the_device_handle_line_in_place_of_a_row_is_that_gpu_by_bus_id() -> None:
    parsed = parse_query_gpu("\n".join(_without_gpu_4()))
    assert [g.index for g in parsed.gpus] == [0, 1, 2, 3, 5, 6, 7]
    assert parsed.skipped == 0
    assert parsed.unreadable == (UnreadableGpu("0000:9A:00.0", None, "Unknown Error", HANDLE),)


@pytest.mark.parametrize(
    ("line", "bus", "reason"),
    [
        (OLD_SPELLING, "0000:0B:00.0", "Unknown Error"),
        (LOST, "0000:02:00.0", "GPU is lost. Reboot the system to recover this GPU"),
    ],
)
def test_both_spellings_and_a_lost_gpu_name_the_bus(line: str, bus: str, reason: str) -> None:
    (gpu,) = parse_query_gpu([ROWS[0], line]).unreadable
    assert (gpu.bus_id, gpu.index, gpu.reason, gpu.device) == (bus, None, reason, True)


def test_the_same_gpu_twice_in_one_round_is_one() -> None:
    # The agent's round may end after the next round's first line (GPU 0 dead: its line
    # comes before any row with an index).
    parsed = parse_query_gpu([HANDLE, *ROWS[:4], *ROWS[5:], HANDLE])
    assert len(parsed.unreadable) == 1 and len(parsed.gpus) == 7


def test_a_row_split_by_a_newline_in_its_name_is_read_whole() -> None:
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert name in ROWS[2]
    split = ROWS[2].replace(name, "NVIDIA RTX\nPRO 6000")
    parsed = parse_query_gpu("\n".join([*ROWS[:2], split, *ROWS[3:]]))
    assert [g.index for g in parsed.gpus] == list(range(8))
    assert parsed.gpus[2].name == "NVIDIA RTX\nPRO 6000"
    assert parsed.gpus[2].bus_id == "00000000:3A:00.0" and parsed.gpus[2].memory_total_mib
    assert (parsed.skipped, parsed.unreadable) == (0, ())


def test_nvml_refusing_a_handle_is_that_gpu_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.setenv("FAKE_NVML_NO_HANDLE", "1")
    nvml = load_fake_nvml("fake_nvml_unreadable")
    fields = ("index", *(f for f in SAMPLE_FIELDS if f != "index"))  # not timestamp first
    parsed = parse_query_gpu(agent.nvml_gpu_rows(nvml, fields), fields)
    assert [g.index for g in parsed.gpus] == [0]
    assert parsed.unreadable == (UnreadableGpu(None, 1, "Unknown Error"),)


def _monitor(clock: Clock) -> HostMonitor:
    host = HostConfig(name="h", kind="local", kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), clock=clock, record=False)
    monitor.ingest_status(ConnState.CONNECTED)
    return monitor


def test_a_gpu_dead_from_the_first_sample_makes_check_critical_in_the_drivers_words() -> None:
    """It read ``OK h: 7 GPUs`` (the line was dropped as junk)."""
    clock = Clock()
    monitor = _monitor(clock)
    assert monitor.ingest_gpu_rows(_without_gpu_4(), QUERY_FIELDS)
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity, alert.gpu) == ("gpu_health", Health.CRITICAL, None)
    assert alert.key == "gpu_health:0000:9a:00"
    assert alert.message.startswith("GPU 0000:9A:00.0 cannot be read: Unknown Error")
    assert f'nvidia-smi printed "{HANDLE}"' in alert.message
    assert "nvidia-smi -r -i 0000:9A:00.0" in alert.message
    code, line = check_verdict(monitor)
    assert code is CheckCode.CRITICAL, line
    assert line.startswith("CRITICAL h: GPU 0000:9A:00.0 cannot be read: Unknown Error")
    assert "(8 GPUs (1 unreadable)" in line
    unread = snapshot_json(monitor, clock.t)["unreadable_gpus"]
    assert unread == [
        {
            "bus_id": "0000:9A:00.0",
            "index": None,
            "reason": "Unknown Error",
            "said": HANDLE,
            "device": True,
        }
    ]
    clock.t += 1
    monitor.ingest_gpu_rows(ROWS, QUERY_FIELDS)  # read again: the alert by its bus id ends
    assert monitor.alerts.active() == []


def test_a_gpu_read_before_keeps_its_index_and_ends_once_healthy_again() -> None:
    clock = Clock()
    monitor = _monitor(clock)
    monitor.ingest_gpu_rows(ROWS, QUERY_FIELDS)
    clock.t += 1
    monitor.ingest_gpu_rows(_without_gpu_4(), QUERY_FIELDS)
    (alert,) = monitor.alerts.active()
    assert (alert.key, alert.gpu, alert.severity) == ("gpu_health:4", 4, Health.CRITICAL)
    assert alert.message.startswith("GPU 4 (0000:9A:00.0) cannot be read: Unknown Error")
    for _ in range(3):  # clear_samples healthy samples
        clock.t += 1
        monitor.ingest_gpu_rows(ROWS, QUERY_FIELDS)
    assert monitor.alerts.active() == []


def test_a_row_that_does_not_parse_is_a_warning_on_its_gpu() -> None:
    clock = Clock()
    monitor = _monitor(clock)
    garbled = ROWS[6].replace(", P0, ", ", P0, P1, ", 1)  # one cell too many
    monitor.ingest_gpu_rows([*ROWS[:6], garbled, ROWS[7]], QUERY_FIELDS)
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity, alert.gpu) == ("gpu_health", Health.WARNING, 6)
    assert alert.message.startswith("GPU 6 (00000000:BA:00.0) cannot be read: its row does not")
    code, line = check_verdict(monitor)
    assert code is CheckCode.WARNING and "8 GPUs (1 unreadable)" in line


def gpu(index: int, bus: str) -> GpuSample:
    return GpuSample(index=index, bus_id=bus, name="NVIDIA H200", memory_used_mib=1000)


def test_a_gpu_gone_whose_index_another_takes_is_named_by_its_bus_id() -> None:
    """nvidia-smi numbers the GPUs it lists: when one goes, the ones after it move up.
    By index, the last GPU was said to be gone, with its (present) bus id."""
    engine = AlertEngine("h", AlertRules())
    buses = [f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D")]
    engine.on_sample(HostSample("h", T0, None, tuple(gpu(i, b) for i, b in enumerate(buses))))
    left = [b for b in buses if b != buses[1]]
    engine.on_sample(HostSample("h", T0 + 1, None, tuple(gpu(i, b) for i, b in enumerate(left))))
    (alert,) = engine.active()
    assert (alert.kind, alert.severity, alert.gpu) == ("gpu_health", Health.CRITICAL, None)
    assert alert.message.startswith(
        "GPU 00000000:2A:00.0 is no longer reported (was GPU 1, NVIDIA H200)"
    )
    engine.on_sample(HostSample("h", T0 + 2, None, tuple(gpu(i, b) for i, b in enumerate(buses))))
    assert engine.active() == []  # listed again: by its bus id, at once


def test_a_recording_keeps_the_gpus_it_could_not_read() -> None:
    parsed = parse_query_gpu(_without_gpu_4())
    sample = HostSample("h", T0, None, parsed.gpus, unreadable=parsed.unreadable)
    assert sample_from_json(sample_to_json(sample)) == sample


def test_the_simulators_no_handle_fault_prints_the_upstream_line_for_that_gpu() -> None:
    settings = SimSettings(fault="no_handle:3", frozen_at=10.0)
    cmd = smi.parse_args([f"--query-gpu={','.join(SAMPLE_FIELDS)}", "--format=csv,noheader"])
    printer = smi.Printer(cmd, settings)
    text = printer.gpu_round(*printer.clock())
    assert "Unable to determine the device handle for GPU0000:5D:00.0: Unknown Error\n" in text
    parsed = parse_query_gpu(text, SAMPLE_FIELDS)
    assert [g.index for g in parsed.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert [(g.bus_id, g.reason) for g in parsed.unreadable] == [("0000:5D:00.0", "Unknown Error")]
