"""Pure functions from records to text cells with severity roles (glances-style).

Nothing here knows about colours or widgets: a ``Cell`` says what to print and which
role it plays (ok / warning / critical / not reported); ``palette.py`` maps roles to
colours in one place. A value the GPU did not report is the ``n/a`` cell, never 0.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gpumon.backends.alerts.health import clock_reasons, findings, pcie_finding, recovery_action
from gpumon.backends.model import (
    MIG_NOT_AVAILABLE,
    ConnState,
    GpuProcess,
    GpuSample,
    Health,
    HostSample,
    HostStatus,
    ProcessSource,
)
from gpumon.backends.untrusted import printable as _printable

TEMPERATURE_WARNING_C = 80.0
TEMPERATURE_CRITICAL_C = 90.0
POWER_OVER_LIMIT = 1.05  # drawing more than this times the limit is worth a look
NAME_WIDTH = 15


class Role(enum.StrEnum):
    """What a cell means; the palette decides how each looks."""

    NORMAL = "normal"  # plain text, no judgement
    MUTED = "muted"  # secondary information
    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    NA = "na"  # not reported


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    role: Role = Role.NORMAL


NA = Cell("n/a", Role.NA)


def health_role(health: Health) -> Role:
    """The colour of a severity (``Health.role``: a note is muted)."""
    return Role(health.role)


def memory_role(level: Health | None) -> Role:
    """The role of a memory level from the host's alert engine (``AlertEngine.memory_level``:
    its thresholds, so a row is coloured as its memory alert reads); NA when unknown."""
    return Role.NA if level is None else health_role(level)


def temperature_role(celsius: float | None) -> Role:
    if celsius is None:
        return Role.NA
    if celsius >= TEMPERATURE_CRITICAL_C:
        return Role.CRITICAL
    if celsius >= TEMPERATURE_WARNING_C:
        return Role.WARNING
    return Role.OK


_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"^NVIDIA\s+", ""),
    (r"\bGeForce\s+", ""),
    (r"\bTesla\s+", ""),
    (r"\bBlackwell\b", "Bw"),
    (r"\bServer Edition\b", ""),
    (r"\bWorkstation Edition\b", "WS"),
    (r"\bMax-Q\b", "MaxQ"),
    (r"\bGeneration\b", ""),
    (r"\bGraphics Device\b", "GPU"),
)


@functools.lru_cache(maxsize=256)  # eight GPUs of one model, drawn every second
def short_name(name: str | None, width: int = NAME_WIDTH) -> str:
    """A GPU model name that fits ``width`` cells: vendor and marketing words dropped.

    "NVIDIA RTX PRO 6000 Blackwell Server Edition" -> "RTX PRO 6000 Bw";
    "NVIDIA GeForce RTX 4080 SUPER" -> "RTX 4080 SUPER". Longer results are cut with
    "…"; ``None`` or an empty name gives "n/a". Control characters are made printable.
    """
    if not name or not name.strip():
        return "n/a"
    text = name.strip()
    for pattern, repl in _NAME_RULES:
        text = re.sub(pattern, repl, text)
    text = _printable(" ".join(text.split())) or _printable(name.strip())
    if len(text) > width:
        text = text[: max(width - 1, 0)] + "…"
    return text


def gib(mib: float) -> str:
    """MiB as GiB with one decimal: 97887 -> "95.6"."""
    return f"{mib / 1024:.1f}"


def percent(value: float) -> str:
    """Whole percent, rounded down so that "100%" only ever means full."""
    return f"{math.floor(value + 1e-9):d}%"


def duration(seconds: float) -> str:
    """A short age: "<1s", "12s", "4m05s", "2h10m"."""
    s = max(seconds, 0.0)
    if s < 1:
        return "<1s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def interval_text(seconds: float) -> str:
    """ "0.5s", "1s" (1.00003 measured from a recording), "2m00s"."""
    return f"{seconds:.3g}s" if seconds < 60 else duration(seconds)


@dataclass(frozen=True, slots=True)
class GpuCells:
    """One GPU row's cells. ``fraction`` drives the memory bar (None: no bar)."""

    index: int
    marker: Cell  # health glyph: blank when ok
    memory_role: Role  # the memory bar's colour: the level of the host's memory alert
    name: Cell
    fraction: float | None
    memory: Cell  # "82.5/95.6G"
    memory_pct: Cell  # "86%"
    util: Cell  # "99%"
    temp: Cell  # "76°C"
    power: Cell  # "589/600W"
    pstate: Cell
    sm_clock: Cell
    details: Cell  # a second line for tall rows: clocks, fan, memory temperature, ECC
    details_short: Cell  # the same without P-state and SM clock (when they have columns)
    health: Role
    problems: Cell  # why the GPU is sick; empty text when healthy


