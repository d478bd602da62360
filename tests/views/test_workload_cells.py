"""The pure parts of alerts and workloads on the dashboard: cells of servers and jobs, GPU
owners, the screen's line budget, pane columns, the strip, time to full, replay status."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import SglangConfig, VllmConfig
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.monitor import ReplaySource, replay_monitor
from gpumon.backends.parsers.sglang import SglangScrape
from gpumon.backends.recording import Recording
from gpumon.backends.sim import UPTIME_AT_T0, SimSettings, metrics_text
from gpumon.backends.workloads import JobTracker, SglangTracker, Workloads
from gpumon.themes import GPUMON_DARK
from gpumon.tui.dashboard import replay_status
from gpumon.tui.views import (
    HostNeeds,
    Palette,
    PaneView,
    alert_title,
    gpu_list_text,
    gpu_owners,
    history_cells,
    job_cells,
    jobs_view,
    latency_pair,
    limit_servers,
    model_short,
    plan_layout,
    rate_text,
    sglang_cells,
    sglang_view,
    strip_alert,
)
from gpumon.tui.views.alert_cells import (
    evidence_cells,
    incident_cells,
    incident_title,
    strip_incident,
)
from gpumon.tui.views.gpu_cells import NA, Cell, Role, gpu_cells, interval_text
from gpumon.tui.views.workload_cells import Owner, failed_cell, latency_ms_pair
from gpumon.tui.views.workload_views import PaneRow, spark_range, vllm_view
from gpumon.tui.widgets import (
    JOB_COLUMNS,
    SGLANG_COLUMNS,
    RowView,
    StripView,
    fit_columns,
    full_in_text,
    render_pane,
    render_row,
    render_strip,
    row_layout,
)
from gpumon.tui.widgets.workload_panes import VLLM_COLUMNS

import vllm_trackers
from alert_facts import log_facts

PALETTE = Palette.from_theme(GPUMON_DARK)


def test_numbers_read_short_and_unknown_is_na() -> None:
    assert [rate_text(v) for v in (0, 9.99, 812, 1203.4, 13000, 1.5e6)] == [
        "0", "9.99", "812", "1.20k", "13.0k", "1.50M",
    ]  # fmt: skip
    assert latency_pair(None, 0.9) == NA
    assert latency_pair(0.12, 0.45).text == "0.12/0.45s"  # one unit per column: seconds
    assert latency_pair(0.6, 2.67).text == "0.60/2.67s"
    assert latency_pair(0.3, None).text == "0.30s"
    assert model_short("Qwen/Qwen3-8B") == "Qwen3-8B"
    assert model_short("/models/llama\x1b[2J/") == "llama\\x1b[2J"
    assert model_short(None) is None
    assert gpu_list_text((5, 6, 7)) == "5-7"
    assert gpu_list_text((0, 2, 3, 7)) == "0,2-3,7"
    assert interval_text(1.00003) == "1s" and interval_text(0.5) == "0.5s"


def test_a_server_never_seen_is_waiting_and_a_down_one_says_why() -> None:
    fresh = sglang_cells(SglangTracker(30000))
    assert fresh["state"] == Cell("wait", Role.MUTED)
    assert all(fresh[k] == NA for k in ("tok/s", "run", "queue", "KV", "hit", "TTFT", "ITL"))
    down = SglangTracker(30001)
    down.mark_down(10.0, "connection refused")
    cells = sglang_cells(down)
    assert cells["state"] == Cell("down", Role.CRITICAL)
    assert cells["error"] == Cell("connection refused", Role.CRITICAL)


def test_a_server_up_with_no_request_is_idle_and_a_busy_one_up() -> None:
    """Issue 34 point 8: a server without traffic says so in its row (its GPUs at 0 % are
    no GPU held and idle)."""
    fixtures = Path(__file__).parents[1] / "fixtures" / "sglang"
    idle = SglangTracker(30000)
    idle.observe_http(200, (fixtures / "metrics_idle.prom").read_text(), 10.0)
    assert idle.idle is True and sglang_cells(idle)["state"] == Cell("idle", Role.MUTED)
    busy = SglangTracker(30001)
    busy.observe_http(200, (fixtures / "metrics_busy.prom").read_text(), 10.0)
    assert busy.idle is False and sglang_cells(busy)["state"] == Cell("up", Role.OK)
    busy.mark_down(11.0, "connection refused")
    assert busy.idle is None  # down: not known


def test_job_cells_say_how_it_ended_and_never_invent_zeros() -> None:
    job = JobTracker("drafter", "kv", (5, 6, 7))
    cells = job_cells(job)
    assert cells["state"].text == "no progress yet"
    assert [cells[k] for k in ("progress", "rate", "loss", "ETA")] == [NA] * 4
    job.feed("step 700/5000 | loss 2.2999 | 12.8 Ktok/s", 100.0)
    job.feed("step 701/5000 | loss 2.2990 | 12.8 Ktok/s", 101.0)
    cells = job_cells(job)
    assert cells["state"] == Cell("running", Role.OK)
    assert cells["progress"].text == "701/5000" and cells["GPUs"].text == "5-7"
    assert cells["rate"].text == "12.8k tok/s" and cells["loss"].text == "2.2990"
    assert cells["ETA"].text == "1h11m"  # 4299 steps at one a second
    job.mark_crashed("OOM on GPU 6", 102.0)
    cells = job_cells(job)
    assert cells["state"] == Cell("crashed: OOM on GPU 6", Role.CRITICAL)
    assert cells["rate"] == Cell("-", Role.MUTED)  # a crashed job runs at no rate
    assert cells["ETA"] == NA
    assert cells["progress"].text == "701/5000"  # where it stopped stays


def test_the_jobs_row_keeps_the_crash_whole_and_drops_the_parenthesis() -> None:
    # issue 26.3: "crashed: OOM on GPU 6 (GP…" cut the holder's words mid-word
    job = JobTracker("drafter", "kv", (5, 6, 7))
    job.feed("step 700/5000 | loss 2.2999 | 12.8 Ktok/s", 100.0)
    job.mark_crashed("OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)", 102.0)
    view = jobs_view({"drafter": job}, end=102.0, span=2.0, count=10, palette=PALETTE)
    assert view is not None
    row = render_pane(view, JOB_COLUMNS, 80).plain.split("\n")[1]
    assert "crashed: OOM on GPU 6 (…)" in row and "(GP" not in row


def test_the_jobs_row_says_the_whole_crash_where_the_width_is_free() -> None:
    """Issue 36 point 5: "crashed: OOM on GPU 6 (…)" with 130 columns free."""
    job = JobTracker("drafter", "kv", (5, 6, 7))
    job.feed("step 700/5000 | loss 2.2999 | 12.8 Ktok/s", 100.0)
    reason = "OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)"
    job.mark_crashed(reason, 102.0)
    view = jobs_view({"drafter": job}, end=102.0, span=2.0, count=10, palette=PALETTE)
    assert view is not None
    wide = render_pane(view, JOB_COLUMNS, 200).plain.split("\n")[1]
    assert f"crashed: {reason}" in wide
    assert len(wide.rstrip()) <= 200
    narrow = render_pane(view, JOB_COLUMNS, 80).plain.split("\n")[1]
    assert "crashed: OOM on GPU 6 (…)" in narrow  # no room: the parenthesis goes whole


def test_a_gpu_no_job_or_server_owns_is_named_by_its_program() -> None:
    # issue 26.8: GPUs 0-4 of the demo run train.target and said "-"
    target = GpuProcess(
        861, "python3", 80000, "U0", command="python3 -m train.target --rank 0",
        source="host", container="200",
    )  # fmt: skip
    jupyter = GpuProcess(
        None, "jupyter-lab", 6000, "U1", command="/usr/bin/jupyter-lab",
        source="host", container="201",
    )  # fmt: skip
    sample = HostSample("h", 0.0, None, _gpus(3), processes=(target, jupyter))
    drafter = {"drafter": JobTracker("drafter", "kv", (2,))}
    owners = gpu_owners(sample, drafter, {}, 200)
    assert owners[0] == Owner("train.target", Role.MUTED)
    assert 1 not in owners  # CT 201's jupyter is a foreign holder, not this GPU's owner
    assert owners[2].text == "drafter"
    assert gpu_owners(sample, {}, {}, 200) == {}  # no owner column: the rows keep the models


def _gpus(n: int) -> tuple[GpuSample, ...]:
    return tuple(GpuSample(index=i, uuid=f"U{i}") for i in range(n))


def test_gpu_owners_from_jobs_processes_or_one_server_per_gpu() -> None:
    servers = {p: SglangTracker(p) for p in (30001, 30000)}
    jobs = {"train": JobTracker("train", "kv", (0, 1))}
    procs = (GpuProcess(1, "sglang::scheduler_TP0", 10, "U2"), GpuProcess(2, "sglang::x", 5, "U3"))
    sample = HostSample("h", 0.0, None, _gpus(4), processes=procs)
    owners = gpu_owners(sample, jobs, servers)
    assert {i: o.text for i, o in owners.items()} == {
        0: "train", 1: "train", 2: "sglang:30000", 3: "sglang:30001",
    }  # fmt: skip
    eight = {p: SglangTracker(p) for p in range(30000, 30008)}
    plain = HostSample("h", 0.0, None, _gpus(8))  # no process names (container): by count
    assert gpu_owners(plain, {}, eight)[7].text == "sglang:30007"
    assert gpu_owners(plain, {}, servers) == {}  # 2 servers, 8 GPUs, no hint: no guess
    crashed = JobTracker("train", "kv", (0,))
    crashed.mark_crashed("OOM on GPU 0")
    assert gpu_owners(plain, {"train": crashed}, {})[0].role == Role.CRITICAL


def test_gpu_owners_name_vllm_servers_as_sglang_ones() -> None:
    # issue 38: a vLLM server's GPUs said its program ("VLLM::EngineCore"), not its port
    host = HostConfig(
        name="h", kind="local", sglang=SglangConfig(ports=(30000,)), vllm=VllmConfig(ports=(8000,))
    )
    w = Workloads(host)
    procs = (
        GpuProcess(1, "sglang::scheduler_TP0", 10, "U0"),
        GpuProcess(2, "VLLM::EngineCore", 10, "U1"),
    )
    sample = HostSample("h", 0.0, None, _gpus(2), processes=procs)
    owners = gpu_owners(sample, w.jobs, w.sglang, None, w.vllm_gpus(sample))
    assert {i: o.text for i, o in owners.items()} == {0: "sglang:30000", 1: "vllm:8000"}
    assert owners[1].role == Role.NORMAL
    down = gpu_owners(sample, {}, {}, None, w.vllm_gpus(sample), vllm_down=frozenset({8000}))
    assert down[1] == Owner("vllm:8000", Role.CRITICAL)
    jobs = {"train": JobTracker("train", "kv", (1,))}  # a configured job wins, as over SGLang
    assert gpu_owners(sample, jobs, {}, None, w.vllm_gpus(sample))[1].text == "train"


def test_plan_gives_panes_their_lines_before_taller_rows() -> None:
    oom = plan_layout(24, [HostNeeds(8, jobs=1)], strip=True)
    assert oom.row_height == 1 and oom.max_servers == (None,)
    sglang = plan_layout(24, [HostNeeds(8, servers=8)])
    assert sglang.max_servers == (None,)  # 1+1+8 + title+all+8 + margin + footer = 22
    short = plan_layout(18, [HostNeeds(8, servers=8)], strip=True)
    assert short.max_servers == (3,)  # 18 - footer - strip - 11 (host) - 2 (title, all)
    tall = plan_layout(60, [HostNeeds(8, servers=8)])
    assert tall.row_height == 3 and tall.max_servers == (None,)
    two = plan_layout(40, [HostNeeds(8, servers=8), HostNeeds(8, servers=8)])
    assert two.row_height == 1 and two.max_servers == (None, 5)  # the first host first


def _server_view() -> PaneView:
    """Four servers that answered once (no rates yet), the third then went down."""
    servers = {}
    for i, port in enumerate(range(30000, 30004)):
        s = SglangTracker(port)
        s.observe_text(metrics_text(SimSettings(scenario="sglang"), i, 30.0, -UPTIME_AT_T0), 9.0)
        if port == 30002:
            s.mark_down(10.0, "connection refused")
        servers[port] = s
    view = sglang_view(servers, end=10.0, span=2.0, count=40, palette=PALETTE)
    assert view is not None
    return view


def test_the_sglang_pane_says_its_units() -> None:
    # issue 26.8: "run", "queue" count requests and "KV" is the cache's used share
    view = _server_view()
    title = render_pane(view, SGLANG_COLUMNS, 140).plain.split("\n")[0]
    assert " KV use " in title and "run, queue: requests; KV use: cache used" in title
    narrow = render_pane(view, SGLANG_COLUMNS, 80).plain.split("\n")[0]
    assert "KV use" in narrow and "cache used" not in narrow and "…" not in narrow  # whole or not


def test_a_rate_sparkline_is_drawn_in_its_own_range() -> None:
    # issue 26.8: 1.13k-1.24k tok/s from 0 was a row of ▇ and █
    assert spark_range([1130.0, None, 1240.0]) == (1102.5, 1240.0)
    assert spark_range([1000.0, 1004.0]) == (903.6, 1004.0)  # noise stays small steps
    assert spark_range([]) == (0.0, 0.0)
    rates: tuple[float | None, ...] = (1130.0, 1240.0, 1150.0, 1200.0, 1180.0, 1240.0)
    lo, hi = spark_range(rates)
    row = PaneRow("30000", (("name", Cell(":30000")),), rates, hi, lo)
    view = PaneView("SGLang", "tok/s history", (row,), PALETTE)
    spark = render_pane(view, SGLANG_COLUMNS, 80).plain.split("\n")[1].split()[-1]
    assert spark == "▂█▃▆▅█"  # the lowest a low bar, the top full


def test_limited_server_lines_keep_the_aggregate_and_the_broken_ones() -> None:
    view = _server_view()
    assert [r.key for r in view.rows] == ["all", "30000", "30001", "30002", "30003"]
    limited = limit_servers(view, 2)
    assert limited is not None
    assert [r.key for r in limited.rows] == ["all", "30000", "30002"]
    assert limited.spark_title.startswith("+2 more")
    assert limit_servers(view, None) is view


def test_panes_drop_low_priority_columns_first_and_show_errors() -> None:
    view = _server_view()
    narrow, spark = fit_columns(SGLANG_COLUMNS, view.rows, 60)
    keys = [c.key for c, _ in narrow]
    assert keys[:2] == ["name", "state"] and "tok/s" in keys
    assert "model" not in keys and "ITL" not in keys
    assert spark == 0 or spark >= 8
    wide, _ = fit_columns(SGLANG_COLUMNS, view.rows, 200)
    # the drafter's accept-length column only where a server has a drafter
    assert [c.key for c, _ in wide] == [c.key for c in SGLANG_COLUMNS if not c.optional]
    lines = render_pane(view, SGLANG_COLUMNS, 80).plain.split("\n")
    assert lines[0].startswith("SGLang") and "tok/s" in lines[0]
    assert lines[1].startswith("all") and "3/4" in lines[1]
    down = next(line for line in lines if line.startswith(":30002"))
    assert "down" in down and "connection refused" in down
    assert all(len(line) <= 80 for line in lines)
    assert "n/a" in lines[2]  # never scraped: unknown, not 0


def test_a_drafter_shows_its_accept_length_in_the_sglang_pane() -> None:
    """Issue 25.5: the simulator's server of GPU 2 in ``hang`` runs a drafter at accept
    length 1.04 (rate 1 %): an ``accept`` column, a warning colour; a server without a
    drafter has none (SGLang's 0.0 default is not shown as 0)."""
    hang = SimSettings(scenario="hang")
    servers = {}
    for index in (1, 2):
        tracker = SglangTracker(30000 + index)
        for t in (10.0, 14.0):
            tracker.observe_text(metrics_text(hang, index, t, -UPTIME_AT_T0), t)
        servers[tracker.port] = tracker
    view = sglang_view(servers, end=14.0, span=2.0, count=40, palette=PALETTE)
    assert view is not None
    lines = render_pane(view, SGLANG_COLUMNS, 140).plain.split("\n")
    assert "accept" in lines[0]
    drafter = next(line for line in lines if line.startswith(":30002"))
    plain = next(line for line in lines if line.startswith(":30001"))
    assert "1.04 1%" in drafter and "1.04" not in plain
    row = next(r for r in view.rows if r.key == "30002")
    assert row.cell("acc") == Cell("1.04 1%", Role.WARNING)


def test_jobs_pane_marks_the_cursor_row() -> None:
    jobs = {"a": JobTracker("a"), "b": JobTracker("b")}
    view = jobs_view(jobs, end=0.0, span=2.0, count=10, palette=PALETTE, cursor=1)
    assert view is not None and [r.key for r in view.rows] == ["a", "b"]
    text = render_pane(view, JOB_COLUMNS, 80)
    assert text.plain.split("\n")[0].startswith("jobs")
    lines = text.split("\n")
    assert any(s.style == PALETTE.cursor_style for s in lines[2].spans)  # b: the cursor
    assert not any(s.style == PALETTE.cursor_style for s in lines[1].spans)
    assert jobs_view({}, end=0.0, span=2.0, count=10, palette=PALETTE) is None


def _alert(key: str, severity: Health, t: float, **kw: object) -> Alert:
    base = Alert(key, severity, "cuda_oom", "ct200", 6, "drafter", "OOM\x1b[2J!", t, t)
    if "message" in kw:
        base = dataclasses.replace(base, first_message="", peak_message="")
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


OOM_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 90.00 MiB is free."
)


