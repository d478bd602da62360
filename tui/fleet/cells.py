"""Fleet rows as cells: pure functions from a ``NodeRow`` to text with a severity role, and
the columns of the fleet table (what fits in 80 columns, more on a wider screen)."""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.fleet.model import NodeRow
from gpumon.backends.model import Health
from gpumon.backends.parsers.xid import xid_level
from gpumon.backends.untrusted import printable
from gpumon.tui.views.gpu_cells import NA, Cell, Role, duration, health_role, temperature_role

_RULES = AlertRules()  # the dashboard's memory thresholds colour the fleet's memory too


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    width: int  # 0: the rest of the line
    right: bool = True
    drop: int = 0  # given up first (1), second (2)... when the line is narrow; 0: kept


COLUMNS: tuple[Column, ...] = (
    Column("state", "", 1, right=False),
    Column("node", "NODE", 14, right=False),
    Column("gpus", "GPU", 3),
    Column("memory", "MEM GiB", 9),
    Column("fullest", "MAX%", 4),
    Column("util", "UTIL", 7),
    Column("temp", "TEMP", 4),
    Column("power", "POWER", 5, drop=5),
    Column("xid", "XID", 3, drop=4),
    Column("remap", "RMP", 3, drop=3),
    Column("alerts", "ALRT", 4, drop=2),
    Column("idle", "IDLE h", 6, drop=1),
    Column("age", "AGE", 5),
    Column("spark", "UTIL 30 min", 20, right=False, drop=1),
    Column("problem", "PROBLEM", 0, right=False),
)
SPARK_COLUMN = next(c for c in COLUMNS if c.key == "spark")
PROBLEM_MIN = 20  # columns give way (XID, RMP and ALRT are in the problem text too)


def columns_for(width: int) -> tuple[Column, ...]:
    """The columns that fit ``width``: optional ones are dropped, in their order, until
    the problem text has PROBLEM_MIN cells (on 80 columns the problem matters more)."""
    columns = list(COLUMNS)
    for rank in sorted({c.drop for c in COLUMNS if c.drop}):
        if width - sum(c.width + 1 for c in columns if c.width) >= PROBLEM_MIN:
            break
        columns = [c for c in columns if c.drop != rank]
    return tuple(columns)


def memory_role(fraction: float | None) -> Role:
    if fraction is None:
        return Role.NA
    pct = 100 * fraction
    if pct >= _RULES.memory_critical_pct:
        return Role.CRITICAL
    return Role.WARNING if pct >= _RULES.memory_warning_pct else Role.OK


def _num(v: float | None, spec: str = ".0f", unit: str = "") -> Cell:
    return NA if v is None else Cell(f"{v:{spec}}{unit}")


def row_cells(row: NodeRow, now: float) -> dict[str, Cell]:
    """Every column's cell for ``row`` (the sparkline is drawn apart, from ``row.spark``)."""
    sev = row.severity
    role = health_role(sev)
    mark = {Health.CRITICAL: "!", Health.WARNING: "~"}.get(sev, " ")
    age = row.age(now)
    if row.mem_used_mib is None or row.mem_total_mib is None:
        memory = NA
    else:
        memory = Cell(f"{row.mem_used_mib / 1024:.0f}/{row.mem_total_mib / 1024:.0f}")
    full = row.mem_fullest
    fullest = NA if full is None else Cell(f"{100 * full:.0f}", memory_role(full))
    if row.util_mean is None or row.util_max is None:
        util = NA
    else:
        util = Cell(f"{row.util_mean:.0f}/{row.util_max:.0f}")
    temp = (
        NA if row.temp_max is None else Cell(f"{row.temp_max:.0f}", temperature_role(row.temp_max))
    )
    if row.xid_gpus is None:
        xid = NA
    elif row.xid_gpus and row.xid_last:
        xid = Cell(str(row.xid_last), xid_role(row.xid_last))
    else:
        xid = Cell("-", Role.MUTED)
    if row.remap_failures is None:
        remap = NA
    else:
        remap = (
            Cell(str(row.remap_failures), Role.CRITICAL)
            if row.remap_failures
            else Cell("-", Role.MUTED)
        )
    if row.alerts_critical:
        alerts = Cell(str(row.alerts_critical + row.alerts_warning), Role.CRITICAL)
    elif row.alerts_warning:
        alerts = Cell(str(row.alerts_warning), Role.WARNING)
    else:
        alerts = Cell("-", Role.MUTED)
    stale = any(p.rule in ("stale", "exporter-down") for p in row.problems)
    age_cell = NA if age is None else Cell(duration(age), Role.WARNING if stale else Role.MUTED)
    problem = row.problems[0].message if row.problems else ""
    more = f" (+{len(row.problems) - 1})" if len(row.problems) > 1 else ""
    return {
        "state": Cell(mark, role),
        "node": Cell(printable(row.node), role if sev is not Health.OK else Role.NORMAL),
        "gpus": _num(row.gpus, "d") if row.gpus is not None else NA,
        "memory": memory,
        "fullest": fullest,
        "util": util,
        "temp": temp,
        "power": _num(row.power_w, ".0f"),
        "xid": xid,
        "remap": remap,
        "alerts": alerts,
        "idle": _num(row.idle_held_gpu_hours, ".1f"),
        "age": age_cell,
        "problem": Cell(problem + more, role) if problem else Cell(""),
    }


def fit(text: str, width: int, right: bool) -> str:
    """``text`` in exactly ``width`` cells: cut with "…", padded left or right."""
    if width <= 0:
        return ""
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


def xid_role(code: int) -> Role:
    """The Xid table's level as a colour: critical, warning, or muted (informational)."""
    return health_role(xid_level(code))
