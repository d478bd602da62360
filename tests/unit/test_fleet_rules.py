"""The fleet rules, the sorts, the filter and the headless verdicts, on rows made here."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gpumon.backends.fleet import FleetSnapshot, NodeRow, judge, sort_rows
from gpumon.backends.fleet.model import SORT_NAMES, STALE_AFTER_S
from gpumon.backends.fleet.queries import FleetQueries, promql_string
from gpumon.backends.fleet.report import fleet_check, fleet_json
from gpumon.backends.model import CheckCode, Health

NOW = 1_800_000_000.0


def node(name: str, **values: object) -> NodeRow:
    row = NodeRow(name, last_seen=NOW - 5, gpus=8, **values)  # type: ignore[arg-type]
    return replace(row, problems=judge(row, NOW))


def rules(row: NodeRow) -> list[tuple[str, Health]]:
    return [(p.rule, p.severity) for p in row.problems]


def test_each_rule() -> None:
    assert rules(node("ok", xid_gpus=0, xid_last=0, remap_failures=0, idle_allocated=0)) == []
    assert rules(node("a", remap_failures=2)) == [("row-remap-failure", Health.CRITICAL)]
    assert rules(node("b", xid_gpus=1, xid_last=79)) == [("xid", Health.CRITICAL)]
    assert rules(node("c", xid_gpus=1, xid_last=13)) == [("xid", Health.WARNING)]
    assert rules(node("d", idle_allocated=3)) == [("idle-allocated", Health.WARNING)]
    assert rules(node("e", alerts_critical=1, alerts_warning=4)) == [
        ("gpumon-alerts", Health.CRITICAL)
    ]
    assert rules(node("f", alerts_warning=2)) == [("gpumon-alerts", Health.WARNING)]
    assert node("f", alerts_warning=2).problems[0].message == "2 warning alerts"  # no kind


def test_gpumon_alerts_are_named_by_their_kind() -> None:
    """Issue 36 point 5: the problem said "1 critical alert(s)"; it names the alert, the
    worst severity's kinds first (gpumon_alerts_active's kind label, kind_title's words)."""
    kinds = (("critical", "cuda_oom", 1), ("warning", "foreign_process", 1))
    oom = node("k", alerts_critical=1, alerts_warning=1, alert_kinds=kinds)
    assert oom.problems[0].message == "CUDA out of memory (1 critical alert)"
    three = (("warning", "memory", 2), ("warning", "time_to_full", 1), ("warning", "xid", 1))
    warm = node("l", alerts_warning=4, alert_kinds=three)
    assert warm.problems[0].message == "GPU memory, Memory filling up +1 (4 warning alerts)"
    odd = node("m", alerts_critical=1, alert_kinds=(("critical", "new\x1b[2Jkind", 1),))
    assert odd.problems[0].message == "new\\x1b[2Jkind (1 critical alert)"  # printable
    down = node("g", exporter_down=True, labels=MappingProxyType({"instance": "g:9400"}))
    assert down.problems[0].message == "exporter down (up 0: g:9400)"
    gone = node("h", current=False)
    assert rules(gone) == [("exporter-down", Health.CRITICAL)]
    assert gone.problems[0].message == "no data for 5 s: exporter gone?"
    old = replace(NodeRow("i", last_seen=NOW - STALE_AFTER_S - 1))
    assert [p.rule for p in judge(old, NOW)] == ["stale"]
    many = node("j", idle_allocated=1, remap_failures=1, xid_gpus=1, xid_last=13)
    assert [p.severity for p in many.problems] == sorted(
        (p.severity for p in many.problems), reverse=True
    )
    assert many.severity == Health.CRITICAL


def test_trouble_sort_then_fullest_memory_and_the_other_sorts() -> None:
    rows = [
        node("calm-full", mem_fullest=0.9, util_mean=10, temp_max=40, power_w=100),
        node("warn", idle_allocated=1, mem_fullest=0.1, util_mean=0, temp_max=30),
        node("crit", remap_failures=1, mem_fullest=0.2, util_mean=50, temp_max=70),
        node("calm-empty", mem_fullest=0.3, util_mean=90, temp_max=None, power_w=900),
        node("unknown"),
    ]
    by = {how: [r.node for r in sort_rows(rows, how, NOW)] for how in SORT_NAMES}
    assert by["trouble"] == ["crit", "warn", "calm-full", "calm-empty", "unknown"]
    assert by["name"] == sorted(by["name"])
    assert by["utilisation"][:2] == ["calm-empty", "crit"] and by["utilisation"][-1] == "unknown"
    assert by["temperature"][0] == "crit" and by["temperature"][-2:] == ["calm-empty", "unknown"]
    assert by["power"][:2] == ["calm-empty", "calm-full"]


def test_filter_by_name_label_value_or_label_equals() -> None:
    row = NodeRow("gpu-017", labels=MappingProxyType({"job": "dcgm", "modelName": "H200"}))
    assert row.matches("017") and row.matches("GPU") and row.matches("h200")
    assert row.matches("job=dcg") and not row.matches("job=h200")
    assert not row.matches("gpu-018") and row.matches("  ")


