"""``gpumon fleet demo``: a simulated fleet of 50 nodes, with no Prometheus and no network.

The demo answers the fleet's own fixed query set (``FleetQueries``) in-process, with what
Prometheus would answer over dcgm-exporter's series of a simulated GPU table: one value
per node for the aggregates, one series per GPU and Xid code for the Xid query, the
utilisation range for the sparkline, the per-GPU series of the drill-down. ``FleetSource``
takes it as its client, so the rows are built, judged and sorted by the same code as a
real fleet's (``source._rows``, ``model.judge``): only the answers are simulated, as the
host demo simulates only nvidia-smi. A fake Prometheus over HTTP would add a server
process and a port to a command that must work anywhere, and test nothing the fleet's
system tests (a real Prometheus scraping a dcgm-exporter double) do not already.

The fleet, the same on every machine (seeded; values move with the clock): 50 nodes of
8 H100s, most training, some idle; ``DEMO_XID_NODE`` had an Xid 79 (fallen off the bus)
on GPU 3 within the last minutes; ``DEMO_IDLE_NODE`` holds 30 GiB on GPU 5 at 0 % (the
idle-allocated rule); ``DEMO_HOT_NODES`` run full and hot, each with a gpumon alert
(``gpumon_alerts_active`` of ``gpumon watch``'s exporter) firing.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.fleet.prom import PrometheusError, QueryStats, Series
from gpumon.backends.fleet.queries import (
    FB_FREE,
    FB_USED,
    GPU_TEMP,
    GPU_UTIL,
    POWER,
    ROW_REMAP_FAILURE,
    FleetQueries,
)
from gpumon.backends.fleet.source import FleetSource

__all__ = [
    "DEMO_FLEET",
    "DEMO_HOT_NODES",
    "DEMO_IDLE_NODE",
    "DEMO_NODES",
    "DEMO_XID_NODE",
    "SimulatedPrometheus",
    "demo_source",
]

DEMO_NODES = 50
GPUS_PER_NODE = 8
MODEL = "NVIDIA H100 80GB HBM3"
TOTAL_MIB = 81559.0  # what an H100 80GB reports as used + free + reserved
RESERVED_MIB = 530.0
DEMO_XID_NODE = "gpu-node-17"
XID_GPU, XID_CODE = 3, 79
XID_AGO_S = 240.0  # the Xid happened 4 minutes before the demo starts
DEMO_IDLE_NODE = "gpu-node-08"
IDLE_GPU, IDLE_HELD_MIB = 5, 30720.0
DEMO_HOT_NODES = ("gpu-node-23", "gpu-node-41")
IDLE_NODES = frozenset(f"gpu-node-{i:02d}" for i in (4, 12, 29, 33, 46))  # no job: 0 MiB
SCRAPE_S = 15.0
SEED = 26
DEMO_FLEET = FleetConfig(
    name="demo",
    prometheus="simulated (no network)",
    refresh=5.0,
    source="built in: gpumon fleet demo",
)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One simulated GPU at one moment, in dcgm-exporter's units (MiB, %, °C, W)."""

    used: float
    free: float
    util: float
    temp: float
    power: float
    xid: int  # DCGM_FI_DEV_XID_ERRORS: the last Xid's code, kept by the exporter (0: none)


def node_names() -> list[str]:
    return [f"gpu-node-{i:02d}" for i in range(1, DEMO_NODES + 1)]


