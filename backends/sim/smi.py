"""The simulated machine's ``nvidia-smi``: ``python -m gpumon.backends.sim.smi ARGS``.

Prints what nvidia-smi 590 prints, from ``scenario``: ``--query-gpu`` / ``--query-compute-apps``
CSV (``--format=csv[,noheader][,nounits]``), loop mode (``-l``/``--loop``, ``-lms``/
``--loop-ms``), ``-i``/``--id``, ``-L``, ``--version``, ``--help-query-gpu``,
``--help-query-compute-apps``, ``-h``, ``-q`` with ``-d`` (``smi_query``), and ``pmon -c N
-s u`` (each process's SM and memory share). Settings
come from ``GPUMON_SIM_*`` (see ``SimSettings.from_env``); ``GPUMON_SIM_FAULT`` makes it
fail the way a sick host does.
Exit codes follow nvidia-smi: 0 ok, 2 bad arguments, the fault's code otherwise.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO

from gpumon.backends.sim.fields import (
    CUDA_VERSION,
    DRIVER_VERSION,
    GPU_FIELD_BY_NAME,
    GPU_FIELDS,
    NVML_VERSION,
    PROCESS_FIELD_BY_NAME,
    PROCESS_FIELDS,
    help_text,
)
from gpumon.backends.sim.scenario import (
    BUS_IDS,
    GPU_COUNT,
    GPU_NAME,
    MIG_GPU,
    MIG_INSTANCES,
    TARGET_GPUS,
    UUIDS,
    FaultSpec,
    SimGpu,
    SimSettings,
    compute_processes,
    gpu_states,
    mig_processes,
    mig_used_mib,
    parse_fault,
    scenario_time,
    wall_time,
)
from gpumon.backends.sim.smi_query import parse_display, query_report
from gpumon.backends.sim.state import RESTARTS_FILE, with_state, write_kernel_log

# What nvidia-smi prints (stdout) and its exit code for each start-up failure:
# tests/fixtures/nvidia/nvidia_smi_errors/ and docs/formats.md section 3.
FAULTS: dict[str, tuple[str, int]] = {
    "driver_not_loaded": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        9,
    ),
    "version_mismatch": (
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 580.105\n",
        18,
    ),
    "nvml_unknown_error": ("Failed to initialize NVML: Unknown Error\n", 255),
    "no_devices": ("No devices were found\n", 6),
    "device_handle": (
        "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error\n",
        255,
    ),
    "library_not_found": (
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
        "that the NVIDIA Display Driver is properly installed and present in your system.\n"
        "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
        12,
    ),
}
INVALID_COMBINATION = (
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
)
LOST = "[GPU is lost]"
DEFAULT_LOOP_S = 5.0  # -l without a number

_HELP = f"""NVIDIA System Management Interface -- v{DRIVER_VERSION}

NVSMI provides monitoring information for Tesla and select Quadro devices.
(gpumon simulator: only the options below are simulated.)

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU.
    -l,   --loop=               Probe until Ctrl+C at specified second interval.
    -lms, --loop-ms=            Probe until Ctrl+C at specified millisecond interval.
    --query-gpu                 Information about GPU.
                                Call --help-query-gpu for more info.
    --query-compute-apps        List of currently active compute processes.
                                Call --help-query-compute-apps for more info.
    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical
                                             values
"""


class UsageError(Exception):
    """Bad command line; the message is what nvidia-smi prints, ``code`` its exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class _Stop(Exception):
    """SIGTERM arrived: leave the loop quietly."""


@dataclass
class Command:
    action: str = ""  # query-gpu, query-compute-apps, list, version, help, help-query-*
    fields: list[str] = field(default_factory=list)
    header: bool = True
    units: bool = True
    loop_s: float | None = None
    ids: list[str] | None = None
    display: tuple[str, ...] = ()  # -q's -d sections (smi_query.DISPLAY_SECTIONS)