# the secondary values of a tall row's second line, by GpuSample field
DETAIL_FIELDS = (
    "pstate",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "memory_temperature_c",
    "fan_pct",
    "ecc_uncorrected",
)


def gpu_cells(
    gpu: GpuSample, memory_level: Health | None, *, reported: Collection[str] = DETAIL_FIELDS
) -> GpuCells:
    """The cells of one GPU row; ``memory_level`` is the host's alert engine's level for
    this GPU's memory (``AlertEngine.memory_level``); ``reported`` the detail fields the host
    reports at all (``reported_details``). Never raises on partial data: missing values
    are n/a."""
    fraction = gpu.memory_used_fraction
    mem_role = Role.NA if fraction is None else memory_role(memory_level)
    if gpu.mig_mode:  # its slices' memory is on their own lines, never the whole as one
        fraction, mem_role = None, Role.MUTED
        memory = Cell("MIG", Role.MUTED)
    elif gpu.memory_used_mib is None:
        memory = NA
    elif gpu.memory_total_mib:
        memory = Cell(f"{gib(gpu.memory_used_mib)}/{gib(gpu.memory_total_mib)}GiB", mem_role)
    else:
        memory = Cell(f"{gib(gpu.memory_used_mib)}GiB", Role.NORMAL)
    memory_pct = NA if fraction is None else Cell(percent(fraction * 100), mem_role)
    if gpu.mig_mode:
        memory_pct = Cell("", Role.MUTED)
    util = NA if gpu.utilization_pct is None else Cell(percent(gpu.utilization_pct))
    temp = (
        NA
        if gpu.temperature_c is None
        else Cell(f"{gpu.temperature_c:.0f}°C", temperature_role(gpu.temperature_c))
    )
    health = health_role(gpu.health)
    marker = {Role.WARNING: Cell("▲", Role.WARNING), Role.CRITICAL: Cell("✖", Role.CRITICAL)}
    problems = "; ".join(_printable(p) for p in gpu.problems)
    if health != Role.OK and not problems:
        problems = gpu.health.value
    return GpuCells(
        index=gpu.index,
        marker=marker.get(health, Cell(" ")),
        memory_role=mem_role,
        name=Cell(short_name(gpu.name)),
        fraction=fraction,
        memory=memory,
        memory_pct=memory_pct,
        util=util,
        temp=temp,
        power=power_cell(gpu.power_w, gpu.power_limit_w),
        pstate=NA if gpu.pstate is None else Cell(_printable(gpu.pstate)),
        sm_clock=NA if gpu.sm_clock_mhz is None else Cell(f"{gpu.sm_clock_mhz}MHz"),
        details=Cell(details_text(gpu, reported=reported), Role.MUTED),
        details_short=Cell(details_text(gpu, clocks=False, reported=reported), Role.MUTED),
        health=health,
        problems=Cell(problems, health),
    )


def power_cell(power_w: float | None, limit_w: float | None) -> Cell:
    """ "589/600W"; "589W" without a limit; n/a when power is not reported."""
    if power_w is None:
        return NA
    if not limit_w:
        return Cell(f"{power_w:.0f}W")
    role = Role.WARNING if power_w > limit_w * POWER_OVER_LIMIT else Role.NORMAL
    return Cell(f"{power_w:.0f}/{limit_w:.0f}W", role)


