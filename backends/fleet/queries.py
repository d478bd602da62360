"""The fleet's PromQL: a fixed, small set of aggregated queries per refresh, by node.

Every expression names the node the same way: a ``node`` label set from the first
present of the configured labels (default ``Hostname``, ``hostname``, ``instance``), with
the fleet's ``selector`` on every metric. ``label_replace`` with ``(.+)`` leaves a series
alone when the source label is absent, so applying the labels lowest priority first makes
the first present one win.

Metric names are dcgm-exporter's (``etc/default-counters.csv``): memory in MiB, power in
W, utilisation in %, ``DCGM_FI_DEV_XID_ERRORS`` the code of the last Xid (a gauge),
``DCGM_FI_DEV_ROW_REMAP_FAILURE`` 1 when row remapping failed.

The Xid gauge keeps the last code until the exporter restarts (dcgm-exporter issue #500),
so "an Xid in the window" is a change of that value inside the window, never its mere
presence; and since dcgm-exporter 3.3.6 the series carries ``err_code``/``err_msg`` labels,
so a GPU whose Xid changed is two series: every Xid expression first takes one value per
GPU (``max by (node labels, gpu)``) and counts GPUs, not series. gpumon's own exporter
(``gpumon watch``) publishes ``gpumon_alerts_active{host,severity,kind}``.

vLLM's own ``/metrics``, where the user's Prometheus scrapes its servers, gives the vLLM
rules (``workloads/vllm.py``'s verdicts, judged by Prometheus): per server (its
``instance``) on the node its series name, a wedged engine (requests running or waiting
for the whole window and no generation token in it) and KV pressure (KV use at least
``kv_pressure_min`` with preemptions in the window). The names are vLLM's across its
releases (docs/formats.md 6.14): the KV use is ``vllm:gpu_cache_usage_perc`` (V0, V1 to
0.9.1) or ``vllm:kv_cache_usage_perc`` (0.9.2+), the rest one name in every release. A
counter's growth is its ``increase`` over the window: a window with fewer than two scrapes
of the server is not judged (the window must hold two scrapes: 60 s does at the usual 15 s
and 30 s intervals), and a restart in it (its counter went back) counts as growth.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.alerts.rules import IdleHeld
from gpumon.backends.workloads.vllm import HUNG_AFTER_S as VLLM_HUNG_AFTER_S
from gpumon.backends.workloads.vllm import KV_PRESSURE_MIN as VLLM_KV_PRESSURE_MIN

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GPUMON_ALERTS = "gpumon_alerts_active"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_KV_USAGE = ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")  # to 0.9.1, 0.9.2+
# gpumon watch's accounting (exporter/metrics.py IDLE_COUNTER): GPU-seconds held idle per owner
GPUMON_IDLE_HELD = "gpumon_owner_gpu_idle_held_seconds_total"
IDLE_HELD_SPAN = "24h"  # the fleet's "held idle" column: GPU-hours of the last day

XID_WINDOW_S = 900  # "an Xid in the last 15 min"
# idle-allocated is the host rule gpu_idle_held (alerts/rules.py IdleHeld) at its defaults:
# more than 2 GiB held at under 5 % utilisation for the whole of the last 10 min.
IDLE_HELD = IdleHeld()
IDLE_WINDOW_S = int(IDLE_HELD.after_s)
IDLE_MEMORY_MIB = int(IDLE_HELD.min_mib)
IDLE_UTIL_PCT = IDLE_HELD.util_pct
KNOWN_WINDOW = "1h"  # a node seen in the last hour stays on the screen (as "no data")
SPARK_WINDOW_S = 30 * 60.0


def promql_string(text: str) -> str:
    """``text`` as a double-quoted PromQL string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class FleetQueries:
    """The expressions for one fleet (its selector and node labels)."""

    selector: str = ""
    node_labels: tuple[str, ...] = ("Hostname", "hostname", "instance")
    idle_window_s: int = IDLE_WINDOW_S  # the rule's 10 min (tests shorten it)
    xid_window_s: int = XID_WINDOW_S  # the Xid column's 15 min (tests shorten it)
    vllm_hung_after_s: int = int(VLLM_HUNG_AFTER_S)  # the vLLM rules' window
    vllm_kv_pressure_min: float = VLLM_KV_PRESSURE_MIN

    def metric(self, name: str) -> str:
        """``name`` with the fleet's selector: ``DCGM_FI_DEV_FB_USED{cluster="a"}``."""
        return f"{name}{{{self.selector}}}" if self.selector else name

    def by_node(self, inner: str) -> str:
        """``inner`` (a vector expression) with a ``node`` label from the node labels."""
        expr = inner
        for label in reversed(self.node_labels):
            expr = f'label_replace({expr}, "node", "$1", "{label}", "(.+)")'
        return expr

    def agg(self, op: str, inner: str, *extra: str) -> str:
        """``op`` of ``inner`` by node (and ``extra`` labels). Aggregated by the node labels
        first, so the relabelling runs on one series per node, not one per GPU (8x less
        work for Prometheus); ``count`` is counted, then summed."""
        first = ", ".join((*self.node_labels, *(x for x in extra if x not in self.node_labels)))
        outer = ", ".join(("node", *extra))
        then = "sum" if op == "count" else op
        return f"{then} by ({outer}) ({self.by_node(f'{op} by ({first}) ({inner})')})"

    def _xid_new(self) -> str:
        """Per GPU, the Xid code where it differs from the one a step before (and is not 0):
        the moment an Xid happened. A GPU seen for the first time is not new: its first
        value may be an Xid of last week that the exporter still holds."""
        step = self.xid_step_s
        by = ", ".join((*self.node_labels, "gpu"))
        now = f"max by ({by}) ({self.metric(XID)})"
        before = f"max by ({by}) ({self.metric(XID)} offset {step}s)"
        return f"({now} != {before}) > 0"

    @property
    def xid_step_s(self) -> int:
        """The Xid window's resolution: 15 steps (60 s for 15 min; dcgm-exporter collects
        every 30 s). Each step costs a pass over every GPU's Xid series (bench_fleet.py)."""
        return max(1, self.xid_window_s // 15)

    def xid_codes(self) -> str:
        """Per GPU and code (label ``xid``), 1 when that Xid happened in the window."""
        w, step = self.xid_window_s, self.xid_step_s
        by = ", ".join((*self.node_labels, "gpu"))
        codes = f'count_values by ({by}) ("xid", {self._xid_new()})'
        return f"max_over_time(({codes})[{w}s:{step}s])"

    def _total(self) -> str:
        """A node's memory: dcgm-exporter's total is used + free + reserved (summed per
        node first: 1,000 series to match, not 8,000); older exporters have no reserved."""
        used, free = self.agg("sum", self.metric(FB_USED)), self.agg("sum", self.metric(FB_FREE))
        reserved = self.agg("sum", self.metric(FB_RESERVED))
        return f"{used} + {free} + ({reserved} or {used} * 0)"

    def instant(self) -> dict[str, str]:
        """Name -> expression for the instant queries of one refresh (all by node)."""
        m, agg = self.metric, self.agg
        used, util = m(FB_USED), m(GPU_UTIL)
        # Held and idle over the whole window (IdleHeld.promql: the host rule's test).
        idle = IDLE_HELD.promql(used, util, self.idle_window_s)
        newest = f"max by ({', '.join(self.node_labels)}) (timestamp({used}))"
        return {
            "gpus": agg("count", used),
            "mem_used": agg("sum", used),
            "mem_total": self._total(),
            # The fullest GPU: used of what it can hand out (used + free; reserved is the
            # driver's). One division per GPU, the cheapest per-GPU match there is.
            "mem_fullest": agg("max", f"{used} / ({used} + {m(FB_FREE)})"),
            "util_mean": f"{agg('sum', util)} / {agg('count', util)}",
            "util_max": agg("max", util),
            "temp_max": agg("max", m(GPU_TEMP)),
            "power": agg("sum", m(POWER)),
            # Each GPU with an Xid in the window and its codes (label xid): only those GPUs
            # come back; the source counts GPUs per code and GPUs with any.
            "xids": agg("group", self.xid_codes(), "gpu", "xid"),
            "remap_failures": agg("sum", f"{m(ROW_REMAP_FAILURE)} > bool 0"),
            "idle_allocated": agg("sum", idle),
            "last_seen": agg("max", f"timestamp({used})"),
            # Nodes of the last hour, with their target: one whose series went stale (its
            # exporter is down) stays listed; "seen" is its last sample's time (5 min steps:
            # the source remembers exact times of the nodes it saw itself).
            "known": agg(
                "group", f"last_over_time({used}[{KNOWN_WINDOW}])", "instance", "job", "modelName"
            ),
            "seen": agg("max", f"max_over_time({newest}[{KNOWN_WINDOW}:5m])"),
            "down": f"up{{{self.selector}}} == 0" if self.selector else "up == 0",
            # by kind, so the problem names the alert ("CUDA out of memory"); the exporter
            # writes a 0 for every kind not active, left out here
            "alerts": f"sum by (host, severity, kind) ({m(GPUMON_ALERTS)}) > 0",
            # GPU-seconds held idle in the last day, per gpumon host (its accounting's
            # counter, every owner summed; increase() spans a watch's restarts)
            "idle_held": f"sum by (host) (increase({m(GPUMON_IDLE_HELD)}[{IDLE_HELD_SPAN}]))",
            **self.vllm(),
        }

    def _grown(self, counter: str) -> str:
        """Per server, how much ``counter`` grew over the vLLM window (its engines summed):
        ``increase``, which needs two scrapes in the window (one scrape is no growth known,
        where a value less its value a window before could be one sample read twice)."""
        c, w = self.metric(counter), self.vllm_hung_after_s
        return self.agg("sum", f"increase({c}[{w}s])", "instance")

    def vllm(self) -> dict[str, str]:
        """The vLLM rules' queries, by node and server (``instance``): ``vllm_wedged``,
        the requests of each server that had some for the whole window (the least its
        engines had running, and waiting) and made no generation token in it;
        ``vllm_kv_pressure``, the KV use of each server at ``kv_pressure_min`` or more
        (the mean over its engines: equal pools) that preempted requests in the window,
        and ``vllm_preempted``, how many it preempted."""
        w = self.vllm_hung_after_s
        held = [
            self.agg("sum", f"min_over_time({self.metric(name)}[{w}s])", "instance")
            for name in (VLLM_RUNNING, VLLM_WAITING)
        ]
        sel = f",{self.selector}" if self.selector else ""
        names = "|".join(n.removeprefix("vllm:") for n in VLLM_KV_USAGE)
        usage = self.agg("avg", f'{{__name__=~"vllm:({names})"{sel}}}', "instance")
        preempted = f"{self._grown(VLLM_PREEMPTIONS)} > 0"
        return {
            "vllm_wedged": (
                f"(({held[0]} + {held[1]}) > 0) and on (node, instance) "
                f"({self._grown(VLLM_GENERATION_TOKENS)} == 0)"
            ),
            "vllm_kv_pressure": (
                f"({usage} >= {self.vllm_kv_pressure_min:g}) and on (node, instance) ({preempted})"
            ),
            "vllm_preempted": preempted,
        }

    def spark(self) -> str:
        """The utilisation sparkline: mean GPU utilisation per node (a range query)."""
        util = self.metric(GPU_UTIL)
        return f"{self.agg('sum', util)} / {self.agg('count', util)}"

    def _only(self, expr: str, node: str) -> str:
        one = promql_string(node.replace("$", "$$"))  # $ is a group reference there
        return f'({expr}) and on (node) label_replace(vector(1), "node", {one}, "", "")'

    def node_gpus(self, node: str) -> dict[str, str]:
        """The per-GPU queries of one node (the drill-down without SSH)."""
        names = "|".join(
            n.removeprefix("DCGM_FI_DEV_")
            for n in (FB_USED, FB_FREE, GPU_UTIL, GPU_TEMP, POWER, ROW_REMAP_FAILURE)
        )
        sel = f",{self.selector}" if self.selector else ""
        now = f'{{__name__=~"DCGM_FI_DEV_({names})"{sel}}}'
        return {
            "now": self._only(self.by_node(now), node),
            "xid": self._only(self.by_node(self.xid_codes()), node),  # per GPU and code
            "seen": self._only(self.by_node(f"timestamp({self.metric(FB_USED)})"), node),
        }

    def one_node(self, node: str) -> str:
        """What a per-node design would ask for each node (the benchmark compares): the
        current series the fleet columns need, selected by the node's label directly."""
        names = "|".join(
            n.removeprefix("DCGM_FI_DEV_")
            for n in (FB_USED, FB_FREE, GPU_UTIL, GPU_TEMP, POWER, XID, ROW_REMAP_FAILURE)
        )
        sel = f",{self.selector}" if self.selector else ""
        one = promql_string(node)
        return " or ".join(
            f'{{__name__=~"DCGM_FI_DEV_({names})",{label}={one}{sel}}}'
            for label in self.node_labels
        )
