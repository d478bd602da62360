"""``sglang_hung``: a server with requests and no token for ``hung_after_s`` (issue 25.1).

The pages and log lines are the simulator's (``scenario hang``), in SGLang 0.5.18's
formats, read through the real parsers; the false positives (a long prefill, an idle
server, a server that just started) each have a test that fails if the rule fires.
"""

from __future__ import annotations

import pytest

from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import SglangConfig
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.parsers.sglang import SglangScrape
from gpumon.backends.sim.scenario import HANG_AT, SimSettings, wall_time
from gpumon.backends.sim.sglang_model import (
    HUNG_INDEX,
    LOG_INTERVAL_S,
    PREFILL_INDEX,
    UPTIME_AT_T0,
    log_lines,
    metrics_text,
)
from gpumon.backends.workloads.sglang import SglangTracker
from gpumon.backends.workloads.watch import Workloads

SETTINGS = SimSettings(scenario="hang")
STARTED = -UPTIME_AT_T0


def _scrape(tracker: SglangTracker, index: int, t: float) -> None:
    """One fetch of the simulated server ``index`` at scenario time ``t``."""
    tracker.observe_http(200, metrics_text(SETTINGS, index, t, STARTED), wall_time(SETTINGS, t))


def _log_until(tracker: SglangTracker, index: int, t: float, back: int = 60) -> None:
    """The tail of server ``index``'s log as written by scenario time ``t`` (``back`` log
    intervals), read at ``t``."""
    due = int((t - STARTED) // LOG_INTERVAL_S)
    for epoch in range(due - back, due + 1):
        for line in log_lines(SETTINGS, index, epoch, STARTED):
            tracker.observe_log_line(line, wall_time(SETTINGS, t))


def _watch(index: int, start: float, end: float, log: bool = False) -> list[tuple[float, bool]]:
    """Scrape server ``index`` every second from ``start`` to ``end`` (scenario s): the
    times and whether it was hung then."""
    tracker = SglangTracker(30000 + index)
    if log:
        _log_until(tracker, index, start)
    out = []
    t = start
    while t <= end:
        _scrape(tracker, index, t)
        out.append((t, tracker.hung(wall_time(SETTINGS, t), 60.0) is not None))
        t += 1.0
    return out


def test_frozen_counters_with_requests_are_hung_within_the_threshold() -> None:
    seen = _watch(HUNG_INDEX, HANG_AT - 20, HANG_AT + 80)
    first = next(t for t, hung in seen if hung)
    # watched from before the hang: hung once the counters stood still 60 s (+ one scrape)
    assert HANG_AT + 60 <= first <= HANG_AT + 62
    assert all(hung for t, hung in seen if t >= first)


def test_headline_and_the_log_evidence() -> None:
    tracker = SglangTracker(30000)
    _log_until(tracker, HUNG_INDEX, 150.0)
    for t in (150.0, 151.0, 152.0):
        _scrape(tracker, HUNG_INDEX, t)
    verdict = tracker.hung(wall_time(SETTINGS, 152.0), 60.0)
    # read at 150 s, the log's last decode line (about 60 s) says how long it has been
    assert verdict is not None
    assert verdict.running == 37
    assert 90 <= verdict.silent_s <= 95
    assert verdict.headline().startswith("sglang :30000 hung: 37 running, ")
    assert verdict.headline().endswith(f"no token for {verdict.silent_s:.0f} s")
    assert verdict.last_decode is not None
    line, age = verdict.last_decode
    assert "Decode batch" in line and 90 <= age <= 95


def test_one_scrape_is_not_enough_to_call_it_hung() -> None:
    """With metrics on, the counters must be seen still: a stamp in another time zone
    must not make a busy server hung."""
    tracker = SglangTracker(30000)
    _log_until(tracker, HUNG_INDEX, 150.0)
    _scrape(tracker, HUNG_INDEX, 150.0)
    assert tracker.hung(wall_time(SETTINGS, 150.5), 60.0) is None


def test_scrapes_read_apart_but_taken_in_one_turn_are_hung() -> None:
    """A loaded event loop takes two scrapes the agent read 2 s apart in one turn: their
    rate (0, by the target's span) ends a one-shot's wait, so the hung verdict must not
    want them 2 s apart by arrival too (CI at load 15: ``snapshot --scenario hang`` listed
    no ``sglang_hung``)."""
    tracker = SglangTracker(30000)
    _log_until(tracker, HUNG_INDEX, 150.0)
    came = wall_time(SETTINGS, 160.0)
    for read, t in ((150.0, came), (152.0, came + 0.05)):
        metrics = metrics_text(SETTINGS, HUNG_INDEX, read, STARTED)
        tracker.observe_http(200, metrics, t, at=wall_time(SETTINGS, read))
    assert tracker.gen_tokens_per_s == 0.0  # the one-shot's wait is over
    verdict = tracker.hung(came + 0.05, 60.0)
    assert verdict is not None and verdict.running == 37


def test_a_long_prefill_is_not_hung() -> None:
    """Decode flat for 90 s, prefill tokens moving: not hung (fails if the rule fires)."""
    assert not any(hung for _, hung in _watch(PREFILL_INDEX, HANG_AT - 20, HANG_AT + 90))
    assert not any(hung for _, hung in _watch(PREFILL_INDEX, 150.0, 160.0, log=True))


def test_a_busy_server_is_not_hung() -> None:
    assert not any(hung for _, hung in _watch(2, 0.0, 150.0, log=True))


def test_an_idle_server_is_not_hung() -> None:
    """Nothing running or queued and no token for ten minutes: idle, not hung."""
    tracker = SglangTracker(30000)
    for t in range(0, 600, 5):
        tracker.observe(SglangScrape(running=0.0, queued=0.0, decode_tokens=1234.0), float(t))
        assert tracker.hung(float(t), 60.0) is None


def test_a_server_that_just_started_counts_from_when_it_was_seen() -> None:
    """Requests came in, the first prefill is not done, the log's decode lines are the
    last run's: not hung before it was watched ``hung_after_s``."""
    tracker = SglangTracker(30000)
    _log_until(tracker, 2, 150.0)  # an earlier run's lines, about to be 100 s old
    later = wall_time(SETTINGS, 250.0)
    for k in range(0, 61, 5):
        page = SglangScrape(running=37.0, queued=4.0, decode_tokens=0.0, prefill_compute_tokens=0.0)
        tracker.observe(page, later + k)
        hung = tracker.hung(later + k, 60.0)
        assert (hung is not None) == (k >= 60)


def test_progress_resumed_ends_it_and_a_restart_starts_over() -> None:
    tracker = SglangTracker(30000)
    for t in range(0, 70, 5):
        tracker.observe(SglangScrape(running=37.0, decode_tokens=500.0), float(t))
    assert tracker.hung(65.0, 60.0) is not None
    tracker.observe(SglangScrape(running=37.0, decode_tokens=900.0), 70.0)
    assert tracker.hung(70.0, 60.0) is None
    tracker.observe(SglangScrape(running=37.0, decode_tokens=10.0), 75.0)  # restarted
    tracker.observe(SglangScrape(running=37.0, decode_tokens=10.0), 80.0)
    assert tracker.hung(80.0, 60.0) is None
    assert tracker.hung(136.0, 60.0) is not None


HEALTH_FAILED = (
    "[2026-11-29 14:33:25] Health check failed. Server couldn't get a response from "
    "detokenizer for last 20 seconds. tic start time: 14:33:05. last_heartbeat time: 14:33:00"
)


def test_a_failed_health_check_after_the_last_token_is_an_early_hang() -> None:
    """Issue 36.1: its log's failed health check with no token since is the hang before
    ``hung_after_s`` (asked ``early``); a token after it ends that, and a check that
    failed before the last token says nothing."""
    tracker = SglangTracker(30000)
    for t in range(0, 25, 5):
        tracker.observe(SglangScrape(running=37.0, decode_tokens=500.0), float(t))
    assert tracker.hung(20.0, 60.0, early=True) is None  # no word from its log yet
    tracker.observe_log_line(HEALTH_FAILED, 22.0)  # read as soon as written
    early = tracker.hung(22.0, 60.0, early=True)
    assert early is not None and early.early
    assert early.headline() == "sglang :30000 may be hung: 37 running, no token for 22 s"
    assert tracker.hung(22.0, 60.0) is None  # not asked early: hung_after_s only
    late = tracker.hung(61.0, 60.0, early=True)
    assert late is not None and not late.early
    tracker.observe(SglangScrape(running=37.0, decode_tokens=900.0), 65.0)
    assert tracker.hung(65.0, 60.0, early=True) is None  # tokens again, after the check


def test_gen_throughput_keeping_its_value_is_not_progress() -> None:
    """Before 0.5.7 the gauge keeps its last value: only the counters count."""
    tracker = SglangTracker(30000)
    for t in range(0, 70, 5):
        page = SglangScrape(running=37.0, gen_throughput=1145.0, generation_tokens=9000.0)
        tracker.observe(page, float(t))
    assert tracker.hung(65.0, 60.0) is not None


@pytest.mark.parametrize("after", [30.0, 90.0])
def test_the_alert_is_a_critical_condition_with_the_headline(after: float) -> None:
    sglang = SglangConfig(ports=(30000,), hung_after_s=after)
    host = HostConfig(name="ct200", kind="ssh", sglang=sglang)
    workloads = Workloads(host)
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[30000]
    for t in range(0, 200, 5):
        tracker.observe(SglangScrape(running=37.0, queued=2.0, decode_tokens=500.0), float(t))
        workloads.judge_hung(engine, float(t))
        [*alerts] = engine.active()
        assert bool(alerts) == (t >= after)
    [alert] = engine.active()
    assert (alert.kind, alert.severity) == ("sglang_hung", Health.CRITICAL)
    assert alert.message.startswith("sglang :30000 hung: 37 running, 2 queued, no token for 195 s")
    [incident] = incidents(engine.active())
    assert incident.headline.startswith("sglang :30000 hung: 37 running")
    tracker.observe(SglangScrape(running=37.0, queued=2.0, decode_tokens=600.0), 200.0)
    workloads.judge_hung(engine, 200.0)
    assert engine.active() == []  # progress resumed: it resolves by itself


def test_health_generate_is_asked_only_while_hung_and_once_per_threshold() -> None:
    host = HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=(30000,)))
    workloads = Workloads(host)
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    tracker = workloads.sglang[30000]
    asked: list[tuple[int, tuple[str, str]]] = []

    def watch(start: int, end: int) -> None:
        for t in range(start, end, 5):
            tracker.observe(SglangScrape(running=37.0, decode_tokens=500.0), float(t))
            asked.extend((t, probe) for probe in workloads.judge_hung(engine, float(t)))

    watch(0, 125)
    url, tag = "http://127.0.0.1:30000/health_generate", "sglang-health:30000"
    workloads.on_http(tag, 503, "", None, 141.0)  # SGLang's answer 21 s after the ask
    watch(145, 150)
    [alert] = engine.active()
    assert alert.message.startswith(
        "sglang :30000 hung: 37 running, no token for 145 s; "
        "/health_generate timed out (503 after 21 s)"
    )
    watch(150, 200)
    assert asked == [(60, (url, tag)), (120, (url, tag)), (180, (url, tag))]
    workloads.on_http(tag, None, "", "timed out", 205.0)
    watch(205, 210)
    assert "; /health_generate timed out;" in engine.active()[0].message + ";"


