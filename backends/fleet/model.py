"""What the fleet view shows: one row per node, the fleet rules over it, and the sorts.

Records are frozen; a value Prometheus did not have (the metric is not exported, the
node's series went stale, the value was NaN) is None, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpumon.backends.alerts.kinds import kind_title
from gpumon.backends.fleet.queries import IDLE_MEMORY_MIB, IDLE_UTIL_PCT, IDLE_WINDOW_S
from gpumon.backends.model import Health
from gpumon.backends.parsers.xid import xid_level, xid_summary
from gpumon.backends.workloads.vllm import HUNG_AFTER_S as VLLM_HUNG_AFTER_S

STALE_AFTER_S = 180.0  # a last sample older than this is said (scrapes are 15-60 s apart)
DCGM_COLLECT_S = 30  # dcgm-exporter's default collection interval (-c 30000)


@dataclass(frozen=True, slots=True)
class Problem:
    """One fleet rule that fired on a node."""

    rule: str  # exporter-down, stale, xid, row-remap-failure, idle-allocated, gpumon-alerts,
    # vllm-wedged, vllm-kv-pressure
    severity: Health
    message: str


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node, as the latest refresh saw it."""

    node: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpus: int | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    mem_fullest: float | None = None  # the fullest GPU's used / total, 0..1
    util_mean: float | None = None
    util_max: float | None = None
    temp_max: float | None = None
    power_w: float | None = None
    xid_last: int | None = None  # the worst Xid (by the Xid table) of the last 15 min (0: none)
    xid_gpus: int | None = None  # GPUs with an Xid in the last 15 min
    xids: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))  # code: GPUs
    remap_failures: int | None = None  # GPUs whose row remapping failed
    idle_allocated: int | None = None  # GPUs > 2 GiB held at < 5 % for 10 min
    # GPU-hours held idle in the last day, from gpumon watch's accounting (None: no gpumon
    # exporter on the node)
    idle_held_gpu_hours: float | None = None
    alerts_critical: int = 0  # active gpumon alerts (gpumon watch's exporter)
    alerts_warning: int = 0
    # (severity word, kind, count) of those alerts, the most of each severity first
    alert_kinds: tuple[tuple[str, str, int], ...] = ()
    # vLLM servers (their ``instance``) wedged, with the requests they held the whole window
    vllm_wedged: tuple[tuple[str, float], ...] = ()
    # vLLM servers whose KV cache is nearly full while preempting: (instance, KV use 0..1,
    # requests preempted in the window)
    vllm_kv_pressure: tuple[tuple[str, float, float | None], ...] = ()
    last_seen: float | None = None  # the newest sample's time (Prometheus' clock)
    current: bool = True  # has series now (False: only seen earlier in the hour)
    exporter_down: bool = False  # its target's ``up`` is 0
    spark: tuple[float | None, ...] = ()  # mean utilisation, oldest first
    problems: tuple[Problem, ...] = ()

    @property
    def severity(self) -> Health:
        return Health.worst(*(p.severity for p in self.problems))

    def age(self, now: float) -> float | None:
        return None if self.last_seen is None else max(0.0, now - self.last_seen)

    def matches(self, text: str) -> bool:
        """The ``/`` filter: a substring of the node name or of a label value, or
        ``label=value`` (substring of that label's value); case-insensitive."""
        t = text.strip().lower()
        if not t:
            return True
        key, eq, want = t.partition("=")
        if eq:
            return any(k.lower() == key and want in v.lower() for k, v in self.labels.items())
        return t in self.node.lower() or any(t in v.lower() for v in self.labels.values())


