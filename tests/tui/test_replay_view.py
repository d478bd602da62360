"""``gpumon replay``: a recorded incident in the dashboard, with pause, step and speed keys,
and the header saying REPLAY instead of the connection state."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gpumon.backends.alerts import AlertEngine
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import GpuSample, HostSample
from gpumon.backends.monitor import HostMonitor, ReplaySource, replay_monitor
from gpumon.backends.recording import FlightRecorder, load_recording
from gpumon.tui import app as app_module
from gpumon.tui.app import GpumonApp
from gpumon.tui.cli import main

import notices
from held_demo import HeldDemo, drafter_read
from waiting import until

Wait = Callable[..., Awaitable[None]]
TOTAL_MIB = 97887


def _sample(t: float, i: int) -> HostSample:
    gpus = tuple(
        GpuSample(
            index=g,
            uuid=f"GPU-{g}",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_mib=TOTAL_MIB,
            memory_used_mib=min(80000 + 200 * i, 97200) if g == 6 else 84500,
            utilization_pct=90.0,
        )
        for g in range(8)
    )
    return HostSample("ct200", t, None, gpus)


def write_incident(directory: Path) -> Path:
    """The real flight recorder writes an incident: GPU 6 fills up and goes critical."""
    now = [1000.0]
    recorder = FlightRecorder("ct200", clock=lambda: now[0], directory=directory)
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: now[0])
    engine.add_listener(recorder.on_alert)
    for i in range(300):
        now[0] = 1000.0 + i
        sample = _sample(now[0], i)
        recorder.record(sample)
        engine.on_sample(sample)
        path = recorder.flush_due(now[0])
        if path is not None:
            return path
    raise AssertionError("nothing was recorded")


def header(app: GpumonApp) -> str:
    return app.dashboard.sections[0].header.plain


async def test_replay_pauses_steps_and_changes_speed(tmp_path: Path, wait: Wait, utc: None) -> None:
    path = write_incident(tmp_path)
    total = len(load_recording(path).samples)
    replay = ReplaySource.from_file(path)
    replay.set_paused(True)
    app = GpumonApp([replay_monitor(replay)], read_only=True, bell=False)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: "REPLAY paused" in header(app), what="the replay header")
        assert header(app).startswith("ct200")
        assert f"REPLAY paused, 00:16:40 (0/{total})" in header(app)  # 1000 s after epoch, UTC
        assert "connected" not in header(app)
        assert app.dashboard.check_action("faster", ()) is None  # greyed: no sampling interval here
        assert app.dashboard.check_action("slower", ()) is None
        assert app.dashboard.check_action("replay_step", ()) is True
        assert (
            app.dashboard.check_action("restart_job", ()) is False
        )  # no machine behind a recording
        await pilot.press("full_stop")
        assert replay.position == 1
        await pilot.press("full_stop")
        assert replay.position == 2
        await pilot.pause()
        assert f"(2/{total})" in header(app) and "00:16:41" in header(app)
        await pilot.press("right_square_bracket")  # speed keys work while paused
        assert replay.speed == 2.0 and replay.paused
        await pilot.pause()
        assert "REPLAY paused 2x" in header(app)
        await pilot.press("left_square_bracket")
        assert replay.speed == 1.0
        assert len(app.dashboard.sections[0].rows) == 8
        await pilot.press("p")  # the recording plays on
        assert not replay.paused and not app.dashboard.paused
        assert app.dashboard.check_action("replay_step", ()) is None  # only while paused
        assert "REPLAY 1x" in header(app)
        await pilot.press("right_square_bracket")
        assert replay.speed == 2.0 and "REPLAY 2x" in header(app)
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert replay.speed == 0.5 and "REPLAY 0.5x" in header(app)
        await pilot.press(*["right_square_bracket"] * 10)
        assert replay.speed == 30.0
        assert app.dashboard.check_action("replay_faster", ()) is None  # the fastest there is
        await wait(pilot, lambda: replay.finished, timeout=20, what="the end of the recording")
        await wait(pilot, lambda: "REPLAY ended" in header(app), what="the header saying so")
        await wait(pilot, lambda: "CRITICAL" in app.dashboard.strip.plain, what="the strip")
        assert "REPLAY ended" in header(app) and f"({total}/{total})" in header(app)
        assert "end of recording" not in header(app)  # the state says it, not an error line
        assert (
            app.dashboard.strip.display and "CRITICAL" in app.dashboard.strip.plain
        )  # GPU 6 went critical
        assert "GPU 6" in app.dashboard.strip.plain
        assert not bells  # a replay does not ring
        assert not any(r.view is not None and r.view.stale for r in app.dashboard.sections[0].rows)


async def record_demo_oom(
    demo_monitor: Callable[..., HostMonitor], directory: Path
) -> tuple[Path, list[Alert]]:
    """The live demo's drafter OOM, recorded: the recording and the live alert history.
    Held at 52 s (the incident's alerts from the recording's first sample on) until the
    drafter's log was read: the OOM comes 8 s after the release, live."""
    (folder := directory / "held").mkdir()
    held = HeldDemo(folder)
    live = demo_monitor(demo_time=52.0, held=held)
    live.recorder.directory = directory
    live.start()
    try:
        await until(lambda: drafter_read(live), 60, "the drafter's log read")
        held.release()
        deadline = time.monotonic() + 30
        while not {"cuda_oom", "oom_death"} <= {a.kind for a in live.alerts.active()}:
            assert time.monotonic() < deadline, "the demo's drafter did not die"
            await asyncio.sleep(0.1)
        assert live.recorder.pending_path is not None  # since the memory went critical
        live.recorder.flush_now()
        history = live.alerts.history()
    finally:
        await live.stop()
    return live.recorder.written[0], list(history)