def test_the_strip_shows_the_most_urgent_incident_headline_first() -> None:
    old = _alert("a", Health.CRITICAL, 10.0, job="target", gpu=0, kind="xid")
    new = _alert("b", Health.CRITICAL, 20.0)
    drop = _alert("d", Health.CRITICAL, 21.0, kind="oom_death", message="GPU 6 memory fell")
    warn = _alert("c", Health.WARNING, 30.0, job=None, gpu=3, kind="memory")
    assert strip_alert([old, warn, new]) == (new, 2)
    found = incidents([old, warn, new, drop])
    top, more = strip_incident(found)
    assert top is not None and top.cause is new and top.evidence == (drop,) and more == 2
    assert strip_incident(incidents([warn]))[0] == incidents([warn])[0]
    acked = [dataclasses.replace(a, acknowledged=True) for a in (old, new, drop)]
    assert strip_incident(incidents([*acked, warn]))[0] == incidents([warn])[0]
    assert strip_incident(incidents([dataclasses.replace(new, active=False)])) == (None, 0)
    line = render_strip(StripView(top, more, PALETTE), 120).plain
    assert "CRITICAL" in line and "ct200" in line and "drafter: CUDA OOM on GPU 6" in line
    assert "— r restart drafter" in line and "+1 evidence, +2 more, a: list" in line
    assert "\x1b" not in line
    roomy = render_strip(StripView(top, more, PALETTE), 68).plain
    assert roomy == " ✖  drafter: CUDA OOM on GPU 6 — r restart drafter  (+3) a: list"  # shrunk
    narrow = render_strip(StripView(top, more, PALETTE), 48).plain
    assert len(narrow) == 48 and narrow.endswith("… — r restart drafter  a: list")  # cut
    # "r restart drafter" names the job: at 80 columns the headline says it no more and
    # the counts go, before the key numbers would (issue 26.3)
    oom = dataclasses.replace(
        new, message=OOM_TEXT, first_message="", peak_message="", facts=log_facts(OOM_TEXT)
    )
    (story,) = incidents([oom, drop])
    at_80 = render_strip(StripView(story, 1, PALETTE), 80).plain
    assert at_80 == (
        " ✖  CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free) — r restart drafter  a: list"
    )
    assert alert_title(new) == "CRITICAL: CUDA out of memory"
    assert incident_title(top) == "CRITICAL: CUDA out of memory"
    cells = history_cells(dataclasses.replace(new, active=False, acknowledged=True), 25.0)
    assert cells[5].text == "✓ack" and cells[0].role == Role.MUTED


