"""The fleet's queries against a real Prometheus (Debian's) scraping a stand-in
dcgm-exporter for many fake nodes: rows, rules, both host-label spellings, an exporter
going down, Prometheus stopped and restarted, query errors, 1,000 nodes, the headless CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.backends.config.fleet import FleetConfig
from gpumon.backends.fleet import FleetQueries, FleetSnapshot, FleetSource, NodeRow
from gpumon.backends.fleet.prom import GET_MAX
from gpumon.backends.fleet.report import fleet_check, fleet_json
from gpumon.backends.model import CheckCode, Health

from dcgm_exporter import (
    RESERVED_MIB,
    TOTAL_MIB,
    DcgmExporter,
    FakeGpu,
    FakeNode,
    closed_port,
    fleet,
    gpumon_alerts,
    serving,
)
from prom_fleet import PROMETHEUS, FleetPrometheus

pytestmark = pytest.mark.system

IDLE_WINDOW_S = 12  # the idle-but-allocated rule's window, shortened from 10 min
XID_WINDOW_S = 120  # the Xid column's window, shortened from 15 min (8 s steps)


@pytest.fixture(autouse=True)
def _need_prometheus() -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("Debian package prometheus not installed; .ci/run installs it")


async def refresh(source: FleetSource) -> FleetSnapshot:
    return await source.refresh()


async def once(url: str, **options: Any) -> FleetSnapshot:
    """One refresh of a new source (closed after)."""
    source = source_for(url, **options)
    try:
        return await source.refresh()
    finally:
        await source.close()


def source_for(url: str, **options: Any) -> FleetSource:
    xid_window_s = options.pop("xid_window_s", XID_WINDOW_S)
    config = FleetConfig("lab", url, **options)
    queries = FleetQueries(
        config.selector, config.node_labels, idle_window_s=IDLE_WINDOW_S, xid_window_s=xid_window_s
    )
    return FleetSource(config, queries=queries)


def lab_nodes() -> list[FakeNode]:
    nodes = fleet(20)
    nodes[3].gpus[2].remap_failure = 1  # node-0004
    nodes[8].gpus[1].power_reported = False  # node-0009: one GPU's power is blank
    nodes[9].gpus = [FakeGpu(used_mib=10_000, util=0) for _ in range(8)]  # node-0010: idle
    return nodes


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FleetPrometheus, DcgmExporter]]:
    root = tmp_path_factory.mktemp("fleet")
    alerts = gpumon_alerts(
        [
            ("node-0011", "critical", "cuda_oom", 1),
            ("node-0012", "warning", "memory", 2),
            ("node-0012", "warning", "xid", 0),  # gpumon watch's zero series of a kind
        ]
    )
    with serving(lab_nodes(), extra=alerts) as exporter:
        prom = FleetPrometheus(root, {"dcgm": [exporter.target]}).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 160)
            prom.wait_for_xid_history(160, XID_WINDOW_S)
            with exporter.lock:  # Xids that happen while Prometheus watches
                exporter.node("node-0006").gpus[0].xid = 79  # fallen off the bus (critical)
                exporter.node("node-0008").gpus[5].xid = 13  # graphics exception (warning)
            prom.wait_for("DCGM_FI_DEV_XID_ERRORS > 0", 2)
            yield prom, exporter
        finally:
            prom.stop()


async def test_one_row_per_node_with_both_label_spellings(
    lab: tuple[FleetPrometheus, DcgmExporter],
) -> None:
    prom, exporter = lab
    snap = await once(prom.url)
    assert snap.error is None and snap.warnings == ()
    rows = {r.node: r for r in snap.rows}
    assert sorted(rows) == [f"node-{k:04d}" for k in range(1, 21)]
    spellings = {exporter.node(n).host_label for n in rows}
    assert spellings == {"Hostname", "hostname"}
    one = rows["node-0002"]
    truth = exporter.node("node-0002").gpus
    assert one.gpus == 8
    assert one.mem_used_mib == sum(g.used_mib for g in truth)
    assert one.mem_total_mib == 8 * TOTAL_MIB  # used + free + reserved
    fullest = max(g.used_mib / (TOTAL_MIB - RESERVED_MIB) for g in truth)  # of used + free
    assert one.mem_fullest == pytest.approx(fullest)
    assert one.util_max == max(g.util for g in truth)
    assert one.util_mean == pytest.approx(sum(g.util for g in truth) / 8)
    assert one.temp_max == max(g.temp for g in truth)
    assert one.power_w == pytest.approx(sum(g.power_w for g in truth), abs=0.01)
    assert one.labels["job"] == "dcgm" and "RTX PRO 6000" in one.labels["modelName"]
    assert one.current and one.age(snap.taken_at) is not None
    assert one.age(snap.taken_at) < 10  # type: ignore[operator]
    # A blank power value is left out by dcgm-exporter: the sum is of the 7 reported.
    blank = rows["node-0009"]
    reported = [g.power_w for g in exporter.node("node-0009").gpus if g.power_reported]
    assert blank.power_w == pytest.approx(sum(reported), abs=0.01)


async def test_fleet_rules_and_the_trouble_order(lab: tuple[FleetPrometheus, DcgmExporter]) -> None:
    prom, _ = lab
    time.sleep(IDLE_WINDOW_S + 2)  # the idle rule needs its whole window of history
    snap = await once(prom.url)
    rows = {r.node: r for r in snap.rows}
    rules = {n: [p.rule for p in r.problems] for n, r in rows.items() if r.problems}
    assert rules == {
        "node-0004": ["row-remap-failure"],
        "node-0006": ["xid"],
        "node-0008": ["xid"],
        "node-0010": ["idle-allocated"],
        "node-0011": ["gpumon-alerts"],
        "node-0012": ["gpumon-alerts"],
    }
    assert rows["node-0006"].severity == Health.CRITICAL and rows["node-0006"].xid_last == 79
    assert rows["node-0008"].severity == Health.WARNING and rows["node-0008"].xid_gpus == 1
    assert rows["node-0004"].remap_failures == 1
    assert rows["node-0010"].idle_allocated == 8
    assert rows["node-0002"].idle_allocated == 0 and rows["node-0002"].xid_gpus == 0
    assert (rows["node-0011"].alerts_critical, rows["node-0012"].alerts_warning) == (1, 2)
    # named by the kind label (issue 36 point 5: "1 critical alert(s)" named nothing)
    assert rows["node-0011"].problems[0].message == "CUDA out of memory (1 critical alert)"
    assert rows["node-0012"].problems[0].message == "GPU memory (2 warning alerts)"
    doc = fleet_json(snap)
    order = [n["node"] for n in doc["nodes"]]
    critical = {"node-0004", "node-0006", "node-0011"}
    assert set(order[:3]) == critical
    assert set(order[3:6]) == {"node-0008", "node-0010", "node-0012"}
    ok = [n for n in doc["nodes"] if n["severity"] == "ok"]
    fullest = [n["memory_fullest_pct"] for n in ok]
    assert fullest == sorted(fullest, reverse=True)  # then the fullest memory first
    code, line = fleet_check(snap)
    assert code == CheckCode.CRITICAL
    assert line.startswith("FLEET lab CRITICAL - 3 critical, 3 warning of 20 nodes")


async def _xids_when(
    source: FleetSource, node: str, ready: Callable[[NodeRow], bool], timeout: float
) -> NodeRow:
    """Refreshes until ``node``'s row is ``ready`` (the Xid window moves in 1 s steps)."""
    deadline = time.monotonic() + timeout
    while True:
        row = next(r for r in (await source.refresh()).rows if r.node == node)
        if ready(row) or time.monotonic() > deadline:
            return row
        time.sleep(0.5)


