"""nvidia-smi ``--query-gpu`` / ``--query-compute-apps`` CSV and failure texts to typed records.

Pure functions, standard library only. Formats: docs/formats.md sections 1-3. Every cell
nvidia-smi could not fill (``[N/A]``, ``N/A``, ``[GPU is lost]``, ...) becomes ``None``, never
0; rows that are not data (Xid text in a ``-lms`` stream, truncated lines) are counted, not
raised on.

nvidia-smi's CSV is not RFC 4180: cells are joined with ``", "`` and never quoted or escaped
(checked against real captures and the exporters that parse it), so ``csv.reader`` would
misread a name holding a ``"``. Rows are split on the separator instead, and the pieces a
free-text cell (a GPU or process name) adds are given back to it by counting the fixed
cells from both ends. Only a free-text cell may hold ``[`` or ``]``; there, only nvidia-smi's
own error spellings mean "no value" (a process may really be called ``[kworker/0:1]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import (
    GpuProcess,
    GpuSample,
    Health,
    UnreadableGpu,
    bus_id_key,
    pci_key,
)

PROCESS_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory", "gpu_uuid", "gpu_bus_id")

_FORMAT_ARG = "--format=csv,noheader,nounits"
_SEPARATOR = ", "  # nvidia-smi never quotes cells; comma + space separates them

# Canonical --query-gpu field -> (GpuSample attribute, value kind). Its keys, in this order,
# are the recommended 27-field query (docs/formats.md 1.1).
_GPU_FIELDS: dict[str, tuple[str, str]] = {
    "timestamp": ("timestamp", "str"),
    "index": ("index", "index"),
    "uuid": ("uuid", "str"),
    "name": ("name", "text"),
    "pci.bus_id": ("bus_id", "str"),
    "pstate": ("pstate", "str"),
    "temperature.gpu": ("temperature_c", "float"),
    "temperature.memory": ("memory_temperature_c", "float"),
    "utilization.gpu": ("utilization_pct", "float"),
    "utilization.memory": ("memory_utilization_pct", "float"),
    "memory.total": ("memory_total_mib", "int"),
    "memory.reserved": ("memory_reserved_mib", "int"),
    "memory.used": ("memory_used_mib", "int"),
    "memory.free": ("memory_free_mib", "int"),
    "power.draw": ("power_w", "float"),
    "power.draw.instant": ("power_instant_w", "float"),
    "power.limit": ("power_limit_w", "float"),
    "enforced.power.limit": ("enforced_power_limit_w", "float"),
    "clocks.current.sm": ("sm_clock_mhz", "int"),
    "clocks.current.memory": ("memory_clock_mhz", "int"),
    "clocks.max.sm": ("max_sm_clock_mhz", "int"),
    "fan.speed": ("fan_pct", "float"),
    "clocks_event_reasons.active": ("clocks_event_reasons", "hex"),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", "int"),
    "ecc.errors.corrected.volatile.total": ("ecc_corrected", "int"),
    "compute_mode": ("compute_mode", "str"),
    "persistence_mode": ("persistence_mode", "str"),
}
QUERY_FIELDS: tuple[str, ...] = tuple(_GPU_FIELDS)

# The health facts sampled beside QUERY_FIELDS (docs/formats.md 1.6), each asked only where
# this nvidia-smi's ``--help-query-gpu`` lists it (``fields_for_help``). The clock event
# reasons and ECC counts are in QUERY_FIELDS already. ``pcie.link.gen.gpucurrent`` is the
# current name of ``pcie.link.gen.current`` (R535-era helps already list both and call the
# old one deprecated; 590's still lists it): the old name is asked where only it is listed.
_HEALTH_FIELDS: dict[str, tuple[str, str]] = {
    "pcie.link.gen.gpucurrent": ("pcie_gen", "int"),
    "pcie.link.gen.max": ("pcie_gen_max", "int"),
    "pcie.link.width.current": ("pcie_width", "int"),
    "pcie.link.width.max": ("pcie_width_max", "int"),
    "remapped_rows.pending": ("rows_pending", "yes"),
    "remapped_rows.failure": ("rows_failure", "yes"),
    "retired_pages.pending": ("pages_pending", "yes"),
    "gpu_recovery_action": ("recovery_action", "str"),
}
HEALTH_FIELDS: tuple[str, ...] = tuple(_HEALTH_FIELDS)
# Whether the GPU is split into MIG instances (asked, like the health facts, where listed):
# its whole-GPU memory is then the sum of its slices and its utilisation is not reported.
_MODE_FIELDS: dict[str, tuple[str, str]] = {"mig.mode.current": ("mig_mode", "enabled")}
MODE_FIELDS: tuple[str, ...] = tuple(_MODE_FIELDS)
# The GPU's energy counter: NVML's nvmlDeviceGetTotalEnergyConsumption (millijoules since
# the driver was last loaded), which only the agent's NVML reader answers. nvidia-smi's
# ``--help-query-gpu`` lists no energy field (590.48.01, 610.57.04 captures), so where
# nvidia-smi is read it is not asked (the agent drops it with the fields its nvidia-smi
# does not list), and the accounting falls back to power x time (docs/formats.md 1.9).
_ENERGY_FIELDS: dict[str, tuple[str, str]] = {"total_energy_consumption": ("energy_mj", "int")}
ENERGY_FIELDS: tuple[str, ...] = tuple(_ENERGY_FIELDS)
SAMPLE_FIELDS: tuple[str, ...] = QUERY_FIELDS + HEALTH_FIELDS + MODE_FIELDS  # what is asked
AGENT_FIELDS: tuple[str, ...] = SAMPLE_FIELDS + ENERGY_FIELDS  # what the agent is asked
_GPU_FIELDS.update(_HEALTH_FIELDS)
_GPU_FIELDS.update(_MODE_FIELDS)
_GPU_FIELDS.update(_ENERGY_FIELDS)

# Aliases accepted on the command line (headers always print the canonical name).
_GPU_ALIASES: dict[str, str] = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "gpu.power.draw.instant": "power.draw.instant",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    "pcie.link.gen.current": "pcie.link.gen.gpucurrent",
}
_PROCESS_ALIASES: dict[str, str] = {"name": "process_name", "used_memory": "used_gpu_memory"}

_FIELD_NAME = lazy_pattern(r"[A-Za-z_][A-Za-z0-9_.]*")
_HEADER_CELL = lazy_pattern(r"([A-Za-z_][A-Za-z0-9_.]*)(?: \[[^\]]*\])?")
# A number, optionally followed by " <unit>" (``84522 MiB``, ``100 %``, ``0 us``). ASCII
# digits only and bounded, so "nan", "1e400", "1_000" or 5000 digits never become numbers.
_NUMBER = lazy_pattern(r"(-?[0-9]{1,18}(?:\.[0-9]{1,9})?)(?: [A-Za-z%]{1,4})?")
_HEX = lazy_pattern(r"0[xX]([0-9A-Fa-f]{1,16})")
_INDEX = lazy_pattern(r"[0-9]{1,6}")
_PID = lazy_pattern(r"[0-9]{1,10}")
_TIMESTAMP = lazy_pattern(r"[0-9]{4}/[0-9]{2}/[0-9]{2} ")

_MISSING = frozenset({"", "N/A", "ERR!"})
_BUS_ID = lazy_pattern(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_UUID = lazy_pattern(r"(?:GPU|MIG)-\S+")

# Cells nvidia-smi fills with free text (not its own): they may contain the separator and
# brackets. Extra pieces of a split row go to them, in this order of preference.
_GPU_FREE_TEXT = ("name",)
_PROCESS_FREE_TEXT = ("process_name", "gpu_name")

# What nvidia-smi prints for a field it could not read: "[" + nvmlErrorString(code) + "]",
# except NOT_SUPPORTED as "[N/A]" (``[Not Supported]`` on old drivers) and RESET_REQUIRED
# as "[GPU requires reset]" (docs/formats.md 1.4; the first nine are in the fixtures and real
# captures). The rest are NVML's other error strings as NVML bindings reproduce them
# (unverified against every driver); pynvml's own texts end in "." (normalised away).
_ERROR_TEXTS = (
    "N/A",
    "Not Supported",
    "Insufficient Permissions",
    "Function Not Found",
    "Requested functionality has been deprecated",
    "Unknown Error",
    "GPU requires reset",
    "GPU is lost",
    "Not Found",
    "Uninitialized",
    "Invalid Argument",
    "Already Initialized",
    "Insufficient Size",
    "Insufficient External Power",
    "Driver Not Loaded",
    "Timeout",
    "Interrupt Request Issue",
    "NVML Shared Library Not Found",
    "Corrupted infoROM",
    "GPU requires restart",
    "The operating system has blocked the request",
    "RM has detected an NVML/RM version mismatch",
    "In use by another client",
    "Insufficient Memory",
    "No data",
    "The requested vgpu operation is not available on target device, because ECC is enabled",
    "Insufficient Resources",
    "Frequency not supported",
    "Argument version mismatch",
    "Deprecated",
    "Not Ready",
    "GPU not found",
    "Invalid state",
    "Reset type not supported",
)
_ERROR_CELLS = frozenset(f"[{t}]".casefold() for t in _ERROR_TEXTS)
# error spellings that themselves contain the separator, as the pieces a split makes
_SPLIT_ERROR_CELLS = tuple(
    tuple(f"[{t}]".split(_SEPARATOR)) for t in _ERROR_TEXTS if _SEPARATOR in t
)
_CELL_PROBLEMS: dict[str, tuple[Health, str]] = {
    "[Unknown Error]": (Health.WARNING, "Unknown Error"),
    "[GPU requires reset]": (Health.CRITICAL, "GPU requires reset"),
    "[GPU is lost]": (Health.CRITICAL, "GPU is lost"),
}


@dataclass(frozen=True, slots=True)
class GpuParse:
    gpus: tuple[GpuSample, ...]
    skipped: int  # non-empty lines that were neither a header nor a GPU row
    header: tuple[str, ...] | None  # field names of the last header line seen, units stripped
    # GPUs listed in place of a row that could not be read (``unreadable_line``), once each
    unreadable: tuple[UnreadableGpu, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessParse:
    processes: tuple[GpuProcess, ...]
    skipped: int


@dataclass(frozen=True, slots=True)
class SmiFailure:
    kind: str
    message: str
    exit_code: int | None

    @property
    def driver(self) -> bool:
        """The driver's own verdict (a GPU lost, no driver, a version mismatch): no GPU
        data comes until someone acts, so it is the cause of the silence, not a stall."""
        return self.kind in DRIVER_FAILURES

    @property
    def final(self) -> bool:
        """No GPU data comes however often the sampler is run again: the driver's verdict
        or no nvidia-smi to run. A one-shot (``snapshot``, ``check``) says it at once
        instead of waiting out its ``--timeout``; any other failure (an exit code alone,
        a stall, a field this driver does not know) may pass, and is retried."""
        return self.driver or self.kind == "not_found"


def query_gpu_args(fields: Sequence[str] = QUERY_FIELDS, loop_ms: int | None = None) -> list[str]:
    """The argv after ``nvidia-smi`` for a CSV GPU query (``-lms N`` when ``loop_ms`` is given).

    Raises ValueError for an empty field list, a field name that is not a plain
    identifier (it ends up in a remote command line), or ``loop_ms < 1``.
    """
    if not fields or not all(_FIELD_NAME.fullmatch(f) for f in fields):
        raise ValueError(f"invalid --query-gpu field list: {list(fields)!r}")
    args = [f"--query-gpu={','.join(fields)}", _FORMAT_ARG]
    if loop_ms is not None:
        if loop_ms < 1:
            raise ValueError(f"loop_ms must be >= 1, got {loop_ms}")
        args += ["-lms", str(loop_ms)]
    return args


_HELP_FIELD = lazy_pattern(r'"([A-Za-z_][A-Za-z0-9_.]*)"')
_RENAMED = ("clocks_event_reasons.", "clocks_throttle_reasons.")  # R535 name, older name
_OLD_NAMES = {"pcie.link.gen.gpucurrent": "pcie.link.gen.current"}  # current name: older one


def fields_for_help(help_text: str, wanted: Sequence[str] = QUERY_FIELDS) -> tuple[str, ...]:
    """The query field list this nvidia-smi accepts, from its ``--help-query-gpu``: one
    field it does not know fails the whole query (``Field "..." is not a valid field to
    query.``), so a field the help does not list is left out, and ``clocks_event_reasons.*``
    (the R535 names; R535+ help lists both, ``"clocks_event_reasons.active" or
    "clocks_throttle_reasons.active"``) is asked by its older name where only that is
    listed (drivers before R535). A help text without quoted names (unfamiliar) keeps
    ``wanted``: the query then fails loudly rather than quietly dropping fields."""
    known = frozenset(_HELP_FIELD.findall(help_text))
    if not known:
        return tuple(wanted)
    out: list[str] = []
    new, old = _RENAMED
    for field in wanted:
        if field in known:
            out.append(field)
        elif field.startswith(new) and old + field[len(new) :] in known:
            out.append(old + field[len(new) :])
        elif _OLD_NAMES.get(field) in known:
            out.append(_OLD_NAMES[field])
    return tuple(out)


def compute_apps_args() -> list[str]:
    """The argv after ``nvidia-smi`` for the per-process query (PROCESS_FIELDS, no header)."""
    return [f"--query-compute-apps={','.join(PROCESS_FIELDS)}", _FORMAT_ARG]


def parse_cell(text: str) -> str | None:
    """The stripped cell text, or None for every "no value" spelling (``[...]``, N/A, ERR!, "")."""
    s = text.strip()
    if s in _MISSING or (s.startswith("[") and s.endswith("]")):
        return None
    return s


def is_error_cell(text: str) -> bool:
    """True for one of nvidia-smi's own "could not read this field" spellings
    (``[N/A]``, ``[Not Supported]``, ``[GPU is lost]``, ...; case and a final "." ignored).
    An unknown bracketed text is not one: in a name it is the name."""
    s = text.strip()
    if s.endswith(".]"):
        s = s[:-2] + "]"
    return s.casefold() in _ERROR_CELLS


def parse_free_text(text: str) -> str | None:
    """A name cell: the stripped text, or None when empty, ``N/A`` or an error spelling
    (``is_error_cell``). Brackets, commas and anything else in a real name are kept."""
    s = text.strip()
    return None if s in ("", "N/A") or is_error_cell(s) else s


def cell_problem(text: str) -> tuple[Health, str] | None:
    """Health impact of an error cell: ``[Unknown Error]`` warns, lost / reset are critical."""
    return _CELL_PROBLEMS.get(text.strip())


def _number_text(text: str) -> str | None:
    s = parse_cell(text)
    m = _NUMBER.fullmatch(s) if s is not None else None
    return m.group(1) if m else None


def _to_float(text: str) -> float | None:
    number = _number_text(text)
    return None if number is None else float(number)


def _to_int(text: str) -> int | None:
    number = _number_text(text)
    if number is None:
        return None
    whole, _, fraction = number.partition(".")
    return None if fraction.strip("0") else int(whole)  # "12.00" is 12, "12.5" is no count


def _to_hex_int(text: str) -> int | None:
    s = parse_cell(text)
    m = _HEX.fullmatch(s) if s is not None else None
    return int(m.group(1), 16) if m else _to_int(text)


def _to_yes(text: str) -> bool | None:
    """``Yes`` / ``No`` (``remapped_rows.pending``, ``retired_pages.pending``); a count
    (some drivers print one) is yes when above 0."""
    s = parse_cell(text)
    if s is None:
        return None
    if s.casefold() in ("yes", "no"):
        return s.casefold() == "yes"
    number = _to_int(s)
    return None if number is None else number > 0


def _to_enabled(text: str) -> bool | None:
    """``Enabled`` / ``Disabled`` (``mig.mode.current``); ``[N/A]`` on a board without MIG."""
    s = parse_cell(text)
    if s is None or s.casefold() not in ("enabled", "disabled"):
        return None
    return s.casefold() == "enabled"


def _to_index(text: str) -> int | None:
    s = text.strip()
    return int(s) if _INDEX.fullmatch(s) else None


_CONVERTERS = {
    "index": _to_index,
    "str": parse_cell,
    "text": parse_free_text,
    "float": _to_float,
    "int": _to_int,
    "hex": _to_hex_int,
    "yes": _to_yes,
    "enabled": _to_enabled,
}


# A GPU's name, UUID, bus id, limits and clocks repeat every second: each (kind, cell) is
# converted once and remembered with its problem (pure functions of the text; a bounded
# table, emptied when full, so it holds at most ~1000 short strings).
_CONVERTED: dict[tuple[str, str], tuple[Any, tuple[Health, str] | None]] = {}
_CONVERTED_MAX = 1024


def _convert(kind: str, cell: str) -> tuple[Any, tuple[Health, str] | None]:
    """(the cell's value as ``kind``, its ``cell_problem``)."""
    key = (kind, cell)
    try:
        return _CONVERTED[key]
    except KeyError:
        pass
    value = (_CONVERTERS[kind](cell), cell_problem(cell))
    if len(_CONVERTED) >= _CONVERTED_MAX:
        _CONVERTED.clear()
    _CONVERTED[key] = value
    return value


def _split_row(line: str, columns: Sequence[str], free_text: Sequence[str]) -> list[str] | None:
    """The cells of one row, one per column, or None when it cannot be that row.

    Split on the separator and error spellings that contain it put back together; any
    extra pieces belong to one free-text column (``free_text``, most likely first): the
    first choice that leaves every other cell well-formed (``_cell_fits``) wins, so a
    stray piece is never read as another field's value. Linear in the row's length.
    """
    pieces = _rejoin_error_cells(line.split(_SEPARATOR))
    extra = len(pieces) - len(columns)
    if extra == 0:
        return pieces
    if extra < 0:
        return None
    for column in free_text:
        if column not in columns:
            continue
        at = columns.index(column)
        end = at + extra + 1
        cells = [*pieces[:at], _SEPARATOR.join(pieces[at:end]), *pieces[end:]]
        if all(_cell_fits(c, cell) for c, cell in zip(columns, cells, strict=True) if c != column):
            return cells
    return None


_CELL_SHAPES: dict[str, re.Pattern[str]] = {
    "timestamp": lazy_pattern(r"[0-9]{4}/[0-9]{2}/[0-9]{2} \S+"),
    "uuid": _UUID,
    "gpu_uuid": _UUID,
    "pci.bus_id": _BUS_ID,
    "gpu_bus_id": _BUS_ID,
    "pstate": lazy_pattern(r"P[0-9]{1,2}"),
    "pid": _PID,
    "used_gpu_memory": _NUMBER,
}


def _cell_fits(column: str, cell: str) -> bool:
    """Whether a cell could be ``column``'s: a "no value" spelling, or its field's shape."""
    s = cell.strip()
    if parse_cell(s) is None:
        return True
    shape = _CELL_SHAPES.get(column)
    if shape is not None:
        return shape.fullmatch(s) is not None
    spec = _GPU_FIELDS.get(column)
    if spec is None or spec[1] in ("str", "text"):
        return True  # a field gpumon does not read, or free text
    return _CONVERTERS[spec[1]](s) is not None


def _rejoin_error_cells(pieces: list[str]) -> list[str]:
    if not any(p.startswith("[") and not p.endswith("]") for p in pieces):
        return pieces  # the usual row: nothing to look for
    out: list[str] = []
    i = 0
    while i < len(pieces):
        for parts in _SPLIT_ERROR_CELLS:
            n = len(parts)
            if [p.casefold() for p in pieces[i : i + n]] == [p.casefold() for p in parts]:
                out.append(_SEPARATOR.join(pieces[i : i + n]))
                i += n
                break
        else:
            out.append(pieces[i])
            i += 1
    return out


def _lines(text: str | Iterable[str]) -> Iterator[str]:
    # split("\n"), not splitlines(): a process name may contain \x1c, \x85 or \u2028.
    for chunk in (text,) if isinstance(text, str) else text:
        for line in chunk.split("\n"):
            if line.strip():
                yield line.rstrip("\r")


def _header_names(cells: Sequence[str]) -> tuple[str, ...] | None:
    """Field names if every cell looks like ``name`` or ``name [unit]``, else None."""
    names = []
    for cell in cells:
        m = _HEADER_CELL.fullmatch(cell.strip())
        if m is None:
            return None
        names.append(m.group(1))
    return tuple(names)


def parse_query_gpu(
    text: str | Iterable[str],
    fields: Sequence[str] = QUERY_FIELDS,
    minors: Mapping[str, int] | None = None,
) -> GpuParse:
    """GPU samples from ``--query-gpu`` CSV output (one string, or lines as they arrive).
    ``minors``: each GPU's device minor by ``bus_id_key`` (no ``--query-gpu`` field has
    it: the agent reads the driver's), set on the GPU at that bus.

    ``fields`` names the columns of header-less output; a header line (``--format=csv``)
    overrides it, so a capture with any field list and order parses. Units in values are
    accepted. A row split over lines (a newline in a GPU's name) is read whole again. A
    GPU listed without a readable row (``unreadable_line``, ``_unopened``) is in
    ``unreadable``, never dropped. Any other line with the wrong column count, a
    missing/non-numeric ``index`` or a non-timestamp ``timestamp`` is counted in
    ``skipped``. Never raises on bad input.
    """
    columns = [_GPU_ALIASES.get(f, f) for f in fields]
    header: tuple[str, ...] | None = None
    gpus: list[GpuSample] = []
    unreadable: dict[str, UnreadableGpu] = {}
    skipped = 0
    lines = list(_lines(text))
    at = 0
    while at < len(lines):
        line = lines[at]
        at += 1
        names = _header_names(line.split(_SEPARATOR))
        if names is not None and "index" in names:
            header = names
            columns = [_GPU_ALIASES.get(n, n) for n in names]
            continue
        row = _row(line, columns, minors)
        if row is None:  # a newline inside a name: the lines after it that are no row
            joined = line
            for end in range(at, min(at + ROW_LINES_MAX - 1, len(lines))):
                if _row(lines[end], columns) is not None:
                    break
                joined += "\n" + lines[end]
                row = _row(joined, columns, minors)
                if row is not None:
                    at = end + 1
                    break
        if row is None:
            row = unreadable_line(line, columns)
        if isinstance(row, GpuSample):
            gpus.append(row)
        elif row is not None:
            unreadable.setdefault(_identity(row), row)
        else:
            skipped += 1
    return GpuParse(
        gpus=tuple(gpus), skipped=skipped, header=header, unreadable=tuple(unreadable.values())
    )


ROW_LINES_MAX = 4  # lines one GPU row may have been split into by newlines in its name
_DEVICE_HANDLE = lazy_pattern(
    r"Unable to determine the device handle for GPU ?"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]): (?P<reason>.+)"
)
_SAID_MAX = 200


