"""One fleet's data: each refresh runs the fixed query set at once and builds the node rows.

A refresh never leaves the caller with nothing: when Prometheus cannot be reached, or a
query fails, the snapshot says so (``error``) and keeps the last rows it had (their ages
grow, so they read as stale); queries that did answer still fill their columns.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.config.load import ConfigError
from gpumon.backends.config.schema import Invalid
from gpumon.backends.fleet.model import NodeRow, judge
from gpumon.backends.fleet.prom import (
    PrometheusClient,
    PrometheusError,
    PrometheusUnreachable,
    QueryClient,
    QueryStats,
    Series,
    finite,
)
from gpumon.backends.fleet.queries import SPARK_WINDOW_S, FleetQueries
from gpumon.backends.parsers.xid import worst_xid

SPARK_COLUMNS = 20
MIN_STEP_S = 15.0
LABELS_KEPT = ("instance", "job", "modelName")


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """The fleet at one refresh. ``error`` says why data is missing or old (None: all
    queries answered); ``unreachable`` that no query got an answer."""

    fleet: str
    prometheus: str
    taken_at: float  # this machine's clock, when the refresh finished
    rows: tuple[NodeRow, ...] = ()
    error: str | None = None
    unreachable: bool = False
    error_since: float | None = None
    warnings: tuple[str, ...] = ()
    stats: QueryStats = field(default_factory=QueryStats)
    refresh_s: float = 0.0  # wall time of the refresh (queries at once)
    data_at: float | None = None  # when the rows were last built from answers


@dataclass(frozen=True, slots=True)
class GpuLine:
    """One GPU of a node, from Prometheus (the drill-down without SSH)."""

    gpu: str
    uuid: str | None
    model: str | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    util: float | None
    temp: float | None
    power_w: float | None
    xid_last: int | None
    remap_failure: bool | None
    last_seen: float | None


def _by_node(series: list[Series]) -> dict[str, float | None]:
    return {s.labels["node"]: finite(s.value) for s in series if s.labels.get("node")}


def _xid_code(s: Series) -> int | None:
    text = s.labels.get("xid", "")
    return int(float(text)) if text.replace(".", "", 1).isdigit() else None


def _gpus_per_code(gpus: Mapping[str, set[int]]) -> dict[int, int]:
    """``{gpu: codes}`` -> ``{code: GPUs with it}``."""
    out: dict[int, int] = defaultdict(int)
    for codes in gpus.values():
        for code in codes:
            out[code] += 1
    return dict(out)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


class FleetSource:
    """Refreshes one fleet. ``spark_columns`` sets the sparkline's points (the step of its
    range query is the window divided by them)."""

    def __init__(
        self,
        fleet: FleetConfig,
        *,
        client: QueryClient | None = None,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
        queries: FleetQueries | None = None,
    ) -> None:
        self.fleet = fleet
        self.queries = queries or FleetQueries(fleet.selector, fleet.node_labels)
        if client is None:
            try:
                headers, basic = fleet.auth_headers(env), fleet.basic_credentials(env)
            except Invalid as e:
                key = ".".join(("fleet", fleet.name, *e.path))
                raise ConfigError(e.problem, source=fleet.source or None, key=key) from None
            client = PrometheusClient(
                fleet.prometheus, headers=headers, basic_auth=basic, timeout=fleet.timeout
            )
        self.client: QueryClient = client
        self.clock = clock
        self.spark_columns = SPARK_COLUMNS
        self.last: FleetSnapshot | None = None
        self._error_since: float | None = None
        # Each node's newest sample time seen by this source: a node whose series went
        # stale keeps its exact last time (the hour's subquery has 5 min steps).
        self._seen: dict[str, float] = {}
        # vLLM servers of the last refresh with a problem on no node of the fleet
        self._unplaced: tuple[str, ...] = ()

    async def close(self) -> None:
        await self.client.close()

    async def refresh(self) -> FleetSnapshot:
        """Run the query set once; returns (and keeps as ``last``) the new snapshot."""
        started = time.perf_counter()
        now = self.clock()
        exprs = self.queries.instant()
        step = max(MIN_STEP_S, SPARK_WINDOW_S / max(1, self.spark_columns))
        start = now - step * (self.spark_columns - 1)
        calls = [self.client.query(e, now) for e in exprs.values()]
        calls.append(self.client.query_range(self.queries.spark(), start, now, step))
        answers = await asyncio.gather(*calls, return_exceptions=True)
        stats = self.client.take_stats()
        results: dict[str, list[Series]] = {}
        errors: list[BaseException] = []
        for name, answer in zip([*exprs, "spark"], answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, PrometheusError):
                    raise answer
                errors.append(answer)
            else:
                results[name] = answer
        elapsed = time.perf_counter() - started
        done = self.clock()
        unreachable = bool(errors) and all(isinstance(e, PrometheusUnreachable) for e in errors)
        if errors:
            self._error_since = self._error_since or done
        else:
            self._error_since = None
        error = None
        if errors:
            failed = len(errors)
            first = str(errors[0])
            error = first if unreachable else f"{failed} of {len(answers)} queries failed: {first}"
        previous = self.last
        if unreachable or not results:
            rows = previous.rows if previous is not None else ()
            data_at = previous.data_at if previous is not None else None
        else:
            # Off the event loop (1,000 nodes: a few tens of ms of Python).
            rows = await asyncio.to_thread(self._rows, results, now, step, start)
            data_at = done
        snap = FleetSnapshot(
            fleet=self.fleet.name,
            prometheus=self.fleet.prometheus,
            taken_at=done,
            rows=rows,
            error=error,
            unreachable=unreachable,
            error_since=self._error_since,
            warnings=tuple(dict.fromkeys((*stats.warnings, *self._unplaced))),
            stats=stats,
            refresh_s=elapsed,
            data_at=data_at,
        )
        self.last = snap
        return snap

    def _rows(
        self, results: Mapping[str, list[Series]], now: float, step: float, start: float
    ) -> tuple[NodeRow, ...]:
        col = {name: _by_node(results.get(name, [])) for name in self.queries.instant()}
        labels: dict[str, dict[str, str]] = {}
        for s in results.get("known", []):
            node = s.labels.get("node")
            if node:
                labels.setdefault(node, {}).update(
                    {k: s.labels[k] for k in LABELS_KEPT if s.labels.get(k)}
                )
        seen_before = col["seen"]
        for node, t in col["last_seen"].items():
            if t is not None:
                self._seen[node] = t
        down = {(s.labels.get("job"), s.labels.get("instance")) for s in results.get("down", [])}
        alerts: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        kinds: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
        for s in results.get("alerts", []):
            host, sev = s.labels.get("host"), s.labels.get("severity", "")
            count = finite(s.value) or 0.0
            if host:
                alerts[host][sev] += count
                if s.labels.get("kind") and count:
                    kinds[host].append((sev, s.labels["kind"], int(count)))
        idle_held = {
            s.labels["host"]: (finite(s.value) or 0.0) / 3600
            for s in results.get("idle_held", [])
            if s.labels.get("host")
        }
        xid_gpus: dict[str, dict[str, set[int]]] = defaultdict(dict)  # node: {gpu: codes}
        for s in results.get("xids", []):
            node, code = s.labels.get("node"), _xid_code(s)
            if node and code:
                xid_gpus[node].setdefault(s.labels.get("gpu", "?"), set()).add(code)
        xids = {node: _gpus_per_code(gpus) for node, gpus in xid_gpus.items()}
        spark: dict[str, dict[int, float | None]] = {}
        for s in results.get("spark", []):
            node = s.labels.get("node")
            if node:
                spark[node] = {round((t - start) / step): finite(v) for t, v in s.points}
        names = set(col["gpus"]) | set(labels) | set(col["last_seen"])
        wedged, pressure = self._vllm(results, names, labels)
        # Which nodes have series now: from the newest-sample query, else (it failed) from
        # the GPU count, else unknown: a failed query must not make every node "down".
        if "last_seen" in results:
            current = set(col["last_seen"])
        elif "gpus" in results:
            current = set(col["gpus"])
        else:
            current = names
        self._seen = {n: t for n, t in self._seen.items() if n in names}  # the hour's nodes
        rows: list[NodeRow] = []
        for node in names:
            node_labels = labels.get(node, {})
            target = (node_labels.get("job"), node_labels.get("instance"))
            points = spark.get(node, {})
            last = col["last_seen"].get(node)
            before = self._seen.get(node, seen_before.get(node))
            row = NodeRow(
                node=node,
                labels=MappingProxyType(node_labels),
                gpus=_int(col["gpus"].get(node)),
                mem_used_mib=col["mem_used"].get(node),
                mem_total_mib=col["mem_total"].get(node),
                mem_fullest=col["mem_fullest"].get(node),
                util_mean=col["util_mean"].get(node),
                util_max=col["util_max"].get(node),
                temp_max=col["temp_max"].get(node),
                power_w=col["power"].get(node),
                xid_last=(worst_xid(xids.get(node, {})) or 0) if "xids" in results else None,
                xid_gpus=len(xid_gpus.get(node, {})) if "xids" in results else None,
                xids=MappingProxyType(xids.get(node, {})),
                remap_failures=_int(col["remap_failures"].get(node)),
                idle_allocated=_int(col["idle_allocated"].get(node)),
                idle_held_gpu_hours=idle_held.get(node),
                alerts_critical=int(alerts.get(node, {}).get("critical", 0)),
                alerts_warning=int(alerts.get(node, {}).get("warning", 0)),
                alert_kinds=tuple(sorted(kinds.get(node, []), key=lambda k: (k[0], -k[2], k[1]))),
                last_seen=last if last is not None else before,
                current=node in current,
                exporter_down=target[1] is not None and target in down,
                spark=tuple(points.get(i) for i in range(self.spark_columns)),
                vllm_wedged=tuple(sorted(wedged.get(node, []))),
                vllm_kv_pressure=tuple(sorted(pressure.get(node, []))),
            )
            window = self.queries.vllm_hung_after_s
            rows.append(replace(row, problems=judge(row, now, vllm_window_s=window)))
        return tuple(rows)

    def _vllm(
        self,
        results: Mapping[str, list[Series]],
        names: set[str],
        labels: Mapping[str, Mapping[str, str]],
    ) -> tuple[
        dict[str, list[tuple[str, float]]], dict[str, list[tuple[str, float, float | None]]]
    ]:
        """The vLLM rules' servers by node: (wedged: instance, requests), (KV pressure:
        instance, KV use, preempted). A server's series name their node by the fleet's
        node labels; one without them (its ``instance``, ``host:8000``, is the node
        then) goes to the node whose name, or whose own ``instance``'s host, is that
        host. One that matches no node is said in the snapshot's warnings."""
        hosts: dict[str, list[str]] = defaultdict(list)
        for node in names:
            hosts[node].append(node)
            target = labels.get(node, {}).get("instance")
            if target:
                hosts[target.rpartition(":")[0] or target].append(node)
        unplaced: list[str] = []

        def place(s: Series, rule: str) -> str | None:
            node, instance = s.labels.get("node", ""), s.labels.get("instance", "?")
            if node in names:
                return node
            found = set(hosts.get(instance.rpartition(":")[0] or instance, []))
            if len(found) == 1:
                return found.pop()
            unplaced.append(
                f"vLLM {instance} {rule}, on no node of the fleet: give its scrape job the "
                "node's host label"
            )
            return None

        preempted = {
            (s.labels.get("node"), s.labels.get("instance")): finite(s.value)
            for s in results.get("vllm_preempted", [])
        }
        wedged: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for s in results.get("vllm_wedged", []):
            at, requests = place(s, "wedged"), finite(s.value)
            if at is not None and requests is not None:
                wedged[at].append((s.labels.get("instance", "?"), requests))
        pressure: dict[str, list[tuple[str, float, float | None]]] = defaultdict(list)
        for s in results.get("vllm_kv_pressure", []):
            at, usage = place(s, "KV cache nearly full, preempting"), finite(s.value)
            if at is not None and usage is not None:
                key = (s.labels.get("node"), s.labels.get("instance"))
                pressure[at].append((s.labels.get("instance", "?"), usage, preempted.get(key)))
        self._unplaced = tuple(unplaced)
        return wedged, pressure

    async def node_gpus(self, node: str) -> list[GpuLine]:
        """The GPUs of ``node`` from Prometheus alone, by index. Raises PrometheusError."""
        exprs = self.queries.node_gpus(node)
        now_s, xid_s, seen_s = await asyncio.gather(*(self.client.query(e) for e in exprs.values()))
        self.client.take_stats()
        by_gpu: dict[str, dict[str, float | None]] = defaultdict(dict)
        info: dict[str, dict[str, str]] = defaultdict(dict)
        for s in now_s:
            gpu = s.labels.get("gpu", "?")
            name = s.labels.get("__name__", "").removeprefix("DCGM_FI_DEV_")
            by_gpu[gpu][name] = finite(s.value)
            for k in ("UUID", "modelName"):
                if k in s.labels:
                    info[gpu][k] = s.labels[k]
        codes: dict[str, list[int]] = defaultdict(list)  # per GPU, the Xids of the window
        for s in xid_s:
            code = _xid_code(s)
            if code:
                codes[s.labels.get("gpu", "?")].append(code)
        for s in seen_s:
            by_gpu[s.labels.get("gpu", "?")]["SEEN"] = finite(s.value)
        out = []
        for gpu, v in by_gpu.items():
            used, free = v.get("FB_USED"), v.get("FB_FREE")
            failure = v.get("ROW_REMAP_FAILURE")
            out.append(
                GpuLine(
                    gpu=gpu,
                    uuid=info[gpu].get("UUID"),
                    model=info[gpu].get("modelName"),
                    mem_used_mib=used,
                    mem_total_mib=None if used is None or free is None else used + free,
                    util=v.get("GPU_UTIL"),
                    temp=v.get("GPU_TEMP"),
                    power_w=v.get("POWER_USAGE"),
                    xid_last=worst_xid(codes.get(gpu, ())) or 0,
                    remap_failure=None if failure is None else failure > 0,
                    last_seen=v.get("SEEN"),
                )
            )
        out.sort(key=lambda g: (len(g.gpu), g.gpu))
        return out