def reported_details(gpus: Iterable[GpuSample]) -> frozenset[str]:
    """The detail fields (``DETAIL_FIELDS``) that at least one of ``gpus`` reports: a field
    none of a host's GPUs reports is left out of the rows, not n/a on each of them."""
    gpus = list(gpus)
    return frozenset(f for f in DETAIL_FIELDS if any(getattr(g, f) is not None for g in gpus))


def details_text(
    gpu: GpuSample, *, clocks: bool = True, reported: Collection[str] = DETAIL_FIELDS
) -> str:
    """One line of secondary values; an unknown one says n/a, one the host never reports
    (not in ``reported``) is left out. ``clocks=False`` leaves out the P-state and SM
    clock."""

    def val(v: float | int | None, unit: str, spec: str = ".0f") -> str:
        return "n/a" if v is None else f"{v:{spec}}{unit}"

    parts = [
        ("pstate", f"{gpu.pstate or 'n/a'}"),
        ("sm_clock_mhz", f"SM {val(gpu.sm_clock_mhz, 'MHz', 'd')}"),
    ]
    parts = parts if clocks else []
    parts += [
        ("memory_clock_mhz", f"mem {val(gpu.memory_clock_mhz, 'MHz', 'd')}"),
        ("memory_temperature_c", f"mem temp {val(gpu.memory_temperature_c, '°C')}"),
        ("fan_pct", f"fan {val(gpu.fan_pct, '%')}"),
        ("ecc_uncorrected", f"ECC {val(gpu.ecc_uncorrected, '', 'd')}"),
    ]
    return _printable("  ".join(text for key, text in parts if key in reported))


def process_name(process: GpuProcess, in_container: bool) -> str:
    """The process name for display; a PID whose name is not visible says so."""
    if process.name:
        return _printable(process.name)
    return "[not visible in container]" if in_container else "[name not reported]"


def process_summary(sample: HostSample, gpu: GpuSample, in_container: bool) -> Cell:
    """ "pid 2418861 python3 82.5GiB, ..." for a tall row's third line; with host-side
    attribution "CT200 861 python3 82.5GiB, CT201 h3187442 jupyter-lab 6.0GiB"."""
    procs = sample.processes_for(gpu)
    if not procs:
        return Cell("no compute processes", Role.MUTED)
    parts = []
    for p in procs:
        name = p.short_name or process_name(p, in_container)
        mem = "" if p.memory_mib is None else f" {gib(p.memory_mib)}GiB"
        if p.source == ProcessSource.HOST:
            where = (
                "host"
                if p.container is None
                else (f"CT{p.container}" if p.container.isdigit() else p.container)
            )
            pid = str(p.pid) if p.pid is not None else f"h{p.host_pid}"
            parts.append(f"{where} {pid} {_printable(name)}{mem}")
        else:
            pid = str(p.pid) if p.pid is not None else f"h{p.host_pid}"
            parts.append(f"{pid} {_printable(name)}{mem}")
    return Cell("procs: " + ", ".join(parts), Role.MUTED)


