"""The fleet's PromQL: a fixed, small set of aggregated queries per refresh, by node.

Every expression names the node the same way: a ``node`` label set from the first
present of the configured labels (default ``Hostname``, ``hostname``, ``instance``), with
the fleet's ``selector`` on every metric. ``label_replace`` with ``(.+)`` leaves a series
alone when the source label is absent, so applying the labels lowest priority first makes
the first present one win.

Metric names are dcgm-exporter's (``etc/default-counters.csv``): memory in MiB, power in
W, utilisation in %, ``DCGM_FI_DEV_XID_ERRORS`` the code of the last Xid (a gauge),
``DCGM_FI_DEV_ROW_REMAP_FAILURE`` 1 when row remapping failed. gpumon's own exporter
(``gpumon watch``) publishes ``gpumon_alerts_active{host,severity,kind}``.
"""

from __future__ import annotations

from dataclasses import dataclass

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GPUMON_ALERTS = "gpumon_alerts_active"

XID_WINDOW = "15m"
IDLE_WINDOW_S = 600
IDLE_MEMORY_MIB = 2048  # "allocated": more than 2 GiB held ...
IDLE_UTIL_PCT = 5  # ... at under 5 % utilisation, for the whole window
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

    def metric(self, name: str) -> str:
        """``name`` with the fleet's selector: ``DCGM_FI_DEV_FB_USED{cluster="a"}``."""
        return f"{name}{{{self.selector}}}" if self.selector else name

    def by_node(self, inner: str) -> str:
        """``inner`` (a vector expression) with a ``node`` label from the node labels."""
        expr = inner
        for label in reversed(self.node_labels):
            expr = f'label_replace({expr}, "node", "$1", "{label}", "(.+)")'
        return expr

    def _total(self) -> str:
        used, free = self.by_node(self.metric(FB_USED)), self.by_node(self.metric(FB_FREE))
        # dcgm-exporter's total is used + free + reserved; older ones have no reserved.
        reserved = f"({self.by_node(self.metric(FB_RESERVED))} or {used} * 0)"
        return f"({used} + {free} + {reserved})"

    def instant(self) -> dict[str, str]:
        """Name -> expression for the instant queries of one refresh (all by node)."""
        m, n = self.metric, self.by_node
        used = n(m(FB_USED))
        xid_15m = n(f"max_over_time({m(XID)}[{XID_WINDOW}])")
        w = self.idle_window_s
        # Held and idle over the whole window: a GPU with less history than the window
        # (its first sample inside the last tenth is missing) is not judged yet (0).
        idle = (
            f"((({n(f'min_over_time({m(FB_USED)}[{w}s])')} > bool {IDLE_MEMORY_MIB})"
            f" * ({n(f'max_over_time({m(GPU_UTIL)}[{w}s])')} < bool {IDLE_UTIL_PCT})"
            f" * {n(f'present_over_time({m(FB_USED)}[{w // 10}s] offset {w - w // 10}s)')})"
            f" or {used} * 0)"
        )
        return {
            "gpus": f"count by (node) ({used})",
            "mem_used": f"sum by (node) ({used})",
            "mem_total": f"sum by (node) ({self._total()})",
            "mem_fullest": f"max by (node) ({used} / {self._total()})",
            "util_mean": f"avg by (node) ({n(m(GPU_UTIL))})",
            "util_max": f"max by (node) ({n(m(GPU_UTIL))})",
            "temp_max": f"max by (node) ({n(m(GPU_TEMP))})",
            "power": f"sum by (node) ({n(m(POWER))})",
            "xid_last": f"max by (node) ({xid_15m})",
            "xid_gpus": f"sum by (node) ({xid_15m} > bool 0)",
            "remap_failures": f"sum by (node) ({n(m(ROW_REMAP_FAILURE))} > bool 0)",
            "idle_allocated": f"sum by (node) ({idle})",
            "last_seen": f"max by (node) ({n(f'timestamp({m(FB_USED)})')})",
            # Nodes of the last hour, with their target: one whose series went stale (its
            # exporter is down) stays listed; "seen" is its last sample's time (1 min steps).
            "known": (
                "group by (node, instance, job, modelName) "
                f"({n(f'last_over_time({m(FB_USED)}[{KNOWN_WINDOW}])')})"
            ),
            "seen": (
                f"max by (node) ({n(f'max_over_time(timestamp({m(FB_USED)})[{KNOWN_WINDOW}:1m])')})"
            ),
            "down": f"up{{{self.selector}}} == 0" if self.selector else "up == 0",
            "alerts": f"sum by (host, severity) ({m(GPUMON_ALERTS)})",
        }

    def spark(self) -> str:
        """The utilisation sparkline: mean GPU utilisation per node (a range query)."""
        return f"avg by (node) ({self.by_node(self.metric(GPU_UTIL))})"

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
        xid = f"max_over_time({self.metric(XID)}[{XID_WINDOW}])"
        return {
            "now": self._only(self.by_node(now), node),
            "xid": self._only(self.by_node(xid), node),
            "seen": self._only(self.by_node(f"timestamp({self.metric(FB_USED)})"), node),
        }

    def one_node(self, node: str) -> str:
        """Every current dcgm series of one node: what a per-node design would ask
        (used by the benchmark to compare)."""
        sel = f",{self.selector}" if self.selector else ""
        return self._only(self.by_node(f'{{__name__=~"DCGM_FI_DEV_.*"{sel}}}'), node)