def test_a_failed_health_check_in_the_logs_backlog_is_the_hangs_evidence() -> None:
    """The line SGLang's ``health_generate`` logs (python/sglang/srt/entrypoints/
    http_server.py, v0.5.18) read in the log's tail at start, before gpumon came: no alert
    is raised for a past line, but it is still this hang's evidence. One stamped before
    the last progress belongs to an earlier stall and is not."""
    workloads = Workloads(HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=(30000,))))
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: wall_time(SETTINGS, 150.0))
    path = "/var/log/sglang/sglang-30000.log"
    due = int((150.0 - STARTED) // LOG_INTERVAL_S)
    backlog = [
        line for e in range(due - 60, due + 1) for line in log_lines(SETTINGS, 0, e, STARTED)
    ]
    assert sum("Health check failed" in line for line in backlog) == 1
    workloads.on_log("sglang", path, backlog, wall_time(SETTINGS, 150.0), backlog=True)
    engine.on_log_lines(path, backlog, backlog=True)
    assert engine.active() == []  # a past line: no alert of its own
    tracker = workloads.sglang[30000]
    for t in (150.0, 151.0, 152.0):
        _scrape(tracker, HUNG_INDEX, t)
    workloads.judge_hung(engine, wall_time(SETTINGS, 152.0))
    [alert] = engine.active()
    assert "; /health_generate timed out (its log); last decode line at " in alert.message
    # the same line stamped before the server's last progress: another stall's
    tracker.health_failed_at = (tracker.log_progress_at or 0.0) - 1.0
    workloads.judge_hung(engine, wall_time(SETTINGS, 153.0))
    assert "/health_generate" not in engine.active()[0].message


def test_the_agent_takes_only_local_probes() -> None:
    from gpumon.backends.remote import protocol

    probe = protocol.Probe("http://127.0.0.1:30000/health_generate", "sglang-health:30000", 25)
    assert protocol.decode_command(probe.encode().decode()) == probe
    other = protocol.Probe("http://10.0.0.1:30000/health_generate", "x", 25)
    assert protocol.decode_command(other.encode().decode()) is None


def _tp_sample(util: float, power: float, tp: int = 2) -> HostSample:
    """One TP-``tp`` server's GPUs at ``util`` % and ``power`` W of 600 W."""
    gpus = tuple(
        GpuSample(index=i, uuid=f"GPU-{i}", utilization_pct=util, power_w=power,
                  power_limit_w=600.0)
        for i in range(tp)
    )  # fmt: skip
    procs = tuple(
        GpuProcess(100 + i, f"sglang::scheduler_TP{i}", 80000, f"GPU-{i}") for i in range(tp)
    )
    return HostSample("ct200", 0.0, None, gpus, procs)


@pytest.mark.parametrize(
    ("util", "power", "tp", "said"),
    [
        (100.0, 115.0, 2, "GPUs 0,1 at 100 % utilisation on 115/115 W of 600 W: an NCCL spin"),
        # one GPU has no peer here: no "NCCL spin" said as a certainty
        (100.0, 115.0, 1, "GPU 0 at 100 % utilisation on 115 W of 600 W: a kernel spins"),
        (2.0, 60.0, 2, "GPUs 0,1 idle (2 %): stuck off the GPU"),
        (100.0, 480.0, 2, None),  # busy at full power: computing, no signature to name
    ],
)
def test_the_hung_servers_gpus_say_how_it_hangs(
    util: float, power: float, tp: int, said: str | None
) -> None:
    workloads = Workloads(HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=(30000,))))
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    for t in range(0, 70, 5):
        workloads.sglang[30000].observe(SglangScrape(running=37.0, decode_tokens=5.0), float(t))
        workloads.judge_hung(engine, float(t), _tp_sample(util, power, tp))
    [alert] = engine.active()
    assert alert.gpu == 0  # what else happens on its GPU folds into the incident
    if said is None:
        assert "GPU" not in alert.message
    else:
        assert f"; {said}" in alert.message