def test_history_rows_keep_the_raised_and_peak_values_and_show_now_apart() -> None:
    cleared = dataclasses.replace(
        _alert("m", Health.CRITICAL, 10.0, kind="memory"),
        message="GPU 6 memory 0.0% used, 95.0 GiB free",
        first_message="GPU 6 memory 95.1% used, 4.1 GiB free",
        peak_message="GPU 6 memory 99.0% used, 0.4 GiB free",
        peak_severity=Health.CRITICAL,
    )
    ended = history_cells(dataclasses.replace(cleared, active=False), 20.0)
    assert ended[0].text.endswith("critical")
    assert ended[6].text == (
        "GPU 6 memory 95.1% used, 4.1 GiB free · peak GPU 6 memory 99.0% used, 0.4 GiB free"
    )
    assert "0.0%" not in ended[6].text and ended[7].text == ""  # no rewritten history
    stepped_down = dataclasses.replace(cleared, severity=Health.WARNING)
    live = history_cells(stepped_down, 20.0)
    assert live[0].text.endswith("critical") and live[7].text.startswith("GPU 6 memory 0.0%")
    (incident,) = incidents([stepped_down, _alert("o", Health.CRITICAL, 11.0)])
    head = incident_cells(incident, 20.0)
    assert head[6].text.startswith("drafter: CUDA OOM on GPU 6") and head[5].text == "active"
    (evidence,) = [evidence_cells(a, 20.0) for a in incident.evidence]
    assert evidence[0].text == "└ critical" and evidence[0].role == Role.MUTED


