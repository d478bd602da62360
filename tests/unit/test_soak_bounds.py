"""Hours of samples through one monitor: every buffer it holds stays within its bound
(issue 15 item 14). ``bench/bench_soak.py`` measures the RSS of a whole simulated day;
this pins the bounds themselves, hour by hour, with the churn a long day brings: the
simulated drafter dying of CUDA OOM every ten minutes, kernel OOM-killer victims with new
PIDs, notes, SGLang scrapes and decode logs, and log files that rotate to new names."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import LOG_SOURCES_MAX
from gpumon.backends.alerts.rules import HIGH_WATER_S
from gpumon.backends.alerts.store import HISTORY_MAX, NOTES_MAX
from gpumon.backends.config import Config, JobConfig, SglangConfig, resolve_host
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources.agent import AgentSource, dispatch, handlers
from gpumon.backends.parsers import METRICS_LINE_FILTER, PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.recording import WRITTEN_MAX
from gpumon.backends.sim import (
    DEFAULT_T0,
    DRAFTER_GPUS,
    UPTIME_AT_T0,
    SimSettings,
    job,
    metrics_text,
    sglang_model,
    smi,
)
from gpumon.backends.sim.scenario import DrafterRun
from gpumon.backends.transport import LocalTransport
from gpumon.backends.workloads.trackers import RATE_WINDOW_S

HOURS = 6
INTERVAL = 5.0  # 4320 rounds in 6 hours; every history holds an hour (720 rounds)
CYCLE_S = 600.0  # the training-oom scenario again every 10 minutes
PORT = 30000
ROTATE_S = 60.0  # the SGLang log moves to a new file name every minute


class Day:
    def __init__(self, tmp: Path) -> None:
        self.now = DEFAULT_T0
        self.settings = SimSettings(t0=DEFAULT_T0)
        shape = "--format=csv,noheader,nounits"
        gpus = smi.parse_args([f"--query-gpu={','.join(QUERY_FIELDS)}", shape])
        procs = smi.parse_args([f"--query-compute-apps={','.join(PROCESS_FIELDS)}", shape])
        self.gpus, self.procs = smi.Printer(gpus, self.settings), smi.Printer(procs, self.settings)
        self.sglang = SimSettings(scenario="sglang", t0=DEFAULT_T0)
        self.events = list(job.log_events(self.settings, "drafter", DrafterRun(0, 0.0)))
        self.job_log = str(tmp / "drafter.log")
        self.tmp = tmp

    def messages(self, k: int) -> list[dict[str, object]]:
        """Round ``k``: what the agent sends in one interval (the clock is set first)."""
        self.now = now = DEFAULT_T0 + k * INTERVAL
        t = (k * INTERVAL) % CYCLE_S
        out: list[dict[str, object]] = [
            {"type": "gpus", "t": now, "fields": list(QUERY_FIELDS),
             "rows": self.gpus.gpu_round(t, now).splitlines()},
            {"type": "procs", "t": now, "rows": self.procs.process_round(t, now).splitlines()},
            {"type": "kernel", "t": now, "lines": [  # a new device's Xid every round
                f"[{k}.0] NVRM: Xid (PCI:0000:{k // 256 % 256:02x}:{k % 256:02x}): 13, "
                f"pid={100000 + k}, name=python, Graphics Exception: ESR 0x{k:x}"]},
            {"type": "note", "text": f"note {k}"},
        ]  # fmt: skip
        due = [text for at, text in self.events if t - INTERVAL < at <= t]
        if due:
            out.append(self.log("job:drafter", self.job_log, "\n".join(due).split("\n")))
        if k % 4 == 0:
            text = metrics_text(self.sglang, 0, k * INTERVAL, -UPTIME_AT_T0)
            body = "".join(ln + "\n" for ln in text.splitlines() if _WANTED.match(ln))
            out.append({"type": "http", "tag": f"sglang:{PORT}", "t": now, "status": 200,
                        "body": body})  # fmt: skip
        epoch = int((k * INTERVAL + UPTIME_AT_T0) // sglang_model.LOG_INTERVAL_S)
        path = self.tmp / f"sglang-{PORT}.{int(k * INTERVAL // ROTATE_S)}.log"
        lines = sglang_model.log_lines(self.sglang, 0, epoch, -UPTIME_AT_T0)
        out.append(self.log("sglang", str(path), lines))
        return out

    def log(self, tag: str, path: str, lines: list[str]) -> dict[str, object]:
        return {"type": "log", "tag": tag, "path": path, "t": self.now, "lines": lines}


_WANTED = re.compile(METRICS_LINE_FILTER)


@pytest.fixture
def monitor_and_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[HostMonitor, Day]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # incidents land here
    day = Day(tmp_path)
    host = replace(
        resolve_host(Config(path=None), "local"),
        interval=INTERVAL,
        jobs=(JobConfig("drafter", DRAFTER_GPUS, day.job_log),),
        sglang=SglangConfig((PORT,), str(tmp_path / "sglang-*.log"), False),
    )
    source = AgentSource(LocalTransport(host), reconnect=False)  # fed by hand, never started
    monitor = HostMonitor(host, source, clock=lambda: day.now)
    return monitor, day


def assert_within_bounds(monitor: HostMonitor, now: float) -> None:
    history_len = int(3600 / INTERVAL)
    assert all(len(h) <= history_len for h in monitor.histories.values())
    rec = monitor.recorder
    assert len(rec) <= rec.max_samples
    assert len(rec) <= rec.keep_s / INTERVAL + 1
    assert all(now - t <= rec.keep_s for t, _ in rec._alerts)
    assert len(rec.written) <= WRITTEN_MAX
    alerts = monitor.alerts
    assert len(alerts.history()) <= HISTORY_MAX
    assert len(alerts.active()) <= HISTORY_MAX  # every active alert is in the history
    assert {a.key for a in alerts.active()} <= {a.key for a in alerts.history()}
    assert len(alerts._repeat) <= 2 * HISTORY_MAX
    assert len(alerts.notes()) <= NOTES_MAX
    assert len(alerts._kernel_seen) == len(alerts._kernel_order) <= 4096
    assert len(alerts._logs) <= LOG_SOURCES_MAX
    for watch in alerts._watches.values():
        assert len(watch.times) == len(watch.used) <= alerts.rules.ttf_window_s / INTERVAL + 2
        assert len(watch.high_water) <= HIGH_WATER_S / INTERVAL + 2
    for server in monitor.workloads.sglang.values():
        assert len(server.history) <= (server.history.maxlen or 0)
        assert len(server._points) <= server.slow_window_s / (4 * INTERVAL) + 3
        assert len(server._prefills) <= server.slow_window_s / sglang_model.LOG_INTERVAL_S + 2
    for tracker in monitor.workloads.jobs.values():
        assert len(tracker.rate_history) <= (tracker.rate_history.maxlen or 0)
        for counter in (tracker._steps, tracker._done, tracker._tokens):
            assert len(counter.points) <= RATE_WINDOW_S / INTERVAL + 2


@pytest.mark.slow  # ~25 s of work: the whole suite runs it, the fast lane does not
def test_hours_of_samples_keep_every_buffer_within_its_bound(
    monitor_and_day: tuple[HostMonitor, Day],
) -> None:
    monitor, day = monitor_and_day
    rounds = int(HOURS * 3600 / INTERVAL)
    table = handlers(monitor, on_hello=lambda hello: False)
    for k in range(rounds):
        for msg in day.messages(k):
            dispatch(monitor, table, json.dumps(msg).encode())
        if k % int(3600 / INTERVAL) == 0:
            assert_within_bounds(monitor, day.now)
    assert_within_bounds(monitor, day.now)
    # and the day really pushed them: every bound was reached, not merely respected
    assert monitor.samples == rounds
    assert all(len(h) == int(3600 / INTERVAL) for h in monitor.histories.values())
    assert len(monitor.alerts.history()) == HISTORY_MAX
    assert len(monitor.alerts.notes()) == NOTES_MAX
    assert len(monitor.alerts._kernel_seen) == 4096
    assert len(monitor.recorder.written) == WRITTEN_MAX  # an incident per OOM: 36
    assert len(monitor.alerts._logs) == LOG_SOURCES_MAX  # 480 log files came and went