def _row(
    line: str, columns: Sequence[str], minors: Mapping[str, int] | None = None
) -> GpuSample | UnreadableGpu | None:
    cells = _split_row(line, columns, _GPU_FREE_TEXT)
    if cells is None:
        return None
    return _unopened(columns, cells) or _gpu_from_row(columns, cells, minors)


def _identity(gpu: UnreadableGpu) -> str:
    return pci_key(gpu.bus_id) or f"index {gpu.index}"


def unreadable_line(line: str, columns: Sequence[str] = QUERY_FIELDS) -> UnreadableGpu | None:
    """The GPU a line that is no row stands for, or None (Xid text, junk).

    nvidia-smi prints ``Unable to determine the device handle for GPU0000:19:00.0:
    Unknown Error`` in place of the row of a GPU whose handle NVML cannot give (older
    drivers: ``GPU 0000:19:00.0``; docs/formats.md section 3): that GPU, by its bus id.
    A row that cannot be parsed but holds a bus id cell is that GPU's row gone wrong
    (the index too, where its cell reads as one)."""
    text = line.strip()
    said = text if len(text) <= _SAID_MAX else text[:_SAID_MAX] + "…"
    handle = _DEVICE_HANDLE.match(text)
    if handle is not None:
        return UnreadableGpu(handle["bus"], None, handle["reason"].strip(), said)
    pieces = [p.strip() for p in line.split(_SEPARATOR)]
    bus = next((p for p in pieces if _BUS_ID.fullmatch(p)), None)
    if bus is None or len(pieces) < 2:
        return None
    at = columns.index("index") if "index" in columns else len(pieces)
    index = _to_index(pieces[at]) if at < len(pieces) else None
    return UnreadableGpu(bus, index, "its row does not parse", said, device=False)