def parse_args(args: list[str]) -> Command:
    """nvidia-smi's command line, as far as the simulator supports it. Raises UsageError."""
    cmd = Command()
    fmt: str | None = None
    i = 0

    def set_action(action: str) -> None:
        if cmd.action:
            raise UsageError(INVALID_COMBINATION)
        cmd.action = action

    def value(name: str, inline: str | None) -> str:
        nonlocal i
        if inline is not None:
            return inline
        i += 1
        if i >= len(args):
            raise UsageError(INVALID_COMBINATION)
        return args[i]

    if args[:1] == ["pmon"]:
        return _parse_pmon(args[1:])
    while i < len(args):
        arg = args[i]
        name, inline = arg, None
        if arg.startswith("--") and "=" in arg:
            name, _, inline = arg.partition("=")
        if name in ("--query-gpu", "--query-compute-apps"):
            set_action(name[2:])
            cmd.fields = [f.strip() for f in value(name, inline).split(",")]
        elif name == "--format":
            fmt = value(name, inline)
        elif name in ("-lms", "--loop-ms"):
            cmd.loop_s = _positive(value(name, inline)) / 1000.0
        elif name in ("-l", "--loop"):
            if inline is None and i + 1 < len(args) and args[i + 1].isdigit():
                inline = args[i + 1]
                i += 1
            cmd.loop_s = DEFAULT_LOOP_S if inline is None else _positive(inline)
        elif name in ("-i", "--id"):
            cmd.ids = [x.strip() for x in value(name, inline).split(",")]
        elif name in ("-L", "--list-gpus") and inline is None:
            set_action("list")
        elif name in ("-q", "--query") and inline is None:
            set_action("query")
        elif name in ("-d", "--display"):
            try:
                cmd.display = parse_display(value(name, inline))
            except ValueError:
                raise UsageError(INVALID_COMBINATION) from None
        elif name in ("--version", "-h", "--help", "--help-query-gpu", "--help-query-compute-apps"):
            set_action({"-h": "help", "--help": "help"}.get(name, name.lstrip("-")))
        else:
            raise UsageError(
                f"ERROR: Option {arg} is not recognized. Please run 'nvidia-smi -h' for help.\n\n"
            )
        i += 1
    if cmd.action.startswith("query-"):
        options = (fmt or "").split(",")
        if "csv" not in options or not set(options) <= {"csv", "noheader", "nounits"}:
            raise UsageError(INVALID_COMBINATION)
        cmd.header = "noheader" not in options
        cmd.units = "nounits" not in options
        if not all(cmd.fields):
            raise UsageError(INVALID_COMBINATION)
        known = GPU_FIELD_BY_NAME if cmd.action == "query-gpu" else PROCESS_FIELD_BY_NAME
        for f in cmd.fields:
            if f not in known:
                raise UsageError(f'Field "{f}" is not a valid field to query.\n\n')
    elif not cmd.action or fmt is not None or cmd.loop_s is not None:
        raise UsageError(INVALID_COMBINATION)
    if cmd.display and cmd.action != "query":
        raise UsageError(INVALID_COMBINATION)
    return cmd


def _parse_pmon(args: list[str]) -> Command:
    """``pmon [-c COUNT] [-s u] [-i IDS]``: the utilisation columns only (``-s u``, its
    default), COUNT intervals (the simulator does not wait a second between them)."""
    cmd = Command("pmon", loop_s=1.0)
    i = 0
    while i < len(args):
        if i + 1 >= len(args) or args[i] not in ("-c", "-s", "-i"):
            raise UsageError(f"Invalid combination of input arguments: {' '.join(args)}\n")
        flag, value = args[i], args[i + 1]
        if flag == "-c":
            cmd.fields = ["x"] * _positive(value)  # one per interval
        elif flag == "-s" and value != "u":
            raise UsageError(f"pmon -s {value}: the simulator has the utilisation only\n")
        elif flag == "-i":
            cmd.ids = [x.strip() for x in value.split(",")]
        i += 2
    return cmd


# ``nvidia-smi pmon -s u`` as 590.48.01 prints it (tests/fixtures/nvidia/real-captures,
# the H200's "pmon (per-process monitor)" section): two header lines, then a line a
# process (``-`` where it had no sample in the interval), a line of ``-`` for a GPU
# without processes.
PMON_HEADER = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %    name \n"
)


def pmon_line(gpu: int, pid: object, kind: str, sm: object, mem: object, name: str) -> str:
    rest = " ".join(f"{'-':>6}" for _ in range(4))
    return f"{gpu:>5} {pid!s:>10} {kind:>5} {sm!s:>6} {mem!s:>6} {rest}    {name:<15}\n"


def pmon_interval(settings: SimSettings, t: float, chosen: frozenset[int]) -> str:
    """One interval: each compute process's share; the first process of a busy GPU has
    its utilisation, the others none (the demo's second holder only holds memory)."""
    gpus = {g.index: g for g in gpu_states(settings, t)}
    procs = compute_processes(settings, t)
    out = []
    for index in sorted(chosen & gpus.keys()):
        mine = [p for p in procs if p.gpu_index == index]
        if not mine:
            out.append(pmon_line(index, "-", "-", "-", "-", "-"))
        for k, p in enumerate(mine):
            g = gpus[index]
            busy = k == 0 and g.utilization_pct > 0
            sm, mem = (g.utilization_pct, g.memory_utilization_pct) if busy else ("-", "-")
            out.append(pmon_line(index, p.pid, "C", sm, mem, p.name.rsplit("/", 1)[-1][:15]))
    return "".join(out)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(INVALID_COMBINATION)
    return int(text)


