"""The simulated ``nvidia-smi -q [-d SECTIONS]``: the human "NVSMI LOG" report, in the
layout nvidia-smi 590 prints (tests/fixtures/nvidia/real-captures/, the H200's ``-q``):
keys padded to column 55 before ``": "``, four spaces per level, a blank line between GPUs.

A GPU in MIG mode (the mig scenario) also has its ``MIG Mode``, ``MIG Device`` sections,
``GPU UUID`` and ``Processes`` with their GPU and compute instance ids, as the H100's and
H200's MIG captures print them (what the agent reads where NVML is not usable).

Only the sections ``gpumon bundle`` asks for are simulated (``-d ECC, PAGE_RETIREMENT,
ROW_REMAPPER, PERFORMANCE, CLOCK``); a plain ``-q`` prints those too, after the header.
The values come from the same model as the CSV queries (clocks, P-state, event reasons);
ECC and retired pages are the healthy board's zeros; the remapped rows' pending and
failure flags are the CSV's (the sglang scenario's Xid 63 leaves a row pending).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpumon.backends.sim.fields import CUDA_VERSION, DRIVER_VERSION
from gpumon.backends.sim.scenario import (
    BUS_IDS,
    GPU_COUNT,
    GPU_NAME,
    MAX_SM_CLOCK_MHZ,
    MEMORY_CLOCK_MHZ,
    MigSlice,
    SimGpu,
    SimProcess,
)

__all__ = ["DISPLAY_SECTIONS", "parse_display", "query_report"]

KEY_WIDTH = 55
# -d names, in the order nvidia-smi prints their sections inside a GPU.
DISPLAY_SECTIONS = ("PERFORMANCE", "ECC", "PAGE_RETIREMENT", "ROW_REMAPPER", "CLOCK")
_REASONS = (  # (label, bit, indent level under "Clocks Event Reasons")
    ("Idle", 0x1, 0),
    ("Applications Clocks Setting", 0x2, 0),
    ("SW Power Cap", 0x4, 0),
    ("HW Slowdown", 0x8, 0),
    ("HW Thermal Slowdown", 0x40, 1),
    ("HW Power Brake Slowdown", 0x80, 1),
    ("Sync Boost", 0x10, 0),
    ("SW Thermal Slowdown", 0x20, 0),
    ("Display Clock Setting", 0x100, 0),
)


def parse_display(text: str) -> tuple[str, ...]:
    """``-d``'s comma list, upper-cased; raises ValueError naming an unknown section."""
    names = tuple(n.strip().upper() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in DISPLAY_SECTIONS]
    if unknown or not names:
        raise ValueError(unknown[0] if unknown else text)
    return names


def _line(level: int, key: str, value: str | None = None) -> str:
    text = "    " * level + key
    return text + "\n" if value is None else f"{text.ljust(KEY_WIDTH)}: {value}\n"


def _performance(gpu: SimGpu) -> list[str]:
    out = [_line(1, "Performance State", gpu.pstate), _line(1, "Clocks Event Reasons")]
    for label, bit, extra in _REASONS:
        state = "Active" if gpu.clocks_event_reasons & bit else "Not Active"
        out.append(_line(2 + extra, label, state))
    out.append(_line(1, "Clocks Event Reasons Counters"))
    for label in (
        "SW Power Capping",
        "Sync Boost",
        "SW Thermal Slowdown",
        "HW Thermal Slowdown",
        "HW Power Braking",
    ):
        out.append(_line(2, label, "0 us"))
    return out


def _ecc(gpu: SimGpu) -> list[str]:
    out = [_line(1, "ECC Mode"), _line(2, "Current", "Enabled"), _line(2, "Pending", "Enabled")]
    out.append(_line(1, "ECC Errors"))
    counts = (
        "SRAM Correctable",
        "SRAM Uncorrectable Parity",
        "SRAM Uncorrectable SEC-DED",
        "DRAM Correctable",
        "DRAM Uncorrectable",
    )
    out.append(_line(2, "Volatile"))
    out += [_line(3, c, "0") for c in counts]
    out.append(_line(2, "Aggregate"))
    out += [_line(3, c, "0") for c in counts]
    out.append(_line(3, "SRAM Threshold Exceeded", "No"))
    out.append(_line(2, "Aggregate Uncorrectable SRAM Sources"))
    for source in ("SRAM L2", "SRAM SM", "SRAM Microcontroller", "SRAM PCIE", "SRAM Other"):
        out.append(_line(3, source, "0"))
    for label in ("Channel Repair Pending", "TPC Repair Pending", "Unrepairable Memory"):
        out.append(_line(2, label, "No"))
    return out


def _retired(gpu: SimGpu) -> list[str]:
    # Row remapping replaced page retirement on this generation: N/A, as on the H200.
    return [
        _line(1, "Retired Pages"),
        _line(2, "Single Bit ECC", "N/A"),
        _line(2, "Double Bit ECC", "N/A"),
        _line(2, "Pending Page Blacklist", "N/A"),
    ]


def _remapped(gpu: SimGpu) -> list[str]:
    return [
        _line(1, "Remapped Rows"),
        _line(2, "Correctable Error", "0"),
        _line(2, "Uncorrectable Error", "0"),
        _line(2, "Pending", "Yes" if gpu.rows_pending else "No"),
        _line(2, "Remapping Failure Occurred", "Yes" if gpu.rows_failure else "No"),
        _line(2, "Bank Remap Availability Histogram"),
        _line(3, "Max", "1536 bank(s)"),
        _line(3, "High", "0 bank(s)"),
        _line(3, "Partial", "0 bank(s)"),
        _line(3, "Low", "0 bank(s)"),
        _line(3, "None", "0 bank(s)"),
    ]