# Cells that say which GPU a row is: the rest failing all alike is a device not opened.
_ROW_IDENTITY = frozenset({"timestamp", "index", "pci.bus_id"})
_NO_VALUE_CELLS = frozenset({"[n/a]", "[not supported]"})


def _unopened(columns: Sequence[str], cells: Sequence[str]) -> UnreadableGpu | None:
    """A row whose every cell but its timestamp, index and bus id is the same error: the
    device itself could not be opened (the agent's NVML row for a handle NVML refused:
    ``nvmlDeviceGetHandleByIndex`` failed), not a field. None for any other row."""
    if "uuid" not in columns and "name" not in columns:
        return None  # nothing in the row would tell a device from a field
    index = bus = None
    errors = set()
    for column, cell in zip(columns, cells, strict=True):
        if column == "index":
            index = _to_index(cell)
        elif column == "pci.bus_id":
            bus = parse_cell(cell)
        elif column in _GPU_FIELDS and column not in _ROW_IDENTITY:
            if not is_error_cell(cell):
                return None
            errors.add(cell.strip())
    if index is None or len(errors) != 1:
        return None
    (error,) = errors
    if error.casefold() in _NO_VALUE_CELLS:
        return None
    return UnreadableGpu(bus, index, error[1:-1].rstrip("."))