class SimulatedFleet:
    """The simulated GPU table: each node's GPUs at any time ``t`` (deterministic)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.nodes = node_names()
        rng = random.Random(SEED)
        # Per GPU: its job's memory share, utilisation level and a phase for the wave.
        self._base = {
            (n, g): (rng.uniform(0.62, 0.86), rng.uniform(78.0, 97.0), rng.uniform(0, 6.28))
            for n in self.nodes
            for g in range(GPUS_PER_NODE)
        }

    def gpu(self, node: str, gpu: int, t: float) -> GpuSample:
        share, level, phase = self._base[(node, gpu)]
        wave = math.sin((t - self.start) / 40.0 + phase)
        capacity = TOTAL_MIB - RESERVED_MIB
        xid = XID_CODE if node == DEMO_XID_NODE and gpu == XID_GPU else 0
        if node in IDLE_NODES or xid:  # no job; or fell off the bus: nothing runs since
            used, util, temp, power = 0.0, 0.0, 31.0 + gpu % 3, 70.0
        elif node == DEMO_IDLE_NODE and gpu == IDLE_GPU:
            used, util, temp, power = IDLE_HELD_MIB, 0.0, 36.0, 118.0  # a notebook's tensors
        elif node in DEMO_HOT_NODES:
            used = capacity - 180.0 - 40.0 * (1 + wave)  # 99.5 % full
            util, temp = 99.0, 86.0 + 2.0 * (1 + wave) + gpu % 2
            power = 690.0 + 5.0 * wave
        else:
            used = capacity * share + 800.0 * wave
            util = max(0.0, min(100.0, level + 3.0 * wave))
            temp = 55.0 + util / 5.0 + gpu % 3
            power = 180.0 + 5.0 * util
        used = float(round(used))
        return GpuSample(used, capacity - used, util, temp, power, xid)

    def xid_new(self, node: str, gpu: int, t: float, window_s: float) -> int:
        """The Xid that happened on the GPU in the ``window_s`` before ``t`` (0: none):
        the gauge changed from 0 to its code ``XID_AGO_S`` before the demo started."""
        happened = self.start - XID_AGO_S
        in_window = happened <= t <= happened + window_s
        return self.gpu(node, gpu, t).xid if in_window else 0


def _one(labels: dict[str, str], t: float, value: float) -> Series:
    return Series(labels, ((t, value),))


class SimulatedPrometheus:
    """Answers the ``FleetQueries`` of one fleet as Prometheus would over the simulated
    GPU table; any other expression is an error (``bad_data``), as a query the demo does
    not know must not pass for an answer. The ``query`` / ``query_range`` / ``take_stats``
    / ``close`` of ``PrometheusClient``, with no network."""

    def __init__(self, queries: FleetQueries, clock: Callable[[], float] = time.time) -> None:
        self.queries = queries
        self.clock = clock
        self.fleet = SimulatedFleet(clock())
        self._names = {expr: name for name, expr in queries.instant().items()}
        self._node_exprs: dict[str, tuple[str, str]] = {}
        for node in self.fleet.nodes:
            for part, expr in queries.node_gpus(node).items():
                self._node_exprs[expr] = (node, part)
        self.stats = QueryStats()

    async def close(self) -> None:
        return None

    def take_stats(self) -> QueryStats:
        out, self.stats = self.stats, QueryStats()
        return out

    async def query(self, expr: str, at: float | None = None) -> list[Series]:
        t = self.clock() if at is None else at
        self.stats.requests += 1
        name = self._names.get(expr)
        if name is not None:
            return self._instant(name, t)
        if expr in self._node_exprs:
            node, part = self._node_exprs[expr]
            return self._node(node, part, t)
        raise PrometheusError(
            "the simulated fleet answers only the fleet's own queries", status=400, kind="bad_data"
        )

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        self.stats.requests += 1
        if expr != self.queries.spark():
            raise PrometheusError(
                "the simulated fleet answers only the fleet's own queries",
                status=400,
                kind="bad_data",
            )
        times = [start + i * step for i in range(int((end - start) / step + 1e-9) + 1)]
        return [
            Series({"node": node}, tuple((t, self._util_mean(node, t)) for t in times))
            for node in self.fleet.nodes
        ]

    def _seen(self, node: str, t: float) -> float:
        """The newest sample's time: the last scrape, staggered by node."""
        offset = (int(node.rsplit("-", 1)[1]) * 7) % SCRAPE_S
        return t - ((t - offset) % SCRAPE_S)

    def _util_mean(self, node: str, t: float) -> float:
        return sum(self.fleet.gpu(node, g, t).util for g in range(GPUS_PER_NODE)) / GPUS_PER_NODE

    def _instant(self, name: str, t: float) -> list[Series]:
        fleet = self.fleet
        if name == "down" or name.startswith("vllm_"):
            return []  # every exporter is up; no vLLM server in the demo's Prometheus
        if name == "alerts":
            # gpumon watch on the hot nodes: the first has a critical alert (a CUDA OOM),
            # the other a warning (its memory filling up)
            alerts = (
                ("critical", "cuda_oom"),
                *[("warning", "time_to_full")] * (len(DEMO_HOT_NODES) - 1),
            )
            return [
                _one({"host": n, "severity": sev, "kind": kind}, t, 1.0)
                for n, (sev, kind) in zip(DEMO_HOT_NODES, alerts, strict=True)
            ]
        if name == "idle_held":
            # gpumon watch's accounting on the hot nodes and the idle one: the idle node's
            # GPUs held idle 6 GPU-hours of the last day
            held = {n: 1800.0 for n in DEMO_HOT_NODES} | {DEMO_IDLE_NODE: 6 * 3600.0}
            return [_one({"host": n}, t, v) for n, v in held.items()]
        if name == "xids":
            return [s for node in fleet.nodes for s in self._node(node, "xid", t)]
        out: list[Series] = []
        for node in fleet.nodes:
            if name == "known":
                labels = {
                    "node": node,
                    "instance": f"{node}:9400",
                    "job": "dcgm-exporter",
                    "modelName": MODEL,
                }
                out.append(_one(labels, t, 1.0))
                continue
            gpus = [fleet.gpu(node, g, t) for g in range(GPUS_PER_NODE)]
            value = _aggregate(name, gpus, self._seen(node, t), node)
            out.append(_one({"node": node}, t, value))
        return out

    def _node(self, node: str, part: str, t: float) -> list[Series]:
        out: list[Series] = []
        for g in range(GPUS_PER_NODE):
            labels = {"node": node, "gpu": str(g), "UUID": _uuid(node, g), "modelName": MODEL}
            if part == "seen":
                out.append(_one({"node": node, "gpu": str(g)}, t, self._seen(node, t)))
            elif part == "xid":
                code = self.fleet.xid_new(node, g, t, self.queries.xid_window_s)
                if code:
                    out.append(_one({"node": node, "gpu": str(g), "xid": str(code)}, t, 1.0))
            else:
                s = self.fleet.gpu(node, g, t)
                values = {
                    FB_USED: s.used,
                    FB_FREE: s.free,
                    GPU_UTIL: s.util,
                    GPU_TEMP: s.temp,
                    POWER: s.power,
                    ROW_REMAP_FAILURE: 0.0,
                }
                out += [_one({**labels, "__name__": k}, t, v) for k, v in values.items()]
        return out