def test_full_in_replaces_the_newest_sparkline_columns_and_fits() -> None:
    assert full_in_text(40.2, 13) == "full in ~40 s"
    assert full_in_text(40.2, 12) == "full in ~40s"
    assert full_in_text(40.2, 9) == "full ~40s"
    assert full_in_text(300.0, 20) == "full in ~5 min"
    assert full_in_text(40.0, 3) == ""
    gpu = GpuSample(index=6, uuid="U", memory_total_mib=97887, memory_used_mib=93000)
    for width in (80, 120, 200):
        view = RowView(
            cells=gpu_cells(gpu, Health.WARNING),
            spark=(90000.0,) * 100,
            spark_max=97887.0,
            spark_is_memory=True,
            stale=False,
            cursor=False,
            height=1,
            processes=Cell(""),
            palette=PALETTE,
            memory_rules=AlertRules(),
            owner=Cell("drafter"),
            full_in=40.0,
        )
        text = render_row(view, row_layout(width)).plain
        assert len(text) == width and text.rstrip().endswith("s")
        assert "full" in text and "~40" in text  # "full ~40s" at 80 columns
        assert ("drafter" in text) and (("RTX" in text) is False)


def test_replay_status_says_speed_pause_end_and_position(utc: None, tmp_path: Path) -> None:
    samples = [HostSample("ct200", 1000.0 + i, None, _gpus(1)) for i in range(3)]
    replay = ReplaySource(Recording({"host": "ct200"}, samples, []), tmp_path / "r.jsonl.gz")
    replay_monitor(replay)  # the monitor it plays into
    assert replay_status(replay) == "REPLAY 1x, 00:16:40 (0/3)"
    replay.set_paused(True)
    replay.step()
    assert replay_status(replay) == "REPLAY paused, 00:16:40 (1/3)"
    replay.set_paused(False)
    replay.faster()
    assert replay_status(replay) == "REPLAY 2x, 00:16:40 (1/3)"
    replay.step()
    replay.step()
    assert replay_status(replay) == "REPLAY ended, 00:16:42 (3/3)"