def unreadable_advice(gpu: UnreadableGpu) -> str:
    """What to do about a GPU that cannot be read, in the failure table's words."""
    if "GPU is lost" in gpu.reason:
        return _GPU_LOST_HINT
    target = gpu.bus_id or (str(gpu.index) if gpu.index is not None else "BUS_ID")
    return (
        "check the host's kernel log for Xid errors, then reset that GPU (nvidia-smi -r -i "
        f"{target}, with no process on it) or reboot the host"
    )


def _gpu_from_row(
    columns: Sequence[str], cells: Sequence[str], minors: Mapping[str, int] | None = None
) -> GpuSample | None:
    values: dict[str, Any] = {}
    health = Health.OK
    problems: list[str] = []
    for column, cell in zip(columns, cells, strict=True):
        spec = _GPU_FIELDS.get(column)
        if spec is None:
            continue  # a field gpumon does not use
        if column == "timestamp" and parse_cell(cell) and not _TIMESTAMP.match(cell.strip()):
            return None  # not a data row (Xid / ECC event text in a loop stream)
        attr, kind = spec
        values[attr], problem = _convert(kind, cell)
        optional = column in _HEALTH_FIELDS or column in _MODE_FIELDS or column in _ENERGY_FIELDS
        if problem is not None and not optional:  # the core cells say it
            severity, what = problem
            health = Health.worst(health, severity)
            # a lost / reset GPU fails every field: say so once, not once per column
            text = what if severity is Health.CRITICAL else f"{column}: {what}"
            if text not in problems:
                problems.append(text)
    index = values.pop("index", None)
    if index is None:
        return None
    if minors:
        values["minor"] = minors.get(bus_id_key(values.get("bus_id")) or "")
    return GpuSample(index=index, health=health, problems=tuple(problems), **values)


