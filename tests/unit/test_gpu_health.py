"""GPU health facts (issue 27 point 3) on stand-in NVML states (tests/support/fake_nvml
read by the agent's own NVML code) and stand-in nvidia-smi states (the simulator's
printer, ``GPUMON_SIM_FAULT`` tokens), through the same parser and alert engine: a
pending row remap, an ECC uncorrected count, a hardware slowdown and a downtrained link
each alert; what the driver does not report is None, never a healthy 0 or "No"."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nvml_stand_in import load_fake_nvml

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.health import (
    SLOWDOWN_MIN_S,
    facts_json,
    findings,
    recovery_action,
)
from gpumon.backends.alerts.incident import command_fix, incidents
from gpumon.backends.model import GpuSample, Health, HostSample
from gpumon.backends.parsers.nvidia_smi import (
    SAMPLE_FIELDS,
    fields_for_help,
    parse_query_gpu,
)
from gpumon.backends.remote import agent
from gpumon.backends.sim import smi
from gpumon.backends.sim.scenario import (
    XID_AT,
    XID_GPU,
    SimSettings,
    gpu_states,
    kernel_lines,
    parse_fault,
)
from gpumon.backends.sim.smi_query import query_report

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia"
H200 = FIXTURES / "real-captures" / "linux-x86_64__nvidia-h200__590.48.01.txt"

Source = Callable[[float], tuple[GpuSample, ...]]  # scenario seconds -> the GPUs' samples


def nvml_source(monkeypatch: pytest.MonkeyPatch, states: str) -> Source:
    """GPU 0 as the agent reads it from NVML in ``states`` (FAKE_NVML_HEALTH)."""
    monkeypatch.setenv("FAKE_NVML_HEALTH", states)
    nvml = load_fake_nvml("fake_nvml_health")

    def read(t: float) -> tuple[GpuSample, ...]:
        rows = agent.nvml_gpu_rows(nvml, SAMPLE_FIELDS)
        return parse_query_gpu(rows, SAMPLE_FIELDS).gpus

    return read


def smi_source(fault: str) -> Source:
    """The simulated GPUs as its nvidia-smi prints them, GPU 0 in the stand-in state."""
    settings = SimSettings(scenario="sglang", fault=fault)
    cmd = smi.parse_args(
        [f"--query-gpu={','.join(SAMPLE_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    printer = smi.Printer(cmd, settings)
    return lambda t: parse_query_gpu(printer.gpu_round(t, 1.7e9 + t), SAMPLE_FIELDS).gpus


def health_alerts(source: Source, seconds: float = 0.0, step: float = 5.0) -> dict[str, Any]:
    """The active gpu_health alerts of GPU 0 after feeding ``seconds`` of samples."""
    engine = AlertEngine("h", AlertRules())
    t = 0.0
    while True:
        engine.on_sample(HostSample("h", 1.7e9 + t, None, source(t)))
        if t >= seconds:
            break
        t += step
    return {a.key: a for a in engine.active() if a.kind == "gpu_health" and a.gpu == 0}


@pytest.fixture(params=["nvml", "nvidia-smi"])
def source_of(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Builds the stand-in of one state, by NVML or by nvidia-smi (same names)."""

    def make(state: str) -> Source:
        if request.param == "nvml":
            return nvml_source(monkeypatch, state)
        return smi_source(f"{state}:0" if state else "")

    return make


def test_healthy_gpus_raise_no_health_alert(source_of: Any) -> None:
    assert health_alerts(source_of(""), seconds=120) == {}
    gpu = source_of("")(0.0)[0]
    assert (gpu.pcie_width, gpu.pcie_width_max, gpu.rows_pending, gpu.rows_failure) == (
        16,
        16,
        False,
        False,
    )
    assert recovery_action(gpu) == "none" and gpu.ecc_uncorrected == 0


def test_a_pending_row_remap_says_reset_at_the_next_chance(source_of: Any) -> None:
    alerts = health_alerts(source_of("row_pending"))
    alert = alerts["gpu_health:rows:0"]
    assert alert.severity is Health.WARNING
    assert (
        alert.message == "GPU 0: memory rows wait to be remapped: reset the GPU at the next chance"
    )


def test_a_failed_row_remap_is_the_rma_criterion(source_of: Any) -> None:
    alert = health_alerts(source_of("row_failure"))["gpu_health:rows:0"]
    assert alert.severity is Health.CRITICAL and "RMA criterion" in alert.message