async def test_an_xid_the_exporter_still_holds_is_not_recent_a_new_one_is(tmp_path: Path) -> None:
    """dcgm-exporter keeps the last Xid code until it restarts (its issue #500): last
    week's Xid 79 on node-0001 is no Xid of the window. A new Xid is, for the window, and
    a GPU whose Xid changed (a series per err_code: 0, 13, 79) counts once."""
    window = 10  # s (1 s steps)
    nodes = fleet(3)
    nodes[0].gpus[2].xid = 79  # held since last week
    with serving(nodes) as exporter:
        prom = FleetPrometheus(tmp_path, {"dcgm": [exporter.target]}).start()
        source = source_for(prom.url, xid_window_s=window)
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 24)
            prom.wait_for_xid_history(24, window)
            held = next(r for r in (await source.refresh()).rows if r.node == "node-0001")
            assert (held.xid_gpus, held.xid_last, held.problems) == (0, 0, ())
            with exporter.lock:
                exporter.node("node-0002").gpus[5].xid = 13
            row = await _xids_when(source, "node-0002", lambda r: bool(r.xid_gpus), 15)
            assert (row.xid_gpus, row.xid_last, dict(row.xids)) == (1, 13, {13: 1})
            assert [(p.rule, p.severity, p.message) for p in row.problems] == [
                (
                    "xid",
                    Health.WARNING,
                    "Xid 13 on 1 GPU in the last 15 min: graphics engine exception"
                    " — restart the application",
                )
            ]
            with exporter.lock:
                exporter.node("node-0002").gpus[5].xid = 79
            row = await _xids_when(source, "node-0002", lambda r: r.xid_last == 79, 15)
            label = exporter.node("node-0002").host_label
            one_gpu = f'DCGM_FI_DEV_XID_ERRORS{{gpu="5",{label}="node-0002"}}'
            [split] = prom.query(f"count(last_over_time({one_gpu}[20s]))")
            assert split["value"][1] == "3"  # err_code 0, 13 and 79: three series, one GPU
            assert (row.xid_gpus, dict(row.xids), row.severity) == (
                1,
                {13: 1, 79: 1},
                Health.CRITICAL,
            )
            assert row.problems[0].message == (
                "Xid 79 on 1 GPU in the last 15 min: fallen off the bus — reboot the node;"
                " also Xid 13"
            )
            assert source.last is not None
            node = next(n for n in fleet_json(source.last)["nodes"] if n["node"] == "node-0002")
            assert (node["xid_last_15m"], node["xid_gpus_15m"], node["xids_15m"]) == (
                79,
                1,
                {"13": 1, "79": 1},
            )
            gpus = {g.gpu: g.xid_last for g in await source.node_gpus("node-0002")}
            assert gpus["5"] == 79 and gpus["0"] == 0
            assert {g.xid_last for g in await source.node_gpus("node-0001")} == {0}  # held
            # Out of the window, it is no longer recent.
            row = await _xids_when(source, "node-0002", lambda r: not r.xid_gpus, window + 15)
            assert (row.xid_gpus, row.xid_last, row.problems) == (0, 0, ())
        finally:
            await source.close()
            prom.stop()