def parse_compute_apps(text: str | Iterable[str]) -> ProcessParse:
    """Compute processes from ``--query-compute-apps`` output, with or without header/units.

    Without a header the columns are PROCESS_FIELDS. Names containing ``", "`` survive: the
    extra pieces go to the process name (or, with ``gpu_name`` also queried, to whichever
    name leaves every other cell well-formed). ``[Not Found]`` name (container PID
    namespace) and ``[N/A]`` memory (Windows WDDM) become None; a name that merely looks
    bracketed (``[kworker/0:1]``) is kept. Rows without a numeric pid are counted in
    ``skipped``. Never raises on bad input.
    """
    columns = [_PROCESS_ALIASES.get(f, f) for f in PROCESS_FIELDS]
    processes: list[GpuProcess] = []
    skipped = 0
    for line in _lines(text):
        names = _header_names(line.split(_SEPARATOR))
        if names is not None and "pid" in names:
            columns = [_PROCESS_ALIASES.get(n, n) for n in names]
            continue
        cells = _split_row(line, columns, _PROCESS_FREE_TEXT)
        process = _process_from_row(columns, cells) if cells is not None else None
        if process is None:
            skipped += 1
        else:
            processes.append(process)
    return ProcessParse(processes=tuple(processes), skipped=skipped)