def test_the_model_cell_says_the_servers_parallelism_from_its_server_info() -> None:
    """SGLang 0.5.9 `/server_info` of DP attention 4 on 8 GPUs (tests/fixtures/sglang)."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "sglang"
    s = SglangTracker(30000)
    s.observe_info(200, (fixtures / "0.5.9" / "server_info.json").read_text())
    assert sglang_cells(s)["model"].text == "DeepSeek-V3 DP 4 TP 8"
    single = SglangTracker(30001)
    single.observe_info(200, (fixtures / "0.5.10" / "server_info.json").read_text())
    assert sglang_cells(single)["model"].text == "Qwen3-8B"  # one GPU: nothing to add


def test_job_state_says_torchrun_restarts_and_the_crash_its_root_cause() -> None:
    job = JobTracker("drafter", "kv", (5, 6, 7))
    job.feed("step 1/100 | loss 2.0", 100.0)
    job.feed("[default] Worker group FAILED. 3/3 attempts left; will restart worker group", 101.0)
    job.feed("[default] Worker group FAILED. 2/3 attempts left; will restart worker group", 102.0)
    assert job_cells(job)["state"] == Cell("running, 2 torchrun restarts", Role.WARNING)
    for text in ("Root Cause (first observed failure):", "  rank      : 2 (local_rank: 2)"):
        job.feed(text, 103.0)
    job.feed("  exitcode  : 1 (pid: 4120)", 103.0)
    job.mark_crashed(f"crash ({job.root_cause.text if job.root_cause else ''})", 104.0)
    cell = job_cells(job)["state"]
    assert cell == Cell("crashed: crash (first failure: rank 2 exited with 1)", Role.CRITICAL)


def test_stalled_and_slow_jobs_have_their_own_titles() -> None:
    for kind, title in (("job_stalled", "Job stalled"), ("job_slow", "Job slow")):
        alert = Alert(f"{kind}:drafter", Health.CRITICAL, kind, "ct200", None, "drafter", "x", 1, 1)
        assert alert_title(alert) == f"CRITICAL: {title}"


def test_the_vllm_pane_says_a_wedged_engine_in_red_and_na_where_a_release_has_none() -> None:
    """vLLM's overview dashboard per server (issue 38 point 3); a wedged engine's state is
    its silence in the critical colour, never ``up``; 0.6's page has no prefix-cache
    counters and no finished requests: n/a, never 0."""
    now = 10_000.0
    servers = {8000: vllm_trackers.busy(8000, now), 8001: vllm_trackers.wedged(8001, now)}
    view = vllm_view(
        servers, now=now, hung_after_s=60.0, end=now, span=2.0, count=80, palette=PALETTE
    )
    assert view is not None and view.label == "vLLM"
    up, stuck = view.rows
    assert up.cell("state") == Cell("up", Role.OK)
    assert stuck.cell("state") == Cell("wedged 1m05s", Role.CRITICAL)
    assert stuck.cell("tok/s") == Cell("0")  # known: nothing made
    assert (up.cell("run"), up.cell("queue")) == (Cell("48"), Cell("6"))  # two engines
    assert up.cell("KV") == Cell("62%")
    assert up.cell("tok/s") == Cell("400") and up.cell("in/s") == Cell("400")
    assert up.cell("TTFT") == Cell("0.13/0.91s") and up.cell("ITL") == Cell("18/25ms")
    assert up.cell("pre/s") == Cell("0") and up.cell("failed") == Cell("0")
    assert stuck.cell("hit") is NA and stuck.cell("failed") is NA  # 0.6: none on its page
    assert up.cell("acc") is None  # no drafter: no accept column
    wide = render_pane(view, VLLM_COLUMNS, 160).plain.splitlines()
    assert wide[0].split()[:3] == ["vLLM", "model", "tok/s"]
    assert "ITL p50/95" in wide[0] and "failed" in wide[0] and "pre/s" in wide[0]
    assert wide[2].startswith(":8001  wedged 1m05s Qwen3-8B")
    narrow = render_pane(view, VLLM_COLUMNS, 80).plain.splitlines()
    assert all(len(line) <= 80 for line in narrow)
    assert "wedged 1m05s" in narrow[2] and "KV use" in narrow[0]  # what gives way: ITL, in/s


def test_vllm_failed_requests_and_the_drafter_cells() -> None:
    assert failed_cell((("abort", 6.0), ("error", 1.0), ("repetition", 0.0)), Role.NORMAL) == (
        Cell("6 abort 1 error", Role.WARNING)
    )
    assert failed_cell((("abort", 0.0),), Role.NORMAL) == Cell("0")
    assert failed_cell(None, Role.NORMAL) is NA
    assert latency_ms_pair(0.018, None) == Cell("18ms") and latency_ms_pair(None, 0.1) is NA


def test_a_job_whose_step_is_overdue_says_when_its_last_step_came() -> None:
    """Issue 36.1: the stall scenario's row kept ``13.0k tok/s ETA 1h11m`` long after its
    last step. Past 3 usual intervals (at least 10 s) the row says how long ago the last
    step came, a warning, whole at 80 columns; never the last rate or ETA."""
    job = JobTracker("drafter", "kv", (5, 6, 7))
    for k in range(10):
        job.feed(f"step {700 + k}/5000 | loss 2.2999 | 12.8 Ktok/s", 100.0 + k)
    assert job_cells(job, 114.0)["rate"].text == "12.8k tok/s"  # 5 s: not yet overdue
    cells = job_cells(job, 149.0)
    assert cells["rate"] == Cell("— (last step 40 s ago)", Role.WARNING)
    assert cells["ETA"] == Cell("—", Role.WARNING)
    view = jobs_view({"drafter": job}, end=149.0, span=2.0, count=10, palette=PALETTE)
    assert view is not None
    row = render_pane(view, JOB_COLUMNS, 80).plain.split("\n")[1]
    assert "— (last step 40 s ago)" in row and "12.8k" not in row and "1h11m" not in row
    job.feed("step 710/5000 | loss 2.2999 | 12.8 Ktok/s", 150.0)  # it goes on
    assert job_cells(job, 151.0)["rate"].text == "12.8k tok/s"


def test_a_hung_server_says_hung_and_for_how_long_never_up() -> None:
    """Issue 36.1: a hung SGLang server's row said ``up`` in the OK colour; judged hung
    (``Workloads.judge_hung``) it says ``hung 45 s``, critical, whole at 80 columns."""
    sglang = SglangConfig(ports=(30000,), hung_after_s=30.0)
    workloads = Workloads(HostConfig(name="ct200", kind="ssh", sglang=sglang))
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[30000]
    for t in range(0, 30, 5):
        tracker.observe(SglangScrape(running=37.0, queued=2.0, decode_tokens=500.0), float(t))
        workloads.judge_hung(engine, float(t))
    assert sglang_cells(tracker)["state"] == Cell("up", Role.OK)  # 25 s: not yet hung
    tracker.observe(SglangScrape(running=37.0, queued=2.0, decode_tokens=500.0), 45.0)
    workloads.judge_hung(engine, 45.0)
    assert sglang_cells(tracker)["state"] == Cell("hung 45 s", Role.CRITICAL)
    view = sglang_view({30000: tracker}, end=45.0, span=2.0, count=10, palette=PALETTE)
    assert view is not None
    assert "hung 45 s" in render_pane(view, SGLANG_COLUMNS, 80).plain
    tracker.observe(SglangScrape(running=37.0, queued=2.0, decode_tokens=600.0), 50.0)
    workloads.judge_hung(engine, 50.0)  # tokens again
    assert sglang_cells(tracker)["state"] == Cell("up", Role.OK)
