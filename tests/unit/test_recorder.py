"""Flight recorder: exact sample round trip, the window around a critical alert, the gzip file
under XDG_STATE_HOME, damaged files and the memory bound."""

from __future__ import annotations

import dataclasses
import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample, Source
from gpumon.backends.monitor import ReplaySource
from gpumon.backends.monitor.sources.replay import incident_starts
from gpumon.backends.parsers import parse_compute_apps, parse_query_gpu
from gpumon.backends.paths import recordings_dir
from gpumon.backends.recording import (
    GPU_FIELDS,
    FlightRecorder,
    RecordingError,
    load_recording,
    sample_from_json,
    sample_to_json,
)
from gpumon.backends.recording.recorder import CHUNK_SAMPLES

NVIDIA = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia"
T0 = 1_800_000_000.0
GPUS = parse_query_gpu((NVIDIA / "query_gpu_8x_rtxpro6000.csv").read_text()).gpus
NA_GPUS = parse_query_gpu((NVIDIA / "query_gpu_with_na.csv").read_text()).gpus
PROCS = parse_compute_apps((NVIDIA / "compute_apps_lxc_pidns.csv").read_text()).processes


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def host_sample(t: float, gpus: tuple[GpuSample, ...] = GPUS) -> HostSample:
    return HostSample("ct200", t, Source.AGENT_SMI, gpus, PROCS, skipped_lines=1)


def critical(t: float, kind: str = "cuda_oom") -> Alert:
    return Alert(f"{kind}:{t}", Health.CRITICAL, kind, "ct200", 6, "drafter", "boom", t, t)


def test_samples_round_trip_exactly_with_nones_health_and_processes() -> None:
    for s in (host_sample(T0 + 0.25), host_sample(T0, NA_GPUS), HostSample("h", 1.5, None, ())):
        data = json.loads(json.dumps(sample_to_json(s)))
        assert sample_from_json(data) == s
    back = sample_from_json(json.loads(json.dumps(sample_to_json(host_sample(T0, NA_GPUS)))))
    lost = back.gpus[4]
    assert lost.health is Health.CRITICAL and lost.problems == ("GPU is lost",)
    assert lost.memory_used_mib is None and lost.temperature_c is None  # not 0
    assert any(p.name is None for p in back.processes)  # [Not Found] stays None


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
maybe_int = st.one_of(st.none(), st.integers(-(2**40), 2**40))
maybe_float = st.one_of(st.none(), finite)
maybe_text = st.one_of(st.none(), st.text(max_size=20))
gpu_samples = st.builds(
    GpuSample,
    index=st.integers(0, 64),
    uuid=maybe_text,
    name=maybe_text,
    temperature_c=maybe_float,
    memory_used_mib=maybe_int,
    power_w=maybe_float,
    clocks_event_reasons=maybe_int,
    health=st.sampled_from(list(Health)),
    problems=st.lists(st.text(max_size=10), max_size=3).map(tuple),
)
processes = st.builds(
    GpuProcess,
    pid=st.integers(0, 2**31),
    name=maybe_text,
    memory_mib=maybe_int,
    gpu_uuid=maybe_text,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(gpu_samples, max_size=4),
    st.lists(processes, max_size=3),
    finite,
    st.sampled_from([None, *Source]),
)
def test_round_trip_holds_for_any_values(
    gpus: list[GpuSample], procs: list[GpuProcess], t: float, source: Source | None
) -> None:
    s = HostSample("h", t, source, tuple(gpus), tuple(procs), skipped_lines=3)
    assert sample_from_json(json.loads(json.dumps(sample_to_json(s)))) == s