def _process_from_row(columns: Sequence[str], cells: Sequence[str]) -> GpuProcess | None:
    row = dict(zip(columns, cells, strict=True))
    pid_text = row.get("pid", "").strip()
    if not _PID.fullmatch(pid_text):
        return None
    return GpuProcess(
        pid=int(pid_text),
        name=parse_free_text(row.get("process_name", "")),
        memory_mib=_to_int(row.get("used_gpu_memory", "")),
        gpu_uuid=parse_cell(row.get("gpu_uuid", "")),
        gpu_bus_id=parse_cell(row.get("gpu_bus_id", "")),
    )


_FAILURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "driver_not_loaded",
        lazy_pattern(
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        ),
    ),
    (
        "version_mismatch",
        lazy_pattern(r"Failed to initialize NVML: Driver/library version mismatch"),
    ),
    ("no_supported_gpus", lazy_pattern(r"(?:Failed to initialize NVML: )?No supported GPUs")),
    ("nvml_unknown_error", lazy_pattern(r"Failed to initialize NVML: Unknown Error")),
    ("no_devices", lazy_pattern(r"No devices were found")),
    ("device_handle", lazy_pattern(r"Unable to determine the device handle for GPU ?[0-9A-Fa-f]")),
    ("library_not_found", lazy_pattern(r"NVIDIA-SMI couldn't find libnvidia-ml\.so")),
    ("invalid_field", lazy_pattern(r'Field "[^"]*" is not a valid field to query')),
)
_HINTS: dict[str, str] = {
    "driver_not_loaded": "The nvidia kernel module is not loaded, or the /dev/nvidia* device "
    "nodes are not passed into the container",
    "version_mismatch": "The NVIDIA user-space libraries differ from the loaded kernel module; "
    "in an LXC the container's libraries must match the host's kernel module version exactly "
    "(install the same version without the kernel module, or reboot the host after a driver "
    "upgrade)",
    "no_supported_gpus": "The installed driver supports none of the GPUs it sees",
    "nvml_unknown_error": "In a container this usually means access to /dev/nvidia* was lost "
    "(cgroup device rules reset, e.g. by systemctl daemon-reload); restart the container",
    "no_devices": "No NVIDIA GPU is visible: device nodes not passed into the container, or "
    "the GPUs are not bound to the nvidia driver",
    "device_handle": "One GPU cannot be reached and the whole nvidia-smi call fails; check the "
    "host's kernel log for Xid errors, then reset that GPU (nvidia-smi -r -i {bus}, with no "
    "process on it) or reboot the host",
    "library_not_found": "The NVIDIA user-space libraries are missing (in an LXC: install the "
    "driver's user-space part without the kernel module, then run ldconfig)",
    "invalid_field": "This driver does not know one of the queried fields, and one bad field "
    "fails the whole query",
    "not_found": "The nvidia-smi command is missing, or not on PATH, on the target",
}
# What the driver says about itself; ``other`` (an exit code alone, a stall the agent
# killed), ``invalid_field`` (our query) and ``not_found`` (no nvidia-smi) are not in it.
DRIVER_FAILURES = frozenset(
    {
        "driver_not_loaded",
        "version_mismatch",
        "no_supported_gpus",
        "nvml_unknown_error",
        "no_devices",
        "device_handle",
        "library_not_found",
    }
)
_HANDLE_BUS = lazy_pattern(r"for GPU ?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])")
_GPU_LOST_HINT = "The GPU has fallen off the bus (Xid 79); reboot the host to recover it"
_NOT_FOUND = lazy_pattern(r"nvidia-smi'?: (?:command )?not found|No such file or directory")
_EXIT_FALLBACK = {9: "driver_not_loaded", 12: "library_not_found", 127: "not_found"}
_MAX_QUOTE = 500