def mig_cells(
    sample: HostSample,
    gpu: GpuSample,
    warning_pct: float,
    critical_pct: float,
    full_in: Mapping[int, float] | None = None,
) -> tuple[Cell, ...]:
    """The lines of a GPU in MIG mode under its row, one per GPU instance: "GI 5 1g.24gb
    11.7/23.4GiB 50% util n/a: 1511 python3 11.7GiB", coloured by its own memory against
    the host's thresholds, with "full in ~40 s" where its time-to-full warning applies
    (``full_in``: GPU instance id -> seconds); the not-available line where none could
    be read; () off MIG."""
    instances = sample.mig_instances(gpu)
    if instances is None:
        return ()
    if not instances:
        return (Cell(MIG_NOT_AVAILABLE, Role.WARNING),)
    out = []
    for inst in instances:
        frac = inst.memory_used_fraction
        if inst.memory_used_mib is None or not inst.memory_total_mib or frac is None:
            memory, role = "n/a", Role.NA
        else:
            memory = (
                f"{gib(inst.memory_used_mib)}/{gib(inst.memory_total_mib)}GiB {percent(frac * 100)}"
            )
            pct = frac * 100
            role = (
                Role.CRITICAL
                if pct >= critical_pct
                else Role.WARNING
                if pct >= warning_pct
                else Role.NORMAL
            )
        procs = [
            f"{p.pid if p.pid is not None else f'h{p.host_pid}'} {_printable(p.short_name or '?')}"
            + ("" if p.memory_mib is None else f" {gib(p.memory_mib)}GiB")
            for p in sample.instance_processes(inst)
        ]
        said = ", ".join(procs) if procs else "no processes"
        ttf = (full_in or {}).get(inst.gpu_instance_id)
        if ttf is not None:
            memory += f" full in ~{duration(ttf)}"
            role = Role.WARNING if role == Role.NORMAL else role
        out.append(Cell(f"{_printable(inst.name)}  {memory}  util n/a: {said}", role))
    return tuple(out)


def alert_count_text(total: int, new: int | None = None) -> str:
    """The header's alert count: "0 alerts", "1 alert", "2 alerts (1 new)", "2 alerts
    (seen)" when all are acknowledged. ``new`` None: all are new."""
    words = f"{total} alert{'s' if total != 1 else ''}"
    if new is None or not total or new == total:
        return words
    return f"{words} (seen)" if new == 0 else f"{words} ({new} new)"


# --- the host header ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderPart:
    """One piece of the header line; the lowest ``priority`` goes first when space is short."""

    text: str
    role: Role
    priority: int
    badge: bool = False  # drawn reversed, for states that must jump out (PAUSED, STALE)


_STATE_LOOK = {
    ConnState.CONNECTED: ("●", Role.OK),
    ConnState.CONNECTING: ("◌", Role.WARNING),
    ConnState.RECONNECTING: ("◌", Role.CRITICAL),
    ConnState.FAILED: ("✖", Role.CRITICAL),
    ConnState.STOPPED: ("■", Role.NA),
}


@dataclass(frozen=True, slots=True)
class HeaderInput:
    """Everything the header line shows, gathered by the caller (no clocks read here)."""

    name: str
    status: HostStatus
    age: float | None  # seconds since the sample on screen came (HostMonitor.age_s)
    now: float  # the wall clock
    stale: bool
    interval: float
    alerts: int
    paused: bool
    alert_role: Role = Role.CRITICAL
    new_alerts: int | None = None  # not yet acknowledged (None: all of them)
    replay: str | None = None  # "REPLAY 2x, 14:32:07 (45/661)": shown instead of the state
    no_data: bool = False  # connected, but the stream has gone silent (HostMonitor.no_data)
    stale_alert: Health | None = None  # the active stale_data / driver_error severity