def test_the_window_is_ten_minutes_before_to_one_after_written_under_xdg_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    clock = Clock()
    written: list[Path] = []
    rec = FlightRecorder("ct200", clock=clock, on_written=written.append)
    flushed: list[Path] = []
    alert_at = T0 + 1500.0
    warning = Alert(
        "memory:6", Health.WARNING, "memory", "ct200", 6, None, "95%", T0 + 1400, T0 + 1400
    )
    for k in range(1800):
        t = T0 + k
        clock.t = t
        rec.record(host_sample(t))
        if t == warning.time:
            rec.on_alert(warning)
            assert rec.pending_path is None  # a warning records nothing
        if t == alert_at:
            rec.on_alert(critical(t))
            assert rec.pending_path is not None
            assert rec.pending_path.parent == tmp_path / "state" / "gpumon" / "recordings"
        if t == alert_at + 30:
            rec.on_alert(critical(t, "oom_death"))  # same window: no second recording
        path = rec.flush_due(t)
        if t < alert_at + 60:
            assert path is None
        elif t == alert_at + 60:
            assert path is not None and path.name.endswith("-cuda_oom.jsonl.gz")
            assert rec.pending_path is None
        if path is not None:
            flushed.append(path)
    assert written == rec.written == flushed and len(flushed) == 1
    assert rec.last_write_s is not None and rec.last_write_s < 0.5
    got = load_recording(written[0])
    assert not got.truncated and got.problems == ()
    assert got.header["type"] == "header" and got.header["version"] == 1
    assert got.header["host"] == "ct200" and got.header["alert"]["kind"] == "cuda_oom"
    assert got.header["alert"]["severity"] == "critical"
    times = [s.time for s in got.samples]
    assert times[0] == alert_at - 600 and times[-1] == alert_at + 60 and len(times) == 661
    assert got.samples[0] == host_sample(alert_at - 600)
    assert [a["kind"] for a in got.alerts] == ["memory", "cuda_oom", "oom_death"]
    assert set(got.alerts[0]) >= {"type", "key", "severity", "kind", "gpu", "message", "time"}


def test_first_line_is_the_header_and_lines_are_json(tmp_path: Path) -> None:
    rec = FlightRecorder("a host/with odd:name", clock=Clock(), directory=tmp_path)
    for k in range(5):
        rec.record(host_sample(T0 + k))
    rec.on_alert(critical(T0 + 4))
    path = rec.flush_now()
    assert path is not None and path.parent == tmp_path and "/" not in path.name[:-9]
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds == ["header"] + ["sample"] * 5 + ["alert"]
    assert rec.flush_now() is None  # nothing pending any more


def test_recordings_name_each_window_scheduled_then_written(tmp_path: Path) -> None:
    """What a notifier pairs an incident with: the recording whose window holds it."""
    rec = FlightRecorder("ct200", clock=Clock(), directory=tmp_path)
    assert rec.recordings() == []
    rec.record(host_sample(T0))
    rec.on_alert(critical(T0 + 1))
    [(start, end, pending)] = rec.recordings()
    assert (start, end, pending) == (T0 + 1 - 600, T0 + 1 + 60, rec.pending_path)
    written = rec.flush_now()
    assert written == pending and rec.recordings() == [(start, end, written)]
    rec.on_alert(critical(T0 + 5000))
    assert [r[:2] for r in rec.recordings()] == [(start, end), (T0 + 4400, T0 + 5060)]


def test_default_directory_is_under_local_state() -> None:
    assert recordings_dir({}) == Path.home() / ".local/state/gpumon/recordings"
    assert recordings_dir({"XDG_STATE_HOME": "relative"}) == recordings_dir({})
    assert recordings_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/gpumon/recordings")


def _recording(tmp_path: Path, samples: int = 300) -> Path:
    rec = FlightRecorder("ct200", clock=Clock(), directory=tmp_path)
    for k in range(samples):
        rec.record(host_sample(T0 + k))
    rec.on_alert(critical(T0 + samples - 1))
    path = rec.flush_now()
    assert path is not None
    return path