def classify_smi_failure(output: str, exit_code: int | None) -> SmiFailure | None:
    """What went wrong with a nvidia-smi run, or None if it did not fail recognisably.

    Known failure texts are matched at the start of a line (so process names in a good
    output cannot trigger them). Without a known text: a few exit codes (9, 12, 127) still
    classify, any other non-zero exit is ``other``, and exit 0 / unknown (None) is None.
    The message quotes the tool's first line verbatim, adds the exit code and a hint.
    """
    lines = [line.strip() for line in output.split("\n") if line.strip()]
    first = lines[0] if lines else None
    for kind, pattern in _FAILURES:
        matched = next((line for line in lines if pattern.match(line)), None)
        if matched is None:
            continue
        hint, extra = _HINTS[kind], ""
        if kind == "version_mismatch":
            extra = next((line for line in lines if line.startswith("NVML library version")), "")
        elif kind == "device_handle" and "GPU is lost" in matched:
            hint = _GPU_LOST_HINT
        elif kind == "device_handle":
            bus = _HANDLE_BUS.search(matched)
            hint = hint.format(bus=bus.group(1) if bus else "BUS_ID")
        return SmiFailure(kind, _message(first, matched, exit_code, extra, hint), exit_code)
    if exit_code is None or exit_code == 0:
        return None
    if any(_NOT_FOUND.search(line) for line in lines):
        kind = "not_found"
    else:
        kind = _EXIT_FALLBACK.get(exit_code, "other")
    return SmiFailure(kind, _message(first, first, exit_code, "", _HINTS.get(kind, "")), exit_code)