def timestamp(wall: float) -> str:
    """nvidia-smi's ``YYYY/MM/DD HH:MM:SS.mmm`` in local time."""
    ms = int(wall * 1000) % 1000
    return f"{time.strftime('%Y/%m/%d %H:%M:%S', time.localtime(wall))}.{ms:03d}"


class Printer:
    """Turns the model into nvidia-smi's text; built once, then cheap per round."""

    def __init__(self, cmd: Command, settings: SimSettings) -> None:
        self.cmd = cmd
        self.settings = settings
        self.faults: FaultSpec = parse_fault(settings.fault)
        self.gpus = _selected(cmd.ids)
        self._restarts_key: tuple[int, int] | None = None
        is_gpu = cmd.action == "query-gpu"
        specs = [(GPU_FIELD_BY_NAME[f] if is_gpu else PROCESS_FIELD_BY_NAME[f]) for f in cmd.fields]
        self.header = ", ".join(f"{s.name} [{s.unit}]" if s.unit else s.name for s in specs)
        self.cells = [_cell(s.value, s.unit if cmd.units else "") for s in specs]
        self.identity = [getattr(s, "identity", False) for s in specs]

    def refresh(self) -> None:
        """Pick up a changed ``restarts.json`` in the state dir (one stat() per call)."""
        if not self.settings.state_dir:
            return
        try:
            st = Path(self.settings.state_dir, RESTARTS_FILE).stat()
            key: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != self._restarts_key:
            self._restarts_key = key
            self.settings = with_state(self.settings)

    def clock(self) -> tuple[float, float]:
        """(scenario time, wall time for timestamps); frozen settings freeze both."""
        s = self.settings
        if s.frozen_at is not None:
            return s.frozen_at, wall_time(s, s.frozen_at)
        now = time.time()
        return scenario_time(s, now), now

    def gpu_round(self, t: float, wall: float) -> str:
        out = []
        for gpu in gpu_states(self.settings, t):
            if gpu.index in self.gpus:
                out.append(self._gpu_row(gpu, timestamp(wall + 0.0015 * gpu.index)))
        return "".join(out)

    def _gpu_row(self, gpu: SimGpu, ts: str) -> str:
        if gpu.index in self.faults.no_handle:  # nvidia-smi's line in place of the row
            return no_handle_line(gpu.bus_id)
        if gpu.index in self.faults.lost:  # only what nvidia-smi knows without NVML survives
            pairs = zip(self.cells, self.identity, strict=True)
            return ", ".join(cell(gpu, ts) if keep else LOST for cell, keep in pairs) + "\n"
        return ", ".join([cell(gpu, ts) for cell in self.cells]) + "\n"

    def process_round(self, t: float, wall: float) -> str:
        ts = timestamp(wall)
        out = []
        gone = self.faults.lost | self.faults.no_handle
        for p in compute_processes(self.settings, t):
            if p.gpu_index in self.gpus and p.gpu_index not in gone:
                out.append(", ".join([cell(p, ts) for cell in self.cells]) + "\n")
        return "".join(out)

    def xid_line(self, round_no: int) -> str:
        """Now and then (deterministically) a kernel-style Xid event line, as -l prints."""
        if not self.faults.xid_noise:
            return ""
        rng = random.Random(f"{self.settings.seed}:xid:{round_no}")
        if rng.random() >= 0.2:
            return ""
        gpu = rng.choice(TARGET_GPUS)
        pci = BUS_IDS[gpu][4:14].lower()  # 0000:5d:00, as the kernel prints it
        pid = 2418861 + gpu
        return f"NVRM: Xid (PCI:{pci}): 43, pid={pid}, name=pt_main_thread, channel 0x00000008\n"


def no_handle_line(bus_id: str) -> str:
    """What nvidia-smi prints for a GPU whose handle NVML cannot give, in its row's place:
    the newer drivers' spelling, the domain in four digits and no space after ``GPU``
    (docs/formats.md section 3; the fixture ``device_handle_unknown_error.txt``)."""
    return f"Unable to determine the device handle for GPU{bus_id[-12:]}: Unknown Error\n"


Cell = Callable[[Any, str], str]  # (gpu or process, row timestamp) -> cell text