async def test_a_demo_incident_replays_its_jobs_pane_once_each_alert_and_jumps(
    demo_monitor: Callable[..., HostMonitor], tmp_path: Path, wait: Wait
) -> None:
    """The drafter's OOM recorded by the live demo, replayed: the jobs
    pane comes back from the recorded log lines, no alert is shown twice (recorded and
    derived again), and ``n`` / ``N`` jump between the recording's incidents."""
    path, _ = await record_demo_oom(demo_monitor, tmp_path)
    live_written = [path]
    recorded = load_recording(path)
    assert recorded.logs and {a["kind"] for a in recorded.alerts} >= {"memory", "cuda_oom"}
    replay = ReplaySource.from_file(live_written[0])
    replay.set_paused(True)
    monitor = replay_monitor(replay)
    app = GpumonApp([monitor], read_only=True, bell=False)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait(pilot, lambda: "REPLAY paused" in header(app), what="the replay header")
        assert not replay.has_previous_alert()
        await pilot.press("n")  # the first alert: GPU 6 memory
        await pilot.pause()
        first = replay.now
        assert any(a.kind == "memory" for a in monitor.alerts.active())
        assert "drafter" in section.jobs.plain and "running" in section.jobs.plain
        while replay.has_next_alert():
            await pilot.press("n")
        await pilot.press("p")
        await wait(pilot, lambda: replay.finished, timeout=20, what="the end")
        await wait(pilot, lambda: "crashed: OOM on GPU 6" in section.jobs.plain, what="the crash")
        keys = [a.key for a in monitor.alerts.history()]
        kinds = [a.kind for a in monitor.alerts.history()]
        assert len(keys) == len(set(keys)) and kinds.count("cuda_oom") == 1
        assert kinds.count("oom_death") <= 1 and kinds.count("memory") == 1
        assert "drafter: CUDA OOM on GPU 6" in app.dashboard.strip.plain
        while replay.has_previous_alert():
            await pilot.press("N")  # back to the first alert: played again from the start
        await pilot.pause()
        assert replay.now == first and not replay.finished
        # the incident's start: GPU 6 filling (and CT 201 holding some of it), no OOM yet
        at_start = {a.kind for a in monitor.alerts.history()}
        assert "memory" in at_start and at_start <= {"memory", "foreign_process"}, at_start
        assert "crashed" not in section.jobs.plain


def evidence_kinds(alerts: list[Alert]) -> list[tuple[str, list[str]]]:
    """Each incident's cause and evidence rows, by kind."""
    found = sorted(incidents(alerts), key=lambda i: i.cause.kind)
    return [(i.cause.kind, sorted(a.kind for a in i.evidence)) for i in found]