async def test_a_node_alone_from_prometheus(lab: tuple[FleetPrometheus, DcgmExporter]) -> None:
    prom, exporter = lab
    source = source_for(prom.url)
    gpus = await source.node_gpus("node-0004")
    blank = await source.node_gpus("node-0009")
    await source.close()
    truth = exporter.node("node-0004").gpus
    assert [g.gpu for g in gpus] == [str(i) for i in range(8)]
    assert [g.mem_used_mib for g in gpus] == [g.used_mib for g in truth]
    assert [g.remap_failure for g in gpus] == [bool(g.remap_failure) for g in truth]
    assert gpus[0].mem_total_mib is not None and gpus[0].uuid == exporter.node("node-0004").uuid(0)
    assert blank[1].power_w is None and blank[0].power_w is not None  # not reported: None


async def test_held_idle_gpu_hours_from_gpumon_watchs_counter(
    lab: tuple[FleetPrometheus, DcgmExporter],
) -> None:
    """Issue 39 point 2: a node whose gpumon watch counts GPU-seconds held idle shows its
    increase (GPU-hours) in the fleet's "held idle" column; Prometheus's own increase()
    of the real counter; a node without gpumon: n/a (None), never 0."""
    prom, exporter = lab
    before = exporter.extra
    labels = 'host="node-0011",container="CT201",user="root",job_name="jupyter-lab"'

    def count(seconds: float) -> str:
        return (
            "# TYPE gpumon_owner_gpu_idle_held_seconds_total counter\n"
            f"gpumon_owner_gpu_idle_held_seconds_total{{{labels}}} {seconds}\n"
        )

    try:
        with exporter.lock:
            exporter.extra = before + count(0.0)
        prom.wait_for("gpumon_owner_gpu_idle_held_seconds_total == 0")
        with exporter.lock:
            exporter.extra = before + count(7200.0)  # two GPU-hours later
        prom.wait_for("gpumon_owner_gpu_idle_held_seconds_total == 7200")
        snap = await once(prom.url)
    finally:
        with exporter.lock:
            exporter.extra = before
    rows = {r.node: r for r in snap.rows}
    held = rows["node-0011"].idle_held_gpu_hours
    assert held is not None and held >= 2.0, held  # increase() extrapolates, never less
    assert rows["node-0001"].idle_held_gpu_hours is None