def _clocks(gpu: SimGpu) -> list[str]:
    def block(title: str, graphics: int, memory: int, *, video: int | None = None) -> list[str]:
        out = [_line(1, title), _line(2, "Graphics", f"{graphics} MHz")]
        out.append(_line(2, "SM", f"{graphics} MHz"))
        out.append(_line(2, "Memory", f"{memory} MHz"))
        if video is not None:
            out.append(_line(2, "Video", f"{video} MHz"))
        return out

    deprecated = "Requested functionality has been deprecated"
    out = block("Clocks", gpu.sm_clock_mhz, gpu.memory_clock_mhz, video=gpu.sm_clock_mhz * 3 // 4)
    out += [
        _line(1, "Applications Clocks"),
        _line(2, "Graphics", deprecated),
        _line(2, "Memory", deprecated),
    ]
    out += [
        _line(1, "Default Applications Clocks"),
        _line(2, "Graphics", deprecated),
        _line(2, "Memory", deprecated),
    ]
    out += [_line(1, "Deferred Clocks"), _line(2, "Memory", "N/A")]
    out += block("Max Clocks", MAX_SM_CLOCK_MHZ, MEMORY_CLOCK_MHZ, video=MAX_SM_CLOCK_MHZ * 3 // 4)
    out += [_line(1, "Max Customer Boost Clocks"), _line(2, "Graphics", f"{MAX_SM_CLOCK_MHZ} MHz")]
    out += [
        _line(1, "Clock Policy"),
        _line(2, "Auto Boost", "N/A"),
        _line(2, "Auto Boost Default", "N/A"),
    ]
    return out


_SECTIONS = {
    "PERFORMANCE": _performance,
    "ECC": _ecc,
    "PAGE_RETIREMENT": _retired,
    "ROW_REMAPPER": _remapped,
    "CLOCK": _clocks,
}


def _mib(level: int, key: str, mib: int) -> str:
    return _line(level, key, f"{mib} MiB")


def _mig_head(gpu: SimGpu, slices: list[tuple[MigSlice, int]]) -> list[str]:
    out = [_line(1, "Product Name", GPU_NAME), _line(1, "MIG Mode")]
    out += [_line(2, "Current", "Enabled"), _line(2, "Pending", "Enabled")]
    for m, used in slices:
        out += [_line(1, "MIG Device"), _line(2, "Index", str(m.device))]
        out += [_line(2, "GPU Instance ID", str(m.gi)), _line(2, "Compute Instance ID", "0")]
        out += [_line(2, "Device Attributes"), _line(3, "Shared")]
        out += [_line(4, "Multiprocessor count", str(m.sm))]
        out += [_line(2, "Shared FB Memory Usage"), _mib(3, "Total", m.total_mib)]
        out += [_mib(3, "Reserved", 0), _mib(3, "Used", used), _mib(3, "Free", m.total_mib - used)]
    return [*out, _line(1, "GPU UUID", gpu.uuid)]


def _mig_processes(procs: list[tuple[MigSlice, SimProcess]]) -> list[str]:
    out = [_line(1, "Processes")]
    for m, p in procs:
        # the process lines' keys are padded to their own column in the real report
        out += [f"        {'GPU instance ID'.ljust(34)}: {m.gi}\n"]
        out += [f"        {'Compute instance ID'.ljust(34)}: 0\n"]
        out += [f"        {'Process ID'.ljust(34)}: {p.pid}\n"]
        out += [
            f"            {'Type'.ljust(30)}: C\n",
            f"            {'Name'.ljust(30)}: {p.name}\n",
        ]
        out += [f"            {'Used GPU Memory'.ljust(30)}: {p.used_memory_mib} MiB\n"]
    return out


def query_report(
    gpus: list[SimGpu],
    wall: float,
    sections: tuple[str, ...] = (),
    mig: dict[int, list[tuple[MigSlice, int]]] | None = None,
    mig_procs: Sequence[tuple[MigSlice, SimProcess]] = (),
) -> str:
    """The ``-q`` report of ``gpus`` at ``wall`` time with ``sections`` (-d names; empty:
    every simulated one), each GPU's in nvidia-smi's order. ``mig``: the GPU instances of
    the GPUs in MIG mode with their used MiB; ``mig_procs``: the processes on them."""
    chosen = [s for s in DISPLAY_SECTIONS if s in sections] if sections else list(DISPLAY_SECTIONS)
    out = [
        "\n==============NVSMI LOG==============\n\n",
        _line(0, "Timestamp", time.ctime(wall)),
        _line(0, "Driver Version", DRIVER_VERSION),
        _line(0, "CUDA Version", CUDA_VERSION),
        "\n",
        _line(0, "Attached GPUs", str(GPU_COUNT)),
    ]
    for gpu in gpus:
        out.append(f"GPU {BUS_IDS[gpu.index]}\n")
        slices = (mig or {}).get(gpu.index) if gpu.mig else None
        if slices is not None:
            out += _mig_head(gpu, slices)
        for name in chosen:
            out += _SECTIONS[name](gpu)
        if slices is not None:
            out += _mig_processes(list(mig_procs))
        out.append("\n")
    return "".join(out)