def judge(
    row: NodeRow,
    now: float,
    stale_after: float = STALE_AFTER_S,
    vllm_window_s: float = VLLM_HUNG_AFTER_S,
) -> tuple[Problem, ...]:
    """The fleet rules on one node, worst first; ``vllm_window_s``: the vLLM rules' window
    (``FleetQueries.vllm_hung_after_s``), said in their words."""
    out: list[Problem] = []
    age = row.age(now)
    if row.exporter_down:
        target = row.labels.get("instance", "its target")
        out.append(Problem("exporter-down", Health.CRITICAL, f"exporter down (up 0: {target})"))
    elif not row.current:
        seen = "" if age is None else f" for {age:.0f} s"
        out.append(Problem("exporter-down", Health.CRITICAL, f"no data{seen}: exporter gone?"))
    elif age is not None and age > stale_after:
        out.append(Problem("stale", Health.WARNING, f"last sample {age:.0f} s old"))
    if row.remap_failures:
        n = row.remap_failures
        out.append(
            Problem("row-remap-failure", Health.CRITICAL, f"row-remap failure on {_gpus(n)}")
        )
    xid = _xid_problem(row)
    if xid is not None:
        out.append(xid)
    alerts = _alerts_problem(row)
    if alerts is not None:
        out.append(alerts)
    if row.vllm_wedged:
        servers = _servers(f"{i} ({n:.0f} requests)" for i, n in row.vllm_wedged)
        text = f"vLLM wedged: {servers}: no token for {vllm_window_s:.0f} s"
        out.append(Problem("vllm-wedged", Health.CRITICAL, text))
    if row.vllm_kv_pressure:
        within = f" in {vllm_window_s:.0f} s"
        servers = _servers(
            f"{i} ({usage:.0%} KV" + ("" if n is None else f", {n:.0f} preempted{within}") + ")"
            for i, usage, n in row.vllm_kv_pressure
        )
        text = f"vLLM KV cache nearly full, requests preempted: {servers}"
        out.append(Problem("vllm-kv-pressure", Health.WARNING, text))
    if row.idle_allocated:
        text = (
            f"idle but allocated: {_gpus(row.idle_allocated)} hold > {IDLE_MEMORY_MIB // 1024}"
            f" GiB at < {IDLE_UTIL_PCT:g} % for {IDLE_WINDOW_S // 60} min"
        )
        out.append(Problem("idle-allocated", Health.WARNING, text))
    out.sort(key=lambda p: -p.severity.rank)
    return tuple(out)


def _xid_problem(row: NodeRow) -> Problem | None:
    """The worst Xid of the window with the table's meaning and NVIDIA's action (the
    others named after it); None when there was none or only informational ones."""
    code = row.xid_last
    alone = set(row.xids) <= {code}  # Xid 45 with no other Xid in the window: the solo one
    level = xid_level(code, alone=alone) if row.xid_gpus and code else None
    if code is None or level is None or not level.alarming:
        return None
    gpus = row.xids.get(code, row.xid_gpus or 1)
    text = f"Xid {code} on {_gpus(gpus)} in the last 15 min: {xid_summary(code, alone=alone)}"
    others = sorted(c for c in row.xids if c != code)
    if others:
        text += "; also Xid " + ", ".join(map(str, others))
    return Problem("xid", level, text)


def _alerts_problem(row: NodeRow) -> Problem | None:
    """gpumon's own alerts on the node, the worst severity's, named first ("CUDA out of
    memory (1 critical alert)"; a third kind and more counted: "+1"); by count alone where
    the exporter's series have no kind."""
    if row.alerts_critical:
        level, count = Health.CRITICAL, row.alerts_critical
    elif row.alerts_warning:
        level, count = Health.WARNING, row.alerts_warning
    else:
        return None
    said = f"{count} {level.value} alert{'s' if count != 1 else ''}"
    names = [kind_title(kind) for sev, kind, _ in row.alert_kinds if sev == level.value]
    if names:
        more = f" +{len(names) - 2}" if len(names) > 2 else ""
        said = f"{', '.join(names[:2])}{more} ({said})"
    return Problem("gpumon-alerts", level, said)


def _servers(said: Iterable[str]) -> str:
    """The first two servers said, the others counted ("+2")."""
    items = list(said)
    more = f" +{len(items) - 2}" if len(items) > 2 else ""
    return ", ".join(items[:2]) + more


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _low(v: float | None) -> float:
    return float("inf") if v is None else -v  # descending, unknown last


SORTS: tuple[tuple[str, Callable[[NodeRow, float], tuple[object, ...]]], ...] = (
    ("trouble", lambda r, now: (-r.severity.rank, _low(r.mem_fullest), r.node)),
    ("name", lambda r, now: (r.node,)),
    ("memory", lambda r, now: (_low(r.mem_fullest), r.node)),
    ("utilisation", lambda r, now: (_low(r.util_mean), r.node)),
    ("temperature", lambda r, now: (_low(r.temp_max), r.node)),
    ("power", lambda r, now: (_low(r.power_w), r.node)),
    ("age", lambda r, now: (_low(r.age(now)), r.node)),
)
SORT_NAMES = tuple(name for name, _ in SORTS)


def sort_rows(rows: list[NodeRow], how: str, now: float) -> list[NodeRow]:
    """``rows`` in the order ``how`` names (one of SORT_NAMES): "trouble" is critical
    first, then warning, then the fullest GPU memory; the others put the largest first."""
    key = dict(SORTS)[how]
    return sorted(rows, key=lambda r: key(r, now))