def _quote(line: str) -> str:
    return f'"{line if len(line) <= _MAX_QUOTE else line[:_MAX_QUOTE] + "…"}"'


def _message(
    first: str | None, matched: str | None, exit_code: int | None, extra: str, hint: str
) -> str:
    text = f"nvidia-smi: {_quote(first) if first else 'no output'}"
    if matched and matched != first:
        text += f" … {_quote(matched)}"
    if exit_code is not None:
        text += f" (exit {exit_code})"
    if extra:
        text += f"; {extra}"
    return f"{text}. {hint}" if hint else text


_RULER = lazy_pattern(r"#{20,}")
_BANNER = lazy_pattern(r"# ([A-Za-z0-9_-]+) :: (.+)")


def parse_real_capture(text: str) -> dict[str, str]:
    """Split a real-captures file into ``{"<phase> :: <title>": raw output}``.

    A section starts at a ruler line followed by ``# <phase> :: <title>``; the banner runs to
    the next ruler and the output from there to the next banner. Trailing blank lines (the
    separator between sections) are dropped; the file's header block is not a section.
    """
    lines = text.split("\n")
    sections: dict[str, str] = {}
    key: str | None = None
    body: list[str] = []
    i = 0
    while i < len(lines):
        banner = _BANNER.fullmatch(lines[i + 1]) if i + 1 < len(lines) else None
        if banner is not None and _RULER.fullmatch(lines[i]):
            if key is not None:
                sections[key] = _section_text(body)
            key, body = f"{banner.group(1)} :: {banner.group(2).strip()}", []
            i += 2
            while i < len(lines) and not _RULER.fullmatch(lines[i]):
                i += 1
        elif key is not None:
            body.append(lines[i])
        i += 1
    if key is not None:
        sections[key] = _section_text(body)
    return sections


def _section_text(lines: list[str]) -> str:
    text = "\n".join(lines).rstrip("\n")
    return text + "\n" if text else ""
