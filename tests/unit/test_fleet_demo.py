"""The simulated fleet (``gpumon fleet demo``) through the real source and rules: 50
nodes, the same on every machine, one Xid, one idle-held GPU, two full and hot nodes."""

from __future__ import annotations

import pytest

from gpumon.backends.fleet import PrometheusError, fleet_check, sort_rows
from gpumon.backends.fleet.demo import (
    DEMO_HOT_NODES,
    DEMO_IDLE_NODE,
    DEMO_XID_NODE,
    SimulatedPrometheus,
    demo_source,
)
from gpumon.backends.fleet.queries import FleetQueries
from gpumon.backends.model import CheckCode, Health

T0 = 1_800_000_000.0


def clock() -> float:
    return T0


async def test_fifty_nodes_judged_by_the_fleet_rules() -> None:
    snap = await demo_source(clock).refresh()
    assert snap.error is None and not snap.unreachable
    assert len(snap.rows) == 50
    rows = {r.node: r for r in snap.rows}
    xid = rows[DEMO_XID_NODE]
    assert (xid.severity, xid.xid_last, xid.xid_gpus) == (Health.CRITICAL, 79, 1)
    assert xid.problems[0].message.startswith("Xid 79 on 1 GPU in the last 15 min")
    idle = rows[DEMO_IDLE_NODE]
    assert [p.rule for p in idle.problems] == ["idle-allocated"] and idle.idle_allocated == 1
    for node in DEMO_HOT_NODES:
        hot = rows[node]
        assert hot.mem_fullest is not None and hot.mem_fullest > 0.99
        assert hot.temp_max is not None and hot.temp_max >= 86
        assert [p.rule for p in hot.problems] == ["gpumon-alerts"]
    calm = [r for r in snap.rows if r.node not in {DEMO_XID_NODE, DEMO_IDLE_NODE, *DEMO_HOT_NODES}]
    assert all(r.severity == Health.OK for r in calm)
    assert all(r.gpus == 8 and r.current and r.age(T0) is not None for r in snap.rows)
    assert all(len(r.spark) == 20 and None not in r.spark for r in snap.rows)
    worst = [r.node for r in sort_rows(list(snap.rows), "trouble", T0)[:4]]
    assert set(worst) == {DEMO_XID_NODE, DEMO_IDLE_NODE, *DEMO_HOT_NODES}
    code, line = fleet_check(snap)
    assert code == CheckCode.CRITICAL and "2 critical, 2 warning of 50 nodes" in line


async def test_the_same_fleet_everywhere() -> None:
    one, two = await demo_source(clock).refresh(), await demo_source(clock).refresh()
    assert [(r.node, r.mem_used_mib, r.util_mean, r.temp_max) for r in one.rows] == [
        (r.node, r.mem_used_mib, r.util_mean, r.temp_max) for r in two.rows
    ]


async def test_a_node_s_gpus_and_a_query_it_does_not_know() -> None:
    source = demo_source(clock)
    gpus = await source.node_gpus(DEMO_XID_NODE)
    assert [g.gpu for g in gpus] == [str(i) for i in range(8)]
    assert [g.xid_last for g in gpus] == [0, 0, 0, 79, 0, 0, 0, 0]
    held = {g.gpu: g for g in await source.node_gpus(DEMO_IDLE_NODE)}["5"]
    assert held.mem_used_mib == 30720 and held.util == 0
    client = SimulatedPrometheus(FleetQueries(), clock)
    with pytest.raises(PrometheusError, match="answers only the fleet's own queries"):
        await client.query("up")


async def test_held_idle_gpu_hours_come_from_gpumon_watchs_accounting() -> None:
    """Issue 39 point 2: the fleet's "held idle" column is the nodes' gpumon exporters'
    ``gpumon_owner_gpu_idle_held_seconds_total``, its increase over the last day summed
    per host, in GPU-hours; a node without gpumon is n/a (None), never 0."""
    from gpumon.backends.exporter.metrics import IDLE_COUNTER
    from gpumon.backends.fleet.queries import GPUMON_IDLE_HELD
    from gpumon.backends.fleet.report import fleet_json
    from gpumon.tui.fleet.cells import row_cells

    assert f"{IDLE_COUNTER}_total" == GPUMON_IDLE_HELD  # the exporter's own name
    query = FleetQueries('cluster="a"').instant()["idle_held"]
    assert query == (
        'sum by (host) (increase(gpumon_owner_gpu_idle_held_seconds_total{cluster="a"}[24h]))'
    )
    snap = await demo_source(clock).refresh()
    rows = {r.node: r for r in snap.rows}
    assert rows[DEMO_IDLE_NODE].idle_held_gpu_hours == 6.0
    assert all(rows[n].idle_held_gpu_hours == 0.5 for n in DEMO_HOT_NODES)
    assert rows["gpu-node-01"].idle_held_gpu_hours is None  # no gpumon watch there
    assert row_cells(rows[DEMO_IDLE_NODE], T0)["idle"].text == "6.0"
    assert row_cells(rows["gpu-node-01"], T0)["idle"].text == "n/a"
    nodes = {n["node"]: n for n in fleet_json(snap)["nodes"]}
    assert nodes[DEMO_IDLE_NODE]["idle_held_gpu_hours_24h"] == 6.0
    assert nodes["gpu-node-01"]["idle_held_gpu_hours_24h"] is None