def test_a_truncated_file_keeps_what_could_be_read_and_says_so(tmp_path: Path) -> None:
    path = _recording(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    got = load_recording(cut)
    assert got.truncated and got.problems
    assert "truncated" in got.problems[0]
    assert 0 < len(got.samples) < 300
    assert got.samples == [host_sample(T0 + k) for k in range(len(got.samples))]


def test_damaged_files_raise_clear_errors(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_text('{"type": "header"}\n')
    with pytest.raises(RecordingError, match="not a gzip file"):
        load_recording(plain)
    bad_header = tmp_path / "bad.jsonl.gz"
    bad_header.write_bytes(gzip.compress(b'{"type": "sample"}\n'))
    with pytest.raises(RecordingError, match="not a gpumon recording header"):
        load_recording(bad_header)
    newer = tmp_path / "newer.jsonl.gz"
    newer.write_bytes(gzip.compress(b'{"type": "header", "version": 2}\n'))
    with pytest.raises(RecordingError, match="unsupported recording version 2"):
        load_recording(newer)
    empty = tmp_path / "empty.jsonl.gz"
    empty.write_bytes(gzip.compress(b""))
    with pytest.raises(RecordingError, match="empty"):
        load_recording(empty)
    junk_line = tmp_path / "junk.jsonl.gz"
    header = {"type": "header", "version": 1, "gpu_fields": list(GPU_FIELDS)}
    junk_line.write_bytes(gzip.compress((json.dumps(header) + "\n{oops\n").encode()))
    got = load_recording(junk_line)
    assert got.samples == [] and got.problems[0].startswith("line 2: unreadable")


def test_memory_stays_bounded_for_30_minutes_of_8_gpus() -> None:
    clock = Clock()
    rec = FlightRecorder("ct200", clock=clock)
    for k in range(3600):  # an hour at 1 Hz
        rec.record(host_sample(T0 + k))
    assert len(rec) == 1801  # the last 30 minutes, both ends included
    assert rec.memory_bytes() < 8 * 1024 * 1024
    fast = FlightRecorder("ct200", clock=clock, max_samples=1000)
    for k in range(5000):  # 10 Hz
        fast.record(host_sample(T0 + k / 10))
    assert len(fast) == 1000


def varied(t: float) -> HostSample:
    """A sample whose values move with ``t`` (every line differs, as live ones do)."""
    k = int(t - T0)
    gpus = tuple(
        dataclasses.replace(g, temperature_c=30 + (k * 7 + i) % 50, utilization_pct=(k + i) % 101)
        for i, g in enumerate(GPUS)
    )
    return host_sample(t, gpus)


def test_compressed_chunks_give_back_every_kept_sample_exactly(tmp_path: Path) -> None:
    """Samples are kept as zlib chunks of CHUNK_SAMPLES lines: the recording still holds
    exactly the kept samples in order (the oldest chunk trimmed mid-way, the newest lines
    not yet compressed), and they take a fraction of their JSON's size."""
    rec = FlightRecorder("ct200", clock=Clock(), before_s=1800.0, directory=tmp_path)
    n = 3600 + CHUNK_SAMPLES // 2  # the last half chunk stays uncompressed
    for k in range(n):
        rec.record(varied(T0 + k))
    kept = [T0 + k for k in range(n - 1801, n)]  # 30 minutes, both ends
    assert len(rec) == 1801 and (n - 1801) % CHUNK_SAMPLES != 0  # trimmed inside a chunk
    raw = sum(len(json.dumps(sample_to_json(varied(t)), separators=(",", ":"))) for t in kept)
    assert rec.memory_bytes() < raw / 5
    rec.on_alert(critical(kept[-1]))  # the window: 30 min before, so every kept sample
    path = rec.flush_now()
    assert path is not None
    got = load_recording(path)
    assert [s.time for s in got.samples] == kept
    assert got.samples == [varied(t) for t in kept]
    few = FlightRecorder("ct200", clock=Clock(), max_samples=100, before_s=1800.0)
    few.directory = tmp_path / "few"
    for k in range(n):  # max_samples drops samples still inside the window's 30 minutes
        few.record(varied(T0 + k))
    few.on_alert(critical(T0 + n - 1))
    path = few.flush_now()
    assert path is not None and len(few) == 100
    assert [s.time for s in load_recording(path).samples] == kept[-100:]


def test_a_recording_is_written_a_chunk_at_a_time(tmp_path: Path) -> None:
    """Writing a window never holds its whole text: the peak of Python memory while
    writing stays under the window's JSON size (~0.5x: one chunk's lines at a time;
    joined and encoded whole it was ~3x, a step in the dashboard's RSS per incident)."""
    rec = FlightRecorder("ct200", clock=Clock(), directory=tmp_path)
    for k in range(1800):
        rec.record(varied(T0 + k))
    alert_at = T0 + 1799
    rec.on_alert(critical(alert_at))
    window = [T0 + k for k in range(1199, 1800)]  # 10 minutes before; none after yet
    raw = sum(len(json.dumps(sample_to_json(varied(t)), separators=(",", ":"))) for t in window)
    tracemalloc.start()
    try:
        path = rec.flush_now()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert path is not None and len(load_recording(path).samples) == len(window)
    assert peak < raw, (peak, raw)  # whole, the text and its bytes were ~3x raw at peak


def test_a_write_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rec = FlightRecorder("ct200", clock=Clock(), directory=blocker / "sub")
    rec.record(host_sample(T0))
    rec.on_alert(critical(T0))
    assert rec.flush_now() is None
    assert rec.last_error is not None and "cannot write" in rec.last_error
    assert rec.written == []


def test_log_reads_are_recorded_in_the_window_and_replayed_once_each_alert(
    tmp_path: Path,
) -> None:
    """A read before the window comes back as backlog (what the log said when it opened);
    the replay plays no alert that the samples or the recorded lines raise again, and a
    key recorded twice (raised, then escalated) once."""
    clock = Clock()
    recorder = FlightRecorder("ct200", clock=clock, directory=tmp_path, before_s=60.0)
    recorder.jobs = [{"name": "drafter", "gpus": [5, 6, 7]}]
    recorder.record_log("job:drafter", "/d.log", ["step 1"], T0 - 100)  # before the window
    recorder.record_log("job:drafter", "/d.log", ["step 2"], T0 - 99)
    recorder.record_log("job:drafter", "/d.log", [f"x {i}" for i in range(500)], T0 - 5)
    recorder.record_log("job:drafter", "/d.log", [], T0 - 4)  # nothing new: nothing kept
    for k in range(10):
        clock.t = T0 - 9 + k
        recorder.record(host_sample(clock.t))
    oom = dataclasses.replace(critical(T0), key="log:/d.log:7")  # its lines are recorded
    for alert in (
        Alert("memory:6", Health.WARNING, "memory", "ct200", 6, None, "95%", T0 - 8, T0 - 8),
        Alert("memory:6", Health.CRITICAL, "memory", "ct200", 6, None, "99%", T0 - 8, T0 - 2),
        oom,
        Alert("oom_death:6:1", Health.CRITICAL, "oom_death", "ct200", 6, None, "f", T0, T0),
        Alert("xid:a:1", Health.WARNING, "xid", "ct200", 6, None, "xid 31", T0, T0),
        Alert("xid:a:1", Health.CRITICAL, "xid", "ct200", 6, None, "xid 31!", T0, T0 + 1),
    ):
        recorder.on_alert(alert)
    path = recorder.flush_now()
    assert path is not None
    recording = load_recording(path)
    assert recording.header["jobs"] == [{"name": "drafter", "gpus": [5, 6, 7]}]
    assert [(e["lines"][:1], e["backlog"]) for e in recording.logs] == [
        (["step 2"], True),
        (["x 300"], False),  # a flood keeps its newest lines
    ]
    assert len(recording.logs[1]["lines"]) == 200
    replay = ReplaySource(recording, path)
    assert [j.name for j in replay.host.jobs] == ["drafter"]
    events = replay.alerts_to_replay
    assert [(e["key"], e["severity"], e["message"]) for e in events] == [
        ("xid:a:1", "critical", "xid 31!")  # once, at its worst; the rest are derived again
    ]
    assert replay.alert_times == [T0 - 8, T0]


def test_the_watched_container_is_recorded_so_a_replay_tells_whose_memory_it_is(
    tmp_path: Path,
) -> None:
    """The live dashboard's foreign_process alert (CT 201 held GPU 6) is evidence of the
    OOM: the header names the watched CT, so the replay's samples raise it again; an older
    recording without it replays the recorded alert instead of losing it."""
    recorder = FlightRecorder("ct200", clock=Clock(), directory=tmp_path)
    recorder.container = 200
    recorder.record(host_sample(T0))
    held = Alert(
        "foreign_process:6", Health.WARNING, "foreign_process", "ct200", 6, None, "CT 201", T0, T0
    )
    recorder.on_alert(held)
    recorder.on_alert(critical(T0))
    path = recorder.flush_now()
    assert path is not None
    recording = load_recording(path)
    assert recording.header["container"] == 200
    replay = ReplaySource(recording, path)
    assert replay.host.container == 200  # the samples say whose processes are another CT's
    assert "foreign_process:6" not in [e["key"] for e in replay.alerts_to_replay]
    older = dataclasses.replace(
        recording, header={k: v for k, v in recording.header.items() if k != "container"}
    )
    old_replay = ReplaySource(older, path)
    assert old_replay.host.container is None
    assert "foreign_process:6" in [e["key"] for e in old_replay.alerts_to_replay]


def test_n_jumps_to_the_first_alert_of_each_incident() -> None:
    """The OOM's memory warning, CUDA OOM and memory drop are one incident (one job, or
    one GPU): n lands on its first sample, before the memory dropped; a new one after
    INCIDENT_GAP_S quiet starts its own."""

    def alert(
        kind: str, at: float, job: str | None = "drafter", gpu: int | None = 6
    ) -> dict[str, Any]:
        return {
            "key": f"{kind}:{at}",
            "kind": kind,
            "epoch": at,
            "last_seen": at,
            "job": job,
            "gpu": gpu,
        }

    alerts = [
        alert("memory", T0),
        alert("cuda_oom", T0 + 6),
        alert("oom_death", T0 + 7),
        alert("memory", T0 + 5, job=None, gpu=2),  # another GPU's: its own incident
        alert("stale_data", T0 + 9, job=None, gpu=None),
        alert("memory", T0 + 7 + 121),  # the job's next incident, after a quiet gap
    ]
    assert incident_starts(alerts) == [T0, T0 + 5, T0 + 9, T0 + 128]
    assert incident_starts([{"kind": "memory"}]) == []  # no time: no jump target


def test_recording_of_names_the_recording_that_holds_a_time(tmp_path: Path) -> None:
    # The alert detail names the recording of its incident (issue 26.3).
    clock = Clock()
    rec = FlightRecorder("ct200", clock=clock, directory=tmp_path, before_s=60, after_s=10)
    alert_at = T0 + 100
    for k in range(120):
        clock.t = T0 + k
        rec.record(host_sample(clock.t))
        if clock.t == alert_at:
            rec.on_alert(critical(alert_at))
            pending = rec.recording_of(alert_at - 5)
            assert pending is not None and pending == (rec.pending_path, False)
        rec.flush_due(clock.t)
    (path,) = rec.written
    assert rec.recording_of(alert_at - 5) == (path, True)
    assert rec.recording_of(alert_at + 10) == (path, True)
    assert rec.recording_of(alert_at - 61) is None and rec.recording_of(alert_at + 11) is None


def one_shot_run(folder: Path, clock: Clock, alert: Alert | None) -> Path | None:
    """One run of a one-shot command (``check``): a sample, maybe a critical alert, the
    stop (``flush_now``) and the end of the run with what is active then."""
    recorder = FlightRecorder("ct200", clock=clock, directory=folder)
    recorder.per_incident()
    recorder.record(host_sample(clock.t))
    if alert is not None:
        recorder.on_alert(alert)
    path = recorder.flush_now()
    recorder.end_run([alert] if alert is not None and alert.active else [])
    return path or recorder.reused


def test_one_shot_runs_write_one_recording_per_incident(tmp_path: Path) -> None:
    """Issue 36 point 9: ``gpumon check`` every minute on a GPU that stays critical writes
    one recording, reused while the incident is open at each run; a run that finds it over
    ends it, and a run an hour later sees a new one."""
    clock = Clock()
    first = one_shot_run(tmp_path, clock, critical(clock.t, "memory"))
    assert first is not None and first.is_file()
    for _ in range(5):  # every minute: the same incident (the drafter's), even by another kind
        clock.t += 60
        assert one_shot_run(tmp_path, clock, critical(clock.t)) == first
    assert sorted(tmp_path.glob("*.jsonl.gz")) == [first]
    clock.t += 60
    assert one_shot_run(tmp_path, clock, None) is None  # over
    clock.t += 60
    second = one_shot_run(tmp_path, clock, critical(clock.t, "memory"))
    assert second not in (None, first)
    clock.t += 3700  # the next run long after: what is true then is worth its own recording
    third = one_shot_run(tmp_path, clock, critical(clock.t, "xid"))
    assert third not in (None, first, second)
    third.unlink()  # removed by hand: the next run writes one again
    clock.t += 60
    fourth = one_shot_run(tmp_path, clock, critical(clock.t, "oom_death"))
    assert fourth is not None and fourth.is_file()
    (tmp_path / ".oneshot-ct200.json").write_text("{not json")  # damaged: every incident new
    clock.t += 60
    assert one_shot_run(tmp_path, clock, critical(clock.t, "host_oom_kill")) not in (None, fourth)


def test_one_shot_runs_know_an_event_of_the_host_by_its_kind(tmp_path: Path) -> None:
    """An alert of neither a job nor a GPU (the host's OOM killer) has a key with the run's
    own serial: the next run's alert of the same incident is still the same incident."""
    clock = Clock()

    def host_event(serial: int) -> Alert:
        key = f"host_oom_kill:python3:{serial}"
        return Alert(
            key, Health.CRITICAL, "host_oom_kill", "ct200", None, None, "k", clock.t, clock.t
        )

    first = one_shot_run(tmp_path, clock, host_event(1))
    clock.t += 60
    assert one_shot_run(tmp_path, clock, host_event(7)) == first
    assert sorted(tmp_path.glob("*.jsonl.gz")) == [first]