def header_parts(h: HeaderInput) -> list[HeaderPart]:
    """The header line's parts in display order."""
    glyph, role = _STATE_LOOK[h.status.state]
    state = h.status.state.value
    if h.status.state == ConnState.RECONNECTING and h.status.attempt:
        state += f" #{h.status.attempt}"
    # Silence is said at once ("no data", a warning); the stale_data alert that follows a
    # few intervals later gives the header its colour (warning, then critical).
    stale_role = health_role(h.stale_alert) if h.stale_alert is not None else None
    if (h.no_data or stale_role) and h.status.state == ConnState.CONNECTED:
        glyph, role, state = "◌", stale_role or Role.WARNING, "no data"
    parts = [HeaderPart(_printable(h.name), Role.NORMAL, 100)]
    if h.replay is not None:
        parts.append(HeaderPart(h.replay, Role.WARNING, 99, badge=True))
    else:
        parts.append(HeaderPart(f"{glyph} {state}", role, 99))
    if (
        h.replay is None
        and h.status.next_retry_at is not None
        and h.status.state != ConnState.CONNECTED
    ):
        wait = max(h.status.next_retry_at - h.now, 0.0)
        parts.append(HeaderPart(f"retry in {duration(wait)}", Role.MUTED, 70))
    if h.paused:
        parts.append(HeaderPart("PAUSED", Role.WARNING, 95, badge=True))
    if h.age is not None:
        age = duration(h.age)
        if h.stale:
            parts.append(HeaderPart(f"stale {age}", stale_role or Role.CRITICAL, 94, badge=True))
        else:
            parts.append(HeaderPart(f"age {age}", Role.MUTED, 60))
    if h.age is not None or h.alerts:
        text = alert_count_text(h.alerts, h.new_alerts)
        parts.append(HeaderPart(text, h.alert_role if h.alerts else Role.MUTED, 80))
    parts.append(HeaderPart(f"every {interval_text(h.interval)}", Role.MUTED, 40))
    source = h.status.source.value if h.status.source else None
    if source:
        parts.append(HeaderPart(source, Role.MUTED, 30))
    if h.status.transport:
        parts.append(HeaderPart(_printable(h.status.transport), Role.MUTED, 20))
    return parts


def fit_parts(parts: list[HeaderPart], width: int, sep: int = 2) -> list[HeaderPart]:
    """``parts`` without the least important ones until they fit ``width`` cells."""
    kept = list(parts)

    def size(ps: list[HeaderPart]) -> int:
        return sum(len(p.text) + (2 if p.badge else 0) for p in ps) + sep * max(len(ps) - 1, 0)

    while len(kept) > 1 and size(kept) > width:
        kept.remove(min(kept, key=lambda p: p.priority))
    return kept


def header_error(status: HostStatus) -> Cell | None:
    """The host-level problem in words (second header line), or None."""
    if not status.error:
        return None
    role = Role.CRITICAL if status.state != ConnState.CONNECTED else Role.WARNING
    return Cell(_printable(status.error), role)


def health_facts_cell(gpu: GpuSample) -> Cell:
    """The GPU's health facts on one line (the detail view), coloured by the worst of
    what they show (``alerts.health.findings``); n/a for what the driver does not report:
    ``PCIe gen5/5 x4/16 downtrained  clocks hardware slowdown, power cap  ECC 2 unc 0 corr
    rows pending  recovery reset``."""

    def val(v: int | None) -> str:
        return "n/a" if v is None else str(v)

    pcie = f"PCIe gen{val(gpu.pcie_gen)}/{val(gpu.pcie_gen_max)} "
    pcie += f"x{val(gpu.pcie_width)}/{val(gpu.pcie_width_max)}"
    if gpu.pcie_gen is None and gpu.pcie_width is None:
        pcie = "PCIe n/a"
    elif pcie_finding(gpu) is not None:
        pcie += " downtrained"
    mask = gpu.clocks_event_reasons
    clocks = "clocks " + ("n/a" if mask is None else ", ".join(clock_reasons(mask)) or "full")
    ecc = f"ECC {val(gpu.ecc_uncorrected)} unc {val(gpu.ecc_corrected)} corr"
    if gpu.rows_failure:
        rows = "rows remap FAILED"
    elif gpu.rows_pending or gpu.pages_pending:
        rows = "rows pending" if gpu.rows_pending else "pages pending"
    elif gpu.rows_pending is None and gpu.pages_pending is None:
        rows = "rows n/a"
    else:
        rows = "rows ok"
    recovery = f"recovery {recovery_action(gpu) or 'n/a'}"
    found = findings(gpu)
    level = Health.worst(Health.OK, *(f.severity for f in found))
    # NVLink is not read (the RTX PRO 6000 has none): the doctor and the JSON say n/a
    text = "  ".join((pcie, clocks, ecc, rows, recovery))
    return Cell(_printable(text), health_role(level) if found else Role.MUTED)