def _cell(value: Cell, unit: str) -> Cell:
    """``value`` with `` unit`` appended, except on tokens (``[N/A]``, ``[GPU is lost]``)."""
    if not unit:
        return value
    suffix = " " + unit

    def cell(item: Any, ts: str) -> str:
        text = value(item, ts)
        return text if text.startswith("[") else text + suffix

    return cell


def _list_line(settings: SimSettings, index: int) -> str:
    """``-L``'s line of GPU ``index``, with its MIG devices under it (mig scenario)."""
    line = f"GPU {index}: {GPU_NAME} (UUID: {UUIDS[index]})\n"
    if settings.scenario != "mig" or index != MIG_GPU:
        return line
    return line + "".join(
        f"  MIG {m.profile:<12}Device {m.device:>2}: (UUID: {m.uuid})\n" for m in MIG_INSTANCES
    )


def _selected(ids: list[str] | None) -> frozenset[int]:
    if ids is None:
        return frozenset(range(GPU_COUNT))
    chosen = set()
    for ident in ids:
        if ident.isdigit() and int(ident) < GPU_COUNT:
            chosen.add(int(ident))
        elif ident in UUIDS or ident.upper() in BUS_IDS:
            chosen.add(UUIDS.index(ident) if ident in UUIDS else BUS_IDS.index(ident.upper()))
        else:
            raise UsageError(*FAULTS["no_devices"])
    return frozenset(chosen)


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    raise _Stop


def run(cmd: Command, settings: SimSettings, out: TextIO) -> int:
    """Carry out ``cmd``; returns the exit code. Loops forever in loop mode."""
    if cmd.action == "help":
        out.write(_HELP)
        return 0
    if cmd.action == "help-query-gpu":
        out.write(help_text("--query-gpu", GPU_FIELDS))
        return 0
    if cmd.action == "help-query-compute-apps":
        out.write(help_text("--query-compute-apps", PROCESS_FIELDS))
        return 0
    fault = parse_fault(settings.fault).init
    if fault is not None:
        text, code = FAULTS[fault]
        out.write(text)
        return code
    if cmd.action == "version":
        out.write(
            f"NVIDIA-SMI version  : {DRIVER_VERSION}\nNVML version        : {NVML_VERSION}\n"
            f"DRIVER version      : {DRIVER_VERSION}\nCUDA Version        : {CUDA_VERSION}\n"
        )
        return 0
    if cmd.action == "query":
        chosen = _selected(cmd.ids)
        settings = with_state(settings)
        t, wall = Printer(Command("query-gpu", ["index"]), settings).clock()
        gpus = [g for g in gpu_states(settings, t) if g.index in chosen]
        slices = [(m, mig_used_mib(settings, t, m)) for m in MIG_INSTANCES]
        mig = {MIG_GPU: slices} if settings.scenario == "mig" else None
        out.write(query_report(gpus, wall, cmd.display, mig, mig_processes(settings, t)))
        return 0
    if cmd.action == "pmon":
        chosen = _selected(cmd.ids)
        settings = with_state(settings)
        t, _ = Printer(Command("query-gpu", ["index"]), settings).clock()
        out.write(PMON_HEADER)
        for _ in cmd.fields or ["x"]:
            out.write(pmon_interval(settings, t, chosen))
        return 0
    if cmd.action == "list":
        chosen = _selected(cmd.ids)
        out.write("".join(_list_line(settings, i) for i in sorted(chosen)))
        return 0
    printer = Printer(cmd, with_state(settings))
    make = printer.gpu_round if cmd.action == "query-gpu" else printer.process_round
    if cmd.header:
        out.write(printer.header + "\n")
    if cmd.loop_s is None:
        out.write(make(*printer.clock()))
        return 0
    period = cmd.loop_s
    while True:
        printer.refresh()
        t, wall = printer.clock()
        write_kernel_log(settings, t)  # the driver's Xid lines as scenario time passes
        out.write(make(t, wall))
        now = time.time()
        out.write(printer.xid_line(math.floor(now / period)))
        out.flush()
        # rounds sit on multiples of the period, so every stream samples the same moments
        time.sleep(max((math.floor(now / period) + 1) * period - time.time(), 0.0))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code. SIGTERM, Ctrl+C and a closed pipe end it quietly."""
    args = sys.argv[1:] if argv is None else argv
    try:
        settings = SimSettings.from_env(os.environ)
    except ValueError as e:
        print(f"gpumon simulator: {e}", file=sys.stderr)
        return 255
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return run(parse_args(args), settings, sys.stdout)
    except UsageError as e:
        sys.stdout.write(str(e))
        return e.code
    except BrokenPipeError:
        # the reader went away: silence the interpreter's final flush, then leave quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (_Stop, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