def test_the_servers_log_failures_fold_into_its_hung_incident() -> None:
    """One server per GPU: the log of :30002 is GPU 2's; its failed health check is
    evidence under the hung incident, not an incident of its own."""
    ports = tuple(range(30000, 30008))
    host = HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=ports))
    workloads = Workloads(host)
    gpus = tuple(GpuSample(index=i, uuid=f"GPU-{i}") for i in range(8))
    sample = HostSample("ct200", 0.0, None, gpus)
    assert workloads.log_gpus("/var/log/sglang/sglang-30002.log", sample) == (2,)
    assert workloads.log_gpus("/var/log/sglang/other.log", sample) is None  # which server?
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 100.0)
    line = (
        "[2026-11-29 14:33:25] Health check failed. Server couldn't get a response from "
        "detokenizer for last 20 seconds. tic start time: 14:33:05. last_heartbeat time: "
        "14:33:00"
    )
    engine.on_log_lines("/var/log/sglang/sglang-30002.log", [line], gpus=(2,))
    engine.on_server_condition(
        "sglang_hung", Health.CRITICAL, 30002, "sglang :30002 hung: 37 running", 101.0, gpu=2
    )
    [incident] = incidents(engine.active())
    assert incident.cause.kind == "sglang_hung"
    assert [a.kind for a in incident.evidence] == ["sglang_error"]