async def test_long_expressions_are_posted_and_answer_the_same(
    lab: tuple[FleetPrometheus, DcgmExporter],
) -> None:
    prom, _ = lab
    long_selector = 'modelName!~"' + "|".join(f"nope-{i:04d}" for i in range(150)) + '"'
    source = source_for(prom.url, selector=long_selector)
    assert min(len(e) for e in source.queries.instant().values()) > GET_MAX  # all POSTed
    posted = await refresh(source)
    await source.close()
    plain = await once(prom.url)
    assert posted.error is None
    assert {r.node: r.gpus for r in posted.rows} == {r.node: r.gpus for r in plain.rows}
    assert len(posted.rows) == 20


async def test_a_bad_selector_is_reported_as_prometheus_says(
    lab: tuple[FleetPrometheus, DcgmExporter],
) -> None:
    prom, _ = lab
    snap = await once(prom.url, selector='cluster=~"("')
    assert snap.rows == () and not snap.unreachable
    assert snap.error is not None
    assert "HTTP 400 (bad query): bad_data" in snap.error and "parse" in snap.error
    code, line = fleet_check(snap)
    assert code == CheckCode.UNKNOWN and "HTTP 400" in line


async def test_a_query_too_big_for_the_server_is_422(tmp_path: Path) -> None:
    with serving(fleet(3)) as exporter:
        prom = FleetPrometheus(
            tmp_path, {"dcgm": [exporter.target]}, args=["--query.max-samples=10"]
        ).start()
        try:
            prom.wait_for("up == 1")  # one scrape in; anything bigger is refused
            snap = await once(prom.url)
        finally:
            prom.stop()
    assert snap.error is not None
    assert "HTTP 422 (cannot be executed): execution" in snap.error
    assert "too many samples" in snap.error


async def test_exporter_down_keeps_the_node_listed_as_critical(tmp_path: Path) -> None:
    with serving(fleet(3)) as main, serving(fleet(1, prefix="solo")) as solo:
        jobs = {"dcgm": [main.target], "solo": [solo.target]}
        prom = FleetPrometheus(tmp_path, jobs).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 32)
            first = await refresh(source := source_for(prom.url))
            assert {r.node for r in first.rows} == {
                "node-0001",
                "node-0002",
                "node-0003",
                "solo-0001",
            }
            solo.stop()
            prom.wait_for('up{job="solo"} == 0')
            snap = await refresh(source)
            await source.close()
        finally:
            prom.stop()
    row = next(r for r in snap.rows if r.node == "solo-0001")
    assert row.exporter_down and row.severity == Health.CRITICAL
    assert row.problems[0].rule == "exporter-down"
    assert row.last_seen is not None  # its last sample, from the hour before
    assert all(r.severity == Health.OK for r in snap.rows if r.node != "solo-0001")


