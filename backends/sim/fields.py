"""The ``--query-gpu`` / ``--query-compute-apps`` fields the simulated nvidia-smi knows.

Each field has nvidia-smi's canonical name (what the csv header prints, even when the
caller used an alias), its aliases, the unit its header and values carry, how to read it
from the model, and the one-line description ``--help-query-gpu`` lists. Spellings and
value shapes follow real 590-driver captures (docs/formats.md section 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from gpumon.backends.sim.scenario import (
    GPU_COUNT,
    GPU_NAME,
    MAX_SM_CLOCK_MHZ,
    MEMORY_CLOCK_MHZ,
    MEMORY_RESERVED_MIB,
    MEMORY_TOTAL_MIB,
    POWER_LIMIT_W,
    SimGpu,
    SimProcess,
)

DRIVER_VERSION = "590.48.01"
NVML_VERSION = "590.48"
CUDA_VERSION = "13.1"
VBIOS_VERSION = "98.02.52.00.03"
NOT_SUPPORTED = "[N/A]"

GpuValue = Callable[[SimGpu, str], str]  # (gpu, row timestamp) -> cell text without unit
ProcessValue = Callable[[SimProcess, str], str]


class GpuField(NamedTuple):
    name: str
    aliases: tuple[str, ...]
    unit: str  # "" for none; otherwise shown as "name [unit]" and "value unit"
    value: GpuValue
    help: str
    identity: bool = False  # still printed for a lost GPU (nvidia-smi has it without NVML)


class ProcessField(NamedTuple):
    name: str
    aliases: tuple[str, ...]
    unit: str
    value: ProcessValue
    help: str


def _util(gpu: SimGpu, pct: int) -> str:
    """A utilisation cell: a GPU in MIG mode reports none (real 590 captures: ``[N/A]``)."""
    return NOT_SUPPORTED if gpu.mig else str(pct)


def _const(text: str) -> GpuValue:
    return lambda g, ts: text


def _watts(w: float) -> GpuValue:
    text = f"{w:.2f}"
    return lambda g, ts: text


def _reason(bit: int) -> GpuValue:
    return lambda g, ts: "Active" if g.clocks_event_reasons & bit else "Not Active"


def _bus_part(start: int, end: int) -> GpuValue:
    return lambda g, ts: f"0x{g.bus_id[start:end]}"


_REASONS = (  # (suffix, bit, help) for clocks_event_reasons.* / clocks_throttle_reasons.*
    ("gpu_idle", 0x1, "Nothing is running on the GPU and the clocks are dropping to Idle state."),
    ("applications_clocks_setting", 0x2, "GPU clocks are limited by applications clocks setting."),
    ("sw_power_cap", 0x4, "SW Power Scaling algorithm is reducing the clocks below requested."),
    ("hw_slowdown", 0x8, "HW Slowdown (reducing the core clocks by a factor of 2 or more)."),
    ("hw_thermal_slowdown", 0x40, "HW Thermal Slowdown is engaged (temperature too high)."),
    ("hw_power_brake_slowdown", 0x80, "HW Power Brake Slowdown is engaged."),
    ("sw_thermal_slowdown", 0x20, "SW Thermal capping algorithm is reducing clocks."),
    ("sync_boost", 0x10, "Sync Boost: clocks matched to the slowest GPU of the group."),
)


def _link_gen(g: SimGpu, ts: str) -> str:
    return "5" if g.pstate == "P0" else "1"  # the PCIe link drops to gen 1 when idle


# fmt: off
GPU_FIELDS: tuple[GpuField, ...] = (
    GpuField("timestamp", (), "", lambda g, ts: ts,
             'The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".',
             identity=True),
    GpuField("driver_version", (), "", _const(DRIVER_VERSION),
             "The version of the installed NVIDIA display driver.", identity=True),
    GpuField("count", (), "", _const(str(GPU_COUNT)),
             "The number of NVIDIA GPUs in the system.", identity=True),
    GpuField("name", ("gpu_name",), "", _const(GPU_NAME),
             "The official product name of the GPU.", identity=True),
    GpuField("serial", ("gpu_serial",), "", _const(NOT_SUPPORTED),
             "This number matches the serial number physically printed on each board."),
    GpuField("uuid", ("gpu_uuid",), "", lambda g, ts: g.uuid,
             "This value is the globally unique immutable alphanumeric identifier of the GPU.",
             identity=True),
    GpuField("pci.bus_id", ("gpu_bus_id",), "", lambda g, ts: g.bus_id,
             'PCI bus id as "domain:bus:device.function", in hex.', identity=True),
    GpuField("pci.domain", (), "", _bus_part(4, 8), "PCI domain number, in hex.", identity=True),
    GpuField("pci.bus", (), "", _bus_part(9, 11), "PCI bus number, in hex.", identity=True),
    GpuField("pci.device", (), "", _bus_part(12, 14), "PCI device number, in hex.", identity=True),
    GpuField("pcie.link.gen.current", (), "", _link_gen,
             "The current PCI-E link generation. Deprecated, use pcie.link.gen.gpucurrent."),
    GpuField("pcie.link.gen.gpucurrent", (), "", _link_gen,
             "The current PCI-E link generation."),
    GpuField("pcie.link.gen.max", (), "", _const("5"),
             "The maximum PCI-E link generation possible with this GPU and system."),
    GpuField("pcie.link.gen.gpumax", (), "", _const("5"),
             "The maximum PCI-E link generation supported by this GPU."),
    GpuField("pcie.link.width.current", (), "", lambda g, ts: str(g.pcie_width),
             "The current PCI-E link width."),
    GpuField("pcie.link.width.max", (), "", _const("16"),
             "The maximum PCI-E link width possible with this GPU and system."),
    GpuField("index", (), "", lambda g, ts: str(g.index),
             "Zero based index of the GPU. Can change at each boot.", identity=True),
    GpuField("display_active", (), "", _const("Disabled"),
             "A flag that indicates whether a display is initialized on the GPU."),
    GpuField("persistence_mode", (), "", _const("Enabled"),
             'A flag that indicates whether persistence mode is enabled for the GPU.'),
    GpuField("accounting.mode", (), "", _const("Disabled"),
             "A flag that indicates whether accounting mode is enabled for the GPU."),
    GpuField("vbios_version", (), "", _const(VBIOS_VERSION), "The BIOS of the GPU board."),
    GpuField("gpu_recovery_action", (), "", lambda g, ts: g.recovery_action,
             "GPU recovery action information."),
    GpuField("fan.speed", (), "%", _const(NOT_SUPPORTED),
             "The fan speed value is the percent of the product's maximum noise tolerance."),
    GpuField("pstate", (), "", lambda g, ts: g.pstate,
             "The current performance state for the GPU. States range from P0 to P12."),
    GpuField("clocks_event_reasons.supported", ("clocks_throttle_reasons.supported",), "",
             _const("0x00000000000001FF"), "Bitmask of supported clock event reasons."),
    GpuField("clocks_event_reasons.active", ("clocks_throttle_reasons.active",), "",
             lambda g, ts: f"0x{g.clocks_event_reasons:016X}",
             "Bitmask of active clock event reasons."),
    *(
        GpuField(f"clocks_event_reasons.{s}", (f"clocks_throttle_reasons.{s}",), "",
                 _reason(bit), text)
        for s, bit, text in _REASONS
    ),
    GpuField("memory.total", (), "MiB", _const(str(MEMORY_TOTAL_MIB)),
             "Total installed GPU memory."),
    GpuField("memory.reserved", (), "MiB", _const(str(MEMORY_RESERVED_MIB)),
             "Total memory reserved by the NVIDIA driver and firmware."),
    GpuField("memory.used", (), "MiB", lambda g, ts: str(g.memory_used_mib),
             "Total memory allocated by active contexts."),
    GpuField("memory.free", (), "MiB", lambda g, ts: str(g.memory_free_mib),
             "Total free memory."),
    GpuField("compute_mode", (), "", _const("Default"),
             "The compute mode flag indicates whether individual or multiple compute "
             "applications may run on the GPU."),
    GpuField("compute_cap", (), "", _const("12.0"),
             "The CUDA Compute Capability, represented as Major DOT Minor."),
    GpuField("utilization.gpu", (), "%", lambda g, ts: _util(g, g.utilization_pct),
             "Percent of time over the past sample period during which one or more kernels "
             "was executing on the GPU."),
    GpuField("utilization.memory", (), "%", lambda g, ts: _util(g, g.memory_utilization_pct),
             "Percent of time over the past sample period during which global (device) "
             "memory was being read or written."),
    GpuField("utilization.encoder", (), "%", _const("0"),
             "Percent of time the Encoder Engine was busy."),
    GpuField("utilization.decoder", (), "%", _const("0"),
             "Percent of time the Decoder Engine was busy."),
    GpuField("ecc.mode.current", (), "", _const("Enabled"),
             "The ECC mode that the GPU is currently operating under."),
    GpuField("ecc.mode.pending", (), "", _const("Enabled"),
             "The ECC mode that the GPU will operate under after the next reboot."),
    GpuField("ecc.errors.corrected.volatile.total", (), "", lambda g, ts: str(g.ecc_corrected),
             "Total errors detected across entire chip."),
    GpuField("ecc.errors.corrected.aggregate.total", (), "", lambda g, ts: str(g.ecc_corrected),
             "Total errors detected across entire chip."),
    GpuField("ecc.errors.uncorrected.volatile.total", (), "",
             lambda g, ts: str(g.ecc_uncorrected),
             "Total errors detected across entire chip."),
    GpuField("ecc.errors.uncorrected.aggregate.total", (), "",
             lambda g, ts: str(g.ecc_uncorrected),
             "Total errors detected across entire chip."),
    GpuField("remapped_rows.correctable", ("remapped_rows.sbe",), "", _const("0"),
             "The number of rows that have been remapped due to multiple single bit ECC errors."),
    GpuField("remapped_rows.uncorrectable", ("remapped_rows.dbe",), "", _const("0"),
             "The number of rows that have been remapped due to a double bit ECC error."),
    GpuField("remapped_rows.pending", (), "", lambda g, ts: "Yes" if g.rows_pending else "No",
             "Checks if any row remapping are pending on the next reboot."),
    GpuField("retired_pages.pending", (), "", _const(NOT_SUPPORTED),
             "Checks if any GPU device memory pages are pending retirement on the next reboot."),
    GpuField("remapped_rows.failure", (), "", lambda g, ts: "Yes" if g.rows_failure else "No",
             "Checks if any row remapping failure happens in the GPU lifespan."),
    GpuField("temperature.gpu", (), "", lambda g, ts: str(g.temperature_c),
             " Core GPU temperature. in degrees C."),
    GpuField("temperature.gpu.tlimit", (), "", lambda g, ts: str(87 - g.temperature_c),
             " GPU T.Limit temperature. in degrees C."),
    GpuField("temperature.memory", (), "", _const("N/A"),
             " HBM memory temperature. in degrees C."),
    GpuField("power.draw", (), "W", lambda g, ts: f"{g.power_w:.2f}",
             "The last measured power draw for the entire board, in watts. On Ampere or "
             "newer devices, returns average power draw over 1 sec."),
    GpuField("power.draw.average", ("gpu.power.draw.average",), "W",
             lambda g, ts: f"{g.power_w:.2f}",
             "The last measured average power draw for the entire board, in watts."),
    GpuField("power.draw.instant", ("gpu.power.draw.instant",), "W",
             lambda g, ts: f"{g.power_instant_w:.2f}",
             "The last measured instant power draw for the entire board, in watts."),
    GpuField("power.limit", ("gpu.power.requested_limit",), "W", _watts(POWER_LIMIT_W),
             "The software power limit in watts."),
    GpuField("enforced.power.limit", ("gpu.power.current_limit",), "W", _watts(POWER_LIMIT_W),
             "The power management algorithm's power ceiling, in watts."),
    GpuField("power.default_limit", ("gpu.power.default_limit",), "W", _watts(POWER_LIMIT_W),
             "The default power management algorithm's power ceiling, in watts."),
    GpuField("power.min_limit", ("gpu.power.min_limit",), "W", _watts(150.0),
             "The minimum value in watts that power limit can be set to."),
    GpuField("power.max_limit", ("gpu.power.max_limit",), "W", _watts(POWER_LIMIT_W),
             "The maximum value in watts that power limit can be set to."),
    GpuField("clocks.current.graphics", ("clocks.gr",), "MHz",
             lambda g, ts: str(g.sm_clock_mhz),
             "Current frequency of graphics (shader) clock."),
    GpuField("clocks.current.sm", ("clocks.sm",), "MHz", lambda g, ts: str(g.sm_clock_mhz),
             "Current frequency of SM (Streaming Multiprocessor) clock."),
    GpuField("clocks.current.memory", ("clocks.mem",), "MHz",
             lambda g, ts: str(g.memory_clock_mhz), "Current frequency of memory clock."),
    GpuField("clocks.current.video", ("clocks.video",), "MHz",
             lambda g, ts: str(g.sm_clock_mhz * 3 // 4),
             "Current frequency of video encoder/decoder clock."),
    GpuField("clocks.max.graphics", ("clocks.max.gr",), "MHz", _const(str(MAX_SM_CLOCK_MHZ)),
             "Maximum frequency of graphics (shader) clock."),
    GpuField("clocks.max.sm", (), "MHz", _const(str(MAX_SM_CLOCK_MHZ)),
             "Maximum frequency of SM (Streaming Multiprocessor) clock."),
    GpuField("clocks.max.memory", ("clocks.max.mem",), "MHz", _const(str(MEMORY_CLOCK_MHZ)),
             "Maximum frequency of memory clock."),
    GpuField("mig.mode.current", (), "", lambda g, ts: "Enabled" if g.mig else "Disabled",
             "The MIG mode that the GPU is currently operating under."),
    GpuField("mig.mode.pending", (), "", lambda g, ts: "Enabled" if g.mig else "Disabled",
             "The MIG mode that the GPU will operate under after reset."),
)

PROCESS_FIELDS: tuple[ProcessField, ...] = (
    ProcessField("timestamp", (), "", lambda p, ts: ts,
                 'The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".'),
    ProcessField("gpu_name", (), "", lambda p, ts: GPU_NAME,
                 "The official product name of the GPU."),
    ProcessField("gpu_bus_id", (), "", lambda p, ts: p.gpu_bus_id,
                 'PCI bus id as "domain:bus:device.function", in hex.'),
    ProcessField("gpu_serial", (), "", lambda p, ts: NOT_SUPPORTED,
                 "This number matches the serial number physically printed on each board."),
    ProcessField("gpu_uuid", (), "", lambda p, ts: p.gpu_uuid,
                 "This value is the globally unique immutable alphanumeric identifier of the GPU."),
    ProcessField("pid", (), "", lambda p, ts: str(p.pid), "Process ID of the compute application"),
    ProcessField("process_name", ("name",), "", lambda p, ts: p.name, "Process Name"),
    ProcessField("used_gpu_memory", ("used_memory",), "MiB", lambda p, ts: str(p.used_memory_mib),
                 "Amount memory used on the device by the context."),
)
# fmt: on

GPU_FIELD_BY_NAME: dict[str, GpuField] = {n: f for f in GPU_FIELDS for n in (f.name, *f.aliases)}
PROCESS_FIELD_BY_NAME: dict[str, ProcessField] = {
    n: f for f in PROCESS_FIELDS for n in (f.name, *f.aliases)
}


def help_text(switch: str, fields: tuple[GpuField, ...] | tuple[ProcessField, ...]) -> str:
    """A ``--help-query-*`` listing in nvidia-smi's shape: ``"name" or "alias"`` + text."""
    lines = [f'List of valid properties to query for the switch "{switch}":', ""]
    for f in fields:
        lines.append(" or ".join(f'"{n}"' for n in (f.name, *f.aliases)))
        lines.append(f.help)
        lines.append("")
    return "\n".join(lines) + "\n"