def test_json_keeps_unknowns_null_and_check_lines() -> None:
    rows = (
        node("n1", remap_failures=1, mem_used_mib=1024.0, mem_total_mib=8192.0),
        node("n2"),
    )
    snap = FleetSnapshot("lab", "http://p:9090", NOW, rows=rows)
    doc = fleet_json(snap)
    first, second = doc["nodes"]
    assert first["node"] == "n1" and first["severity"] == "critical"
    assert first["problems"] == [
        {
            "rule": "row-remap-failure",
            "severity": "critical",
            "message": "row-remap failure on 1 GPU",
        }
    ]
    assert second["power_w"] is None and second["memory_used_mib"] is None  # not 0
    assert second["last_sample_age_s"] == 5.0 and second["exporter_down"] is False
    code, line = fleet_check(snap)
    assert code == CheckCode.CRITICAL
    assert line == (
        "FLEET lab CRITICAL - 1 critical, 0 warning of 2 nodes; n1: row-remap failure on 1 GPU"
        " | nodes=2 critical=1 warning=0"
    )
    assert fleet_check(replace(snap, rows=(rows[1],)))[0] == CheckCode.OK
    assert fleet_check(replace(snap, rows=()))[0] == CheckCode.UNKNOWN
    gone = replace(snap, error="Prometheus at http://p:9090 unreachable: refused", unreachable=True)
    assert fleet_check(gone) == (
        CheckCode.UNKNOWN,
        "FLEET lab UNKNOWN - Prometheus at http://p:9090 unreachable: refused",
    )
    partial = replace(snap, rows=(rows[1],), error="1 of 17 queries failed: x")
    assert fleet_check(partial)[0] == CheckCode.UNKNOWN  # OK on half the data is not OK


def test_queries_are_a_fixed_set_by_node_with_the_selector_everywhere() -> None:
    q = FleetQueries('cluster="a"')
    exprs = q.instant()
    assert all("by (node" in e or e.startswith("up{") or "by (host" in e for e in exprs.values())
    metrics = [e for k, e in exprs.items() if k not in ("down", "alerts")]
    assert all('{cluster="a"}' in e for e in metrics)
    assert exprs["down"] == 'up{cluster="a"} == 0'
    # The first present label wins: Hostname is applied last, instance first.
    spark = q.spark()
    assert spark.index('"Hostname"') > spark.index('"hostname"') > spark.index('"instance"')
    one = q.node_gpus('we"ird$1')["now"]
    assert '"we\\"ird$$1"' in one  # a PromQL string, $ not a group reference
    assert promql_string("a\\b\n") == '"a\\\\b\\n"'


def test_the_vllm_rules_name_their_servers() -> None:
    """Issue 38 point 5: a wedged vLLM engine is critical, KV pressure a warning, each
    naming its servers (the first two, the others counted) in the window's words."""
    one = node("v", vllm_wedged=(("gpu01:8000", 41.0),))
    assert rules(one) == [("vllm-wedged", Health.CRITICAL)]
    assert one.problems[0].message == "vLLM wedged: gpu01:8000 (41 requests): no token for 60 s"
    three = (("a:8000", 1.0), ("a:8001", 2.0), ("a:8002", 3.0))
    many = replace(node("w"), vllm_wedged=three)
    assert judge(many, NOW, vllm_window_s=5)[0].message == (
        "vLLM wedged: a:8000 (1 requests), a:8001 (2 requests) +1: no token for 5 s"
    )
    kv = node("x", vllm_kv_pressure=(("gpu02:8000", 0.97, 12.0), ("gpu02:8001", 0.91, None)))
    assert rules(kv) == [("vllm-kv-pressure", Health.WARNING)]
    assert kv.problems[0].message == (
        "vLLM KV cache nearly full, requests preempted: gpu02:8000 (97% KV, 12 preempted in "
        "60 s), gpu02:8001 (91% KV)"
    )
    both = node("y", vllm_wedged=(("h:8000", 5.0),), vllm_kv_pressure=(("h:8001", 0.99, 1.0),))
    assert [p.rule for p in both.problems] == ["vllm-wedged", "vllm-kv-pressure"]


def test_the_vllm_queries_read_both_kv_names_and_judge_per_server() -> None:
    """Both KV use names (V0 and V1 to 0.9.1; 0.9.2+) and the fleet's selector on every
    vLLM metric; each query keeps the server (``instance``) beside the node."""
    q = FleetQueries('cluster="a"', ("hostname",), vllm_hung_after_s=60).vllm()
    kv = q["vllm_kv_pressure"]
    assert '{__name__=~"vllm:(gpu_cache_usage_perc|kv_cache_usage_perc)",cluster="a"}' in kv
    assert 'increase(vllm:num_preemptions_total{cluster="a"}[60s])' in kv and ">= 0.9" in kv
    wedged = q["vllm_wedged"]
    assert 'min_over_time(vllm:num_requests_running{cluster="a"}[60s])' in wedged
    assert 'min_over_time(vllm:num_requests_waiting{cluster="a"}[60s])' in wedged
    assert 'increase(vllm:generation_tokens_total{cluster="a"}[60s])' in wedged
    assert all("sum by (node, instance)" in e or "avg by (node, instance)" in e for e in q.values())