async def test_a_replayed_incident_keeps_its_evidence_pauses_at_its_start_and_steps_back(
    demo_monitor: Callable[..., HostMonitor], tmp_path: Path, wait: Wait
) -> None:
    """Issue 26 point 6: the replayed history has every evidence row of the live one (CT
    201's jupyter-lab on GPU 6 included); ``n`` lands on the OOM incident's first sample,
    before the memory dropped, paused there; ``,`` steps back; ``r`` says that this is a
    recording, not that gpumon is read-only."""
    path, live_history = await record_demo_oom(demo_monitor, tmp_path)
    assert "foreign_process" in {a.kind for a in live_history}  # CT 201 held GPU 6
    recording = load_recording(path)
    assert recording.header["container"] == 200  # whose processes are another CT's
    replay = ReplaySource.from_file(path)
    monitor = replay_monitor(replay)
    app = GpumonApp([monitor], read_only=True, bell=False)
    said = notices.said(app)
    oom_at = min(float(a["epoch"]) for a in recording.alerts if a["kind"] == "oom_death")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait(pilot, lambda: "REPLAY 1x" in header(app), what="playing")
        await pilot.press("right_square_bracket", "right_square_bracket")  # 5x
        await wait(pilot, lambda: replay.now >= oom_at, timeout=20, what="the OOM played")
        await pilot.press("N")  # back to the incident's first sample, not to its last alert
        await pilot.pause()
        assert replay.paused and "REPLAY paused" in header(app)  # it stops there
        shown = monitor.latest
        assert shown is not None
        first = min(recording.alerts, key=lambda a: float(a["epoch"]))
        gpu6 = next(g for g in shown.gpus if g.index == 6)
        lowest = min(
            next(g for g in s.gpus if g.index == 6).memory_used_mib or 0 for s in recording.samples
        )
        # the incident's first sample: GPU 6 still full, before the drafter died
        assert gpu6.memory_used_mib is not None and gpu6.memory_used_mib > 0.9 * gpu6_total(shown)
        assert gpu6.memory_used_mib > 4 * max(lowest, 1)
        assert shown.time == pytest.approx(float(first["epoch"]))
        assert not replay.has_previous_alert()  # the OOM's alerts are one incident
        assert not replay.has_next_alert()
        at = replay.position
        await pilot.press("full_stop", "full_stop")
        assert replay.position == at + 2
        await pilot.press("comma")
        await pilot.pause()
        assert replay.position == at + 1 and replay.paused
        latest = monitor.latest
        assert latest is not None and latest.time == recording.samples[at].time
        await pilot.press("comma", "comma", "comma")
        assert replay.position == 1  # the first sample: nothing before it to show
        assert app.dashboard.check_action("replay_step_back", ()) is None
        await pilot.press("r", "K")
        await pilot.pause()
        assert [m for m in said if "recording" in m] == [
            "r (restart): this is a recording: there is no machine behind it to act on",
            "K (kill): this is a recording: there is no machine behind it to act on",
        ]
        assert not any("read-only" in m for m in said), said
        reason = app.dashboard.actions.read_only_reason(monitor)
        assert reason is not None and reason.startswith("this is a recording")
        await pilot.press("p")
        await wait(pilot, lambda: replay.finished, timeout=30, what="the end")
        await pilot.pause()
        replayed = list(monitor.alerts.history())
        assert evidence_kinds(replayed) == evidence_kinds(live_history)
        assert sorted(a.kind for a in replayed) == sorted(a.kind for a in live_history)


def gpu6_total(sample: HostSample) -> int:
    total = next(g for g in sample.gpus if g.index == 6).memory_total_mib
    assert total is not None
    return total


async def test_live_hosts_hide_the_replay_keys(
    demo_monitor: Callable[..., object], wait: Wait
) -> None:
    app = GpumonApp([demo_monitor()])  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.dashboard.replay is None
        for action in (
            "replay_step",
            "replay_faster",
            "replay_slower",
        ):
            assert app.dashboard.check_action(action, ()) is False


def test_replay_command_says_what_is_wrong_with_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "gpumon replay:" in err and "not a gzip file" in err
    assert main(["replay", str(tmp_path / "missing.jsonl.gz")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_no_bell_reaches_the_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []

    def run_dashboard(hosts: object, **kwargs: object) -> int:
        calls.append(kwargs)
        return 0

    monkeypatch.setattr(app_module, "run_dashboard", run_dashboard)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # the dashboard needs a terminal
    assert main(["demo", "--no-bell"]) == 0
    assert main(["demo"]) == 0
    assert [c["bell"] for c in calls] == [False, True]