def test_an_uncorrected_ecc_count_is_critical(source_of: Any) -> None:
    alert = health_alerts(source_of("ecc_uncorrected"))["gpu_health:ecc:0"]
    assert alert.severity is Health.CRITICAL
    assert alert.message.startswith("GPU 0: 2 uncorrected ECC errors since the driver loaded")


def test_a_hardware_slowdown_warns_once_it_held_a_share_of_the_minutes(source_of: Any) -> None:
    source = source_of("hw_slowdown")
    mask = source(0.0)[0].clocks_event_reasons
    assert mask is not None and mask & 0x8  # HwSlowdown, as NVML and nvidia-smi report it
    assert health_alerts(source, seconds=SLOWDOWN_MIN_S - 10) == {}  # one look is no verdict
    alert = health_alerts(source, seconds=SLOWDOWN_MIN_S + 30)["gpu_health:clocks:0"]
    assert alert.severity is Health.WARNING
    assert "hardware slowdown" in alert.message and "100 % of the last" in alert.message


def test_a_downtrained_link_says_how_much_slower(source_of: Any) -> None:
    alert = health_alerts(source_of("pcie_x4"))["gpu_health:pcie:0"]
    assert alert.severity is Health.WARNING
    assert alert.message.startswith(
        "GPU 0 PCIe link at x4 of x16: downtrained; transfers 4x slower"
    )


def test_nvml_recovery_action_reset_is_critical(monkeypatch: pytest.MonkeyPatch) -> None:
    source = nvml_source(monkeypatch, "recovery_reset")
    assert source(0.0)[0].recovery_action == "Reset"
    alert = health_alerts(source)["gpu_health:recovery:0"]
    assert alert.severity is Health.CRITICAL and alert.message.endswith("reset the GPU")


def test_what_nvml_does_not_support_is_none_never_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = nvml_source(monkeypatch, "no_remap")(0.0)[0]
    assert gpu.rows_pending is None and gpu.rows_failure is None
    assert gpu.pages_pending is None  # the stand-in has no retired-pages call: [N/A]
    facts = facts_json(gpu)
    assert facts["rows_pending"] is None and facts["nvlink"] is None
    assert gpu.problems == ()  # an unsupported health field is no problem of the GPU


def test_idle_and_power_cap_and_a_lower_gen_at_idle_never_alert() -> None:
    gpu = GpuSample(
        index=2,
        pstate="P8",
        clocks_event_reasons=0x1 | 0x2 | 0x4 | 0x10,  # idle, app clocks, power cap, sync
        pcie_gen=1,
        pcie_gen_max=5,  # the driver lowers the generation at idle: not a fault
        pcie_width=16,
        pcie_width_max=16,
    )
    assert findings(gpu) == []
    assert facts_json(gpu)["clock_reasons"] == [
        "idle",
        "applications clocks",
        "power cap",
        "sync boost",
    ]


def test_a_slowdown_in_few_samples_of_the_window_does_not_alert() -> None:
    engine = AlertEngine("h", AlertRules())
    for i in range(60):  # 5 min at 5 s, the hardware slowdown in 1 sample of 10
        mask = 0x8 if i % 10 == 0 else 0x0
        gpu = GpuSample(index=0, clocks_event_reasons=mask)
        engine.on_sample(HostSample("h", 1.7e9 + 5 * i, None, (gpu,)))
    assert not [a for a in engine.active() if a.kind == "gpu_health"]


def test_a_stream_of_corrected_ecc_errors_warns_and_a_few_do_not() -> None:
    def run(per_sample: int) -> list[str]:
        engine = AlertEngine("h", AlertRules())
        for i in range(30):
            gpu = GpuSample(index=1, ecc_uncorrected=0, ecc_corrected=i * per_sample)
            engine.on_sample(HostSample("h", 1.7e9 + 5 * i, None, (gpu,)))
        return [a.message for a in engine.active() if a.key == "gpu_health:ecc:1"]

    assert run(0) == []
    (message,) = run(10)  # 120 a minute
    assert message.startswith("GPU 1: 290 corrected ECC errors in 2 min (120/min)")


def test_an_alert_ends_when_its_fact_clears() -> None:
    engine = AlertEngine("h", AlertRules())
    engine.on_sample(HostSample("h", 1.7e9, None, (GpuSample(index=0, rows_pending=True),)))
    assert "gpu_health:rows:0" in {a.key for a in engine.active()}
    engine.on_sample(HostSample("h", 1.7e9 + 5, None, (GpuSample(index=0, rows_pending=False),)))
    assert "gpu_health:rows:0" not in {a.key for a in engine.active()}