def test_a_hung_servers_incident_offers_its_stacks_and_k_on_its_scheduler() -> None:
    """What can be done for a hung server: its schedulers' stacks as SGLang's watchdog
    takes them (``py-spy dump --native --pid``: python/sglang/srt/utils/
    cudacore_pyspy_dump_utils.py, ``pyspy_dump_schedulers``), then ``K`` on its scheduler;
    never SIGQUIT, which SGLang's handler answers by killing the process tree. The PIDs
    are the alert's facts, and come back from its JSON."""
    workloads = Workloads(HostConfig(name="ct200", kind="ssh", sglang=SglangConfig(ports=(30000,))))
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 0.0)
    for t in range(0, 70, 5):
        workloads.sglang[30000].observe(SglangScrape(running=37.0, decode_tokens=5.0), float(t))
        workloads.judge_hung(engine, float(t), _tp_sample(100.0, 115.0))
    [alert] = engine.active()
    assert alert.facts.schedulers == (100, 101)
    assert AlertFacts.from_json(alert.facts.to_json()).schedulers == (100, 101)
    [incident] = incidents(engine.active())
    assert [(f.key, f.words) for f in incident.fixes] == [
        (None, "its stacks: py-spy dump --native --pid 100 (each scheduler: 100, 101)"),
        ("K", "stop its scheduler (PID 100)"),
    ]
    assert not any("SIGQUIT" in f.words or "kill -3" in f.words for f in incident.fixes)