def _aggregate(name: str, gpus: list[GpuSample], seen: float, node: str) -> float:
    """One node's value of the instant query ``name`` (FleetQueries.instant's meaning)."""
    if name == "gpus":
        return float(len(gpus))
    if name == "mem_used":
        return sum(g.used for g in gpus)
    if name == "mem_total":
        return sum(g.used + g.free + RESERVED_MIB for g in gpus)
    if name == "mem_fullest":
        return max(g.used / (g.used + g.free) for g in gpus)
    if name == "util_mean":
        return sum(g.util for g in gpus) / len(gpus)
    if name == "util_max":
        return max(g.util for g in gpus)
    if name == "temp_max":
        return max(g.temp for g in gpus)
    if name == "power":
        return sum(g.power for g in gpus)
    if name == "remap_failures":
        return 0.0
    if name == "idle_allocated":
        return float(node == DEMO_IDLE_NODE)  # the idle-held rule's whole window
    if name in ("last_seen", "seen"):
        return seen
    raise PrometheusError(f"the simulated fleet has no answer for {name}", kind="bad_data")


def _uuid(node: str, gpu: int) -> str:
    n = int(node.rsplit("-", 1)[1])
    return f"GPU-5e1a{n:04x}-{gpu:04x}-4d00-9d00-00000000{n:02d}{gpu:02d}"


def demo_source(clock: Callable[[], float] = time.time) -> FleetSource:
    """The demo fleet's source: ``FleetSource`` over the simulated answers."""
    queries = FleetQueries(DEMO_FLEET.selector, DEMO_FLEET.node_labels)
    client = SimulatedPrometheus(queries, clock)
    return FleetSource(DEMO_FLEET, client=client, clock=clock, queries=queries)