async def test_prometheus_stopped_and_restarted(tmp_path: Path) -> None:
    with serving(fleet(5)) as exporter:
        prom = FleetPrometheus(tmp_path, {"dcgm": [exporter.target]}).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 40)
            source = source_for(prom.url, timeout=2)
            good = await refresh(source)
            assert len(good.rows) == 5 and good.error is None
            prom.stop()
            down = await refresh(source)
            assert down.unreachable and down.error is not None
            assert f"Prometheus at {prom.url} unreachable" in down.error
            assert down.rows == good.rows and down.data_at == good.data_at  # kept
            assert down.error_since is not None
            assert fleet_check(down)[0] == CheckCode.UNKNOWN
            prom.start()
            prom.wait_for("DCGM_FI_DEV_FB_USED", 40)
            back = await refresh(source)
            await source.close()
        finally:
            prom.stop()
    assert back.error is None and not back.unreachable and back.error_since is None
    assert len(back.rows) == 5 and back.data_at is not None and back.data_at > good.taken_at


async def test_a_thousand_nodes_of_eight_gpus(tmp_path: Path) -> None:
    nodes = fleet(1000, seed=3)
    nodes[500].gpus[3].remap_failure = 1
    with serving(nodes, cache=True) as exporter:
        prom = FleetPrometheus(
            tmp_path, {"dcgm": [exporter.target]}, scrape_interval="5s", scrape_timeout="5s"
        ).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 8000, timeout=120)
            snap = await once(prom.url, timeout=30)
        finally:
            prom.stop()
    assert snap.error is None
    assert len(snap.rows) == 1000 and {r.gpus for r in snap.rows} == {8}
    assert snap.stats.requests == len(FleetQueries().instant()) + 1  # not one per node
    worst = fleet_json(snap)["nodes"][0]
    assert worst["node"] == "node-0501" and worst["row_remap_failures"] == 1


async def test_headless_json_and_check(tmp_path: Path) -> None:
    nodes = fleet(4)
    nodes[1].gpus[0].remap_failure = 1
    with serving(nodes) as exporter:
        prom = FleetPrometheus(tmp_path, {"dcgm": [exporter.target]}).start()
        try:
            prom.wait_for("DCGM_FI_DEV_FB_USED", 32)
            config = tmp_path / "config.toml"
            config.write_text(f'[fleet.lab]\nprometheus = "{prom.url}"\n')
            env = {**os.environ, "GPUMON_CONFIG": str(config)}
            env.pop("TERM", None)
            cli = [sys.executable, "-m", "gpumon.tui.cli", "fleet", "lab"]
            run = subprocess.run(
                [*cli, "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            check = subprocess.run(
                [*cli, "--check"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            prom.stop()
            gone = subprocess.run(
                [*cli, "--check"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
        finally:
            prom.stop()
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert next(n["node"] for n in doc["nodes"]) == "node-0002"
    assert doc["nodes"][0]["problems"][0]["rule"] == "row-remap-failure"
    assert len(doc["nodes"]) == 4 and doc["error"] is None
    assert check.returncode == 2 and check.stdout.startswith("FLEET lab CRITICAL - 1 critical")
    assert gone.returncode == 3 and "unreachable" in gone.stdout


def test_the_headless_check_loads_no_ui_library(tmp_path: Path) -> None:
    """``fleet --check`` starts as the other headless commands do: no Textual, no Rich
    (httpx would bring Rich in through its command-line module; httpcore does not)."""
    config = tmp_path / "config.toml"
    config.write_text(f'[fleet.lab]\nprometheus = "http://127.0.0.1:{closed_port()}"\n')
    code = (
        "import json, sys\n"
        "from gpumon.tui.cli import main\n"
        "rc = main(['fleet', 'lab', '--check'])\n"
        "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    env = {**os.environ, "GPUMON_CONFIG": str(config)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    rc, modules = json.loads(out.stdout.splitlines()[-1])
    assert rc == 3 and out.stdout.startswith("FLEET lab UNKNOWN - Prometheus at")
    assert {"httpcore"} <= set(modules)
    assert set(modules) & {"textual", "rich", "plotext", "asyncssh", "httpx"} == set()