def test_the_health_fields_in_a_real_capture() -> None:
    """The H200 capture's query: remapped rows "No", retired pages [N/A], gen 5 of 5."""
    lines = H200.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("timestamp, driver_version"))
    gpu = parse_query_gpu(lines[at : at + 2], ()).gpus[0]
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert (gpu.rows_pending, gpu.rows_failure, gpu.pages_pending) == (False, False, None)
    assert recovery_action(gpu) == "none" and findings(gpu) == []


def test_the_health_fields_are_asked_only_where_listed() -> None:
    assert fields_for_help(H200.read_text(), SAMPLE_FIELDS) == SAMPLE_FIELDS  # 590 lists all
    # A driver before 590: the current generation only by its older name, no recovery action.
    old = '"index"\n"pcie.link.gen.current"\n"pcie.link.gen.max"\n"remapped_rows.pending"\n'
    assert fields_for_help(old, SAMPLE_FIELDS) == (
        "index",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "remapped_rows.pending",
    )
    row = "3, 4, 5, Yes"  # the older name reads into the same fact
    gpu = parse_query_gpu(row, fields_for_help(old, SAMPLE_FIELDS)).gpus[0]
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.rows_pending) == (4, 5, True)
    assert gpu.recovery_action is None  # not asked: None, not "None"


def test_a_health_fault_names_a_gpu() -> None:
    assert parse_fault("pcie_x4:3,row_pending:5").health == {("pcie_x4", 3), ("row_pending", 5)}
    with pytest.raises(ValueError, match=r"GPU 0\.\.7"):
        parse_fault("pcie_x4:9")
    with pytest.raises(ValueError, match="known"):
        parse_fault("pcie_x4")


@pytest.mark.parametrize(
    ("state", "key", "fixes"),
    [
        ("row_pending", "rows", ["reset the GPU (nvidia-smi -r -i 0) at the next chance"]),
        (
            "row_failure",
            "rows",
            ["drain the GPU and open a case with the vendor", "gpumon bundle h"],
        ),
        ("ecc_uncorrected", "ecc", ["reset the GPU (nvidia-smi -r -i 0)", "gpumon bundle h"]),
        ("pcie_x4", "pcie", ["reseat the card or check the riser at the next maintenance"]),
    ],
)
def test_a_health_facts_advice_is_its_incidents_fix(
    source_of: Any, state: str, key: str, fixes: list[str]
) -> None:
    """The incident of a health fact offers what to do as the message says it, with the
    command that resets the GPU, and the bundle when it is critical: ``check`` and the
    strip say it, never a restart (issue 27.3)."""
    alert = health_alerts(source_of(state))[f"gpu_health:{key}:0"]
    (incident,) = incidents([alert])
    assert [f.words for f in incident.fixes] == fixes
    assert all(f.key is None and f.command is None for f in incident.fixes)
    assert command_fix(incident) == f"fix: {fixes[0]}"


def test_the_sglang_demos_xid_63_leaves_its_row_remap_pending() -> None:
    """Issue 36 point 7: the demo's kernel log said Xid 63 on GPU 3 ("New row marked for
    remapping, reset gpu to activate") while GPU 3 reported no pending remap, so its detail
    view said "rows ok" beside an incident that said to reset it. The driver flags the row
    pending until the next reset (NVIDIA's A100 GPU Memory Error Management, "Row-remapping
    pending flag"; nvmlDeviceGetRemappedRows' isPending): from XID_AT GPU 3 says so, through
    nvidia-smi's CSV and its -q report alike, and raises the rows warning on GPU 3 only."""
    settings = SimSettings(scenario="sglang")
    before, after = smi_source("")(XID_AT - 1.0), smi_source("")(XID_AT)
    assert not kernel_lines(settings, XID_AT - 1.0) and kernel_lines(settings, XID_AT)
    assert [g.rows_pending for g in before] == [False] * len(before)
    assert [g.index for g in after if g.rows_pending] == [XID_GPU]
    report = query_report(gpu_states(settings, XID_AT), 1.7e9, ("ROW_REMAPPER",))
    assert report.count("Pending") - report.count("Pending Page") == len(after)
    assert re.search(r"Pending\s+: Yes", report) and report.count(": Yes") == 1
    engine = AlertEngine("h", AlertRules())
    engine.on_sample(HostSample("h", 1.7e9, None, after))
    rows = [a for a in engine.active() if a.kind == "gpu_health"]
    assert [(a.gpu, a.severity) for a in rows] == [(XID_GPU, Health.WARNING)]
    assert "reset the GPU" in rows[0].message
    assert findings(before[XID_GPU]) == []
