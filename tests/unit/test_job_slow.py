"""job_slow: a job's rate below ``slow_below`` of its baseline for ``slow_for_s`` (the
configured ``expect_tokens_per_s``, else the median of its previous good runs, kept in the
state directory across restarts), with both rates and both ETAs; a job at its usual rate,
and a run shorter than warm-up plus MIN_RUN_S are not slow or learned."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from gpumon.backends.actions import audit
from gpumon.backends.alerts.engine import Alert, AlertEngine, AlertRules
from gpumon.backends.alerts.facts import AlertFacts, TorchSwap
from gpumon.backends.alerts.incident import command_fix, incidents, screen_fixes
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample, iso_time
from gpumon.backends.torchenv import swap_run
from gpumon.backends.torchenv.seen import KEEP_LINES, record_seen, seen_torch
from gpumon.backends.workloads.changes import SeenReader, SwapReader
from gpumon.backends.workloads.slow import (
    MIN_RUN_S,
    WARMUP_S,
    RunBaselines,
    RunRecord,
    clocks_held,
)
from gpumon.backends.workloads.watch import Workloads

GPUS = (5, 6, 7)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def setup(
    tmp_path: Path, expect: float | None = 20000.0, slow_for_s: float = 15.0
) -> tuple[Workloads, AlertEngine, Clock]:
    job = JobConfig(
        name="drafter",
        gpus=GPUS,
        log="/l/d.log",
        expect_tokens_per_s=expect,
        slow_for_s=slow_for_s,
    )
    host = HostConfig(name="box", kind="local", jobs=(job,))
    clock = Clock()
    return Workloads(host, tmp_path / "runs.json"), AlertEngine("box", AlertRules(), clock), clock


def sample(t: float, util: float = 2.0, power: float = 95.0) -> HostSample:
    gpus = tuple(
        GpuSample(i, uuid=f"GPU-{i}", utilization_pct=util, power_w=power) for i in range(8)
    )
    procs = tuple(GpuProcess(100 + i, "python", 80000, gpu_uuid=f"GPU-{i}") for i in GPUS)
    return HostSample("box", t, None, gpus, procs)


def step(n: int, ktok: float) -> str:
    return f"step {n}/1000000 | loss 2.3100 | {ktok:.1f} Ktok/s"


def run(
    w: Workloads,
    engine: AlertEngine,
    clock: Clock,
    seconds: int,
    ktok: float,
    first: int = 1,
    *,
    backlog: bool = True,
) -> list[Alert]:
    """One progress line a second for ``seconds``; the job_slow alerts after the last.
    The first line is the log's backlog (there when gpumon came) unless ``backlog`` is
    False or gpumon read the log before."""
    for k in range(first, first + seconds):
        clock.t += 1.0
        w.on_log("job:drafter", "/l/d.log", [step(k, ktok)], clock.t, backlog=backlog)
        backlog = False
        w.judge_stalls(engine, sample(clock.t), clock.t)
    return [a for a in engine.active() if a.kind == "job_slow"]


def test_a_job_at_4_6_ktok_s_of_an_expected_20000_is_slow_after_slow_for_s(
    tmp_path: Path,
) -> None:
    w, engine, clock = setup(tmp_path)
    assert run(w, engine, clock, 14, 4.6) == []  # not before slow_for_s
    (alert,) = run(w, engine, clock, 3, 4.6, first=15)
    assert alert.severity is Health.WARNING and alert.job == "drafter"
    # one step a second of 1,000,000: ETA ~11.6 d now, 23 % of that at the expected rate
    assert alert.message.startswith(
        "drafter at 4.6 Ktok/s, 23 % of its expected 20.0 Ktok/s (ETA 12 d instead of 2.7 d)"
    ), alert.message
    assert "its GPUs at 2 % utilisation, 95 W" in alert.message
    (incident,) = incidents(engine.active())
    assert incident.headline == alert.message  # led by the job, not "drafter: drafter ..."
    assert run(w, engine, clock, 2, 20.3, first=18) == []  # back to speed: resolved


def test_a_job_at_20_3_ktok_s_is_not_slow(tmp_path: Path) -> None:
    w, engine, clock = setup(tmp_path)
    assert run(w, engine, clock, 60, 20.3) == []


def test_the_baseline_is_learned_from_good_runs_and_survives_a_restart(tmp_path: Path) -> None:
    w, engine, clock = setup(tmp_path, expect=None, slow_for_s=15.0)
    good = int(WARMUP_S + MIN_RUN_S) + 5
    assert run(w, engine, clock, good, 20.1) == []
    (kept,) = RunBaselines(tmp_path / "runs.json").runs("drafter")
    assert kept.rate == 20100.0 and kept.util_pct == 2.0 and kept.unit == "tok/s"
    # gpumon restarts (a new Workloads on the same file); the job restarts, slow after a swap
    w, engine, clock2 = setup(tmp_path, expect=None, slow_for_s=15.0)
    clock2.t = clock.t + 100.0
    (alert,) = run(w, engine, clock2, 20, 4.6)
    assert alert.message.startswith("drafter at 4.6 Ktok/s, 23 % of its usual 20.1 Ktok/s")
    assert "2 % utilisation (baseline run 2 %)" in alert.message


def test_without_a_baseline_nothing_is_slow_and_a_short_run_is_not_learned(
    tmp_path: Path,
) -> None:
    w, engine, clock = setup(tmp_path, expect=None)
    assert run(w, engine, clock, 60, 0.5) == []  # nothing to compare with yet
    runs = RunBaselines(tmp_path / "runs.json")
    assert runs.runs("drafter") == []  # not yet past warm-up and MIN_RUN_S


def test_a_broken_baselines_file_is_an_empty_history(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text("{not json")
    assert RunBaselines(path).runs("drafter") == []


def test_a_read_only_history_learns_nothing(tmp_path: Path) -> None:
    """A replay reads the baseline but must not teach it its recorded runs."""
    path = tmp_path / "runs.json"
    runs = RunBaselines(path, learn=False)
    runs.record("drafter", RunRecord(1.0, 20100.0, "tok/s"))
    assert not path.exists() and RunBaselines(path).runs("drafter") == []


def audit_line(at: float, host: str, outcome: str = "swapped", action: str = "swap-torch") -> str:
    """One audit entry as ``actions.audit.record`` writes it."""
    entry: dict[str, object] = {
        "time": iso_time(at),
        "user": "sam",
        "action": action,
        "host": host,
        "job": None,
        "parameters": {"from": "2.11.0+cu128", "to": "2.11.0+cu130", "venv": "/root/venv"},
        "commands": [],
        "pids": [],
        "outcome": outcome,
        "duration_s": 41.2,
        "detail": "swapped to 2.11.0+cu130, verified",
    }
    return json.dumps(entry) + "\n"


def test_a_torch_swap_since_the_baseline_run_is_said(tmp_path: Path) -> None:
    """The audit log's newest swap on this host after the baseline run started is the
    evidence; one before it, on another host, refused or a broken line is not."""
    audit = tmp_path / "audit.jsonl"
    w, engine, clock = setup(tmp_path, expect=None, slow_for_s=15.0)
    w = Workloads(w.host, tmp_path / "runs.json", audit=audit)
    audit.write_text(audit_line(clock.t - 50.0, "box"))  # before the baseline run
    good = int(WARMUP_S + MIN_RUN_S) + 5
    assert run(w, engine, clock, good, 20.1) == []
    swapped_at = clock.t + 50.0
    audit.write_text(
        audit.read_text()
        + audit_line(clock.t + 40.0, "box", outcome="refused")
        + "{not json\n"
        + audit_line(swapped_at, "box")
        + audit_line(clock.t + 60.0, "other")
        + audit_line(clock.t + 70.0, "box", action="restart")
    )
    clock.t += 100.0
    w2 = Workloads(w.host, tmp_path / "runs.json", audit=audit)
    (alert,) = run(w2, engine, clock, 20, 4.6)
    at = time.strftime("%H:%M", time.localtime(swapped_at))
    assert alert.message.endswith(
        f"; since the baseline: torch cu128 -> cu130 at {at} (swap by gpumon)"
    ), alert.message
    swap = alert.facts.torch_swap
    assert swap is not None and (swap.was, swap.to) == ("2.11.0+cu128", "2.11.0+cu130")
    assert abs(swap.at - swapped_at) < 1.0 and swap.by == "gpumon"


def test_no_swap_since_the_baseline_says_nothing_of_one(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    w, engine, clock = setup(tmp_path, expect=None, slow_for_s=15.0)
    audit.write_text(audit_line(clock.t - 50.0, "box"))  # before the baseline run
    w = Workloads(w.host, tmp_path / "runs.json", audit=audit)
    assert run(w, engine, clock, int(WARMUP_S + MIN_RUN_S) + 5, 20.1) == []
    clock.t += 100.0
    (alert,) = run(Workloads(w.host, tmp_path / "runs.json", audit=audit), engine, clock, 20, 4.6)
    assert "since the baseline" not in alert.message and "torch" not in alert.message


def torch_facts(version: str, cuda: str | None = "13.0") -> dict[str, object]:
    """The doctor probe's torch section as the probe prints it (installed, version.py)."""
    return {"torch": {"installed": True, "version": version, "version_py": {"cuda": cuda}}}


def test_a_torch_changed_outside_gpumon_is_named_from_the_doctor(tmp_path: Path) -> None:
    """No swap in the audit log, but the doctor found cu128 before the baseline run and
    cu130 since: the slow verdict names both and their times (issue 25.3)."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    audit, seen = tmp_path / "audit.jsonl", tmp_path / "state" / "gpumon" / "torch-seen.jsonl"
    w, engine, clock = setup(tmp_path, expect=None, slow_for_s=15.0)
    before = clock.t - 50.0
    assert record_seen("box", torch_facts("2.11.0+cu128", "12.8"), at=before, env=env) == seen
    record_seen("other", torch_facts("2.9.0+cu126", "12.6"), at=before + 1, env=env)
    w = Workloads(w.host, tmp_path / "runs.json", audit=audit, torch_seen=seen)
    assert run(w, engine, clock, int(WARMUP_S + MIN_RUN_S) + 5, 20.1) == []
    after = clock.t + 50.0
    record_seen("box", torch_facts("2.11.0+cu130"), at=after, env=env)
    record_seen("box", {"torch": {"installed": False}}, at=after + 1, env=env)  # no torch
    clock.t += 100.0
    w2 = Workloads(w.host, tmp_path / "runs.json", audit=audit, torch_seen=seen)
    (alert,) = run(w2, engine, clock, 20, 4.6)
    hm = [time.strftime("%H:%M", time.localtime(t)) for t in (before, after)]
    assert alert.message.endswith(
        f"; since the baseline: torch 2.11.0+cu128 (doctor {hm[0]}) -> 2.11.0+cu130"
        f" (doctor {hm[1]}), not by gpumon"
    ), alert.message


def test_the_audit_log_wins_and_the_same_torch_seen_twice_is_no_change(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    seen = tmp_path / "gpumon" / "torch-seen.jsonl"
    now = 1_800_000_000.0
    record_seen("box", torch_facts("2.11.0+cu128"), at=now - 500, env=env)
    record_seen("box", torch_facts("2.11.0+cu128"), at=now - 100, env=env)
    assert SeenReader(seen).since("box", now - 300, now) is None  # the same torch
    assert SeenReader(seen).since("box", now - 600, now) is None  # nothing seen before
    assert SeenReader(seen).since("box", now - 50, now) is None  # nothing seen since
    record_seen("box", torch_facts("2.11.0+cu130"), at=now - 10, env=env)
    assert "not by gpumon" in (SeenReader(seen).since("box", now - 300, now) or "")
    audit = tmp_path / "audit.jsonl"
    audit.write_text(audit_line(now - 20, "box"))
    w = Workloads(setup(tmp_path, expect=None)[0].host, audit=audit, torch_seen=seen)
    swap = w.swaps.latest("box", now - 300)  # judge_slow asks it before the doctor's log
    assert swap is not None and swap.words(now).endswith("(swap by gpumon)")


def test_the_seen_log_names_a_plain_version_by_its_variant_and_stays_bounded(
    tmp_path: Path,
) -> None:
    assert seen_torch(torch_facts("2.11.0", "13.0"), "box") == "2.11.0 (cu130)"
    assert seen_torch(torch_facts("2.11.0+cu128", "12.8"), "box") == "2.11.0+cu128"
    assert seen_torch({"torch": {"installed": False}}, "box") is None
    env = {"XDG_STATE_HOME": str(tmp_path)}
    for i in range(KEEP_LINES + 5):
        path = record_seen("box", torch_facts(f"2.{i}.0+cu128"), at=1e9 + i, env=env)
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    lines = path.read_text().splitlines()
    assert (
        len(lines) == KEEP_LINES and json.loads(lines[-1])["torch"] == f"2.{KEEP_LINES + 4}.0+cu128"
    )
    path.write_text('{"time": "x", "host": "box"}\nnot json\n' + "\n".join(lines) + "\n")
    assert SeenReader(path).since("box", 1e9 + 10, 1e9 + 99999) is not None  # bad lines skipped


def test_a_swap_words_the_version_when_it_changed_and_the_date_when_old() -> None:
    now = 1_800_000_000.0
    day = time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 3 * 86400))
    assert TorchSwap("2.10.0+cu128", "2.11.0+cu130", now - 3 * 86400).words(now) == (
        f"torch 2.10.0+cu128 -> 2.11.0+cu130 at {day} (swap by gpumon)"
    )
    assert SwapReader(Path("/nonexistent/audit.jsonl")).latest("box", 0.0) is None


def test_the_reader_reads_what_a_swap_writes_in_the_audit_log(tmp_path: Path) -> None:
    """The audit log's format is actions.audit's: the reader reads its real entries."""
    env = {"XDG_STATE_HOME": str(tmp_path)}
    params = {"from": "2.11.0+cu128", "to": "2.11.0+cu130", "venv": "/root/venv"}
    before = time.time()
    path = audit.record(swap_run.ACTION, "box", "started", parameters=params, env=env)
    audit.record(swap_run.ACTION, "box", "swapped", parameters=params, env=env)
    after = time.time()
    swap = SwapReader(path).latest("box", before - 1.0)
    assert swap is not None and before - 1.0 <= swap.at <= after + 1.0
    minutes = {time.strftime("%H:%M", time.localtime(t)) for t in (before, after)}
    said = swap.words(after)
    assert said in {f"torch cu128 -> cu130 at {at} (swap by gpumon)" for at in minutes}, said


def test_a_job_slow_after_a_swap_names_it_and_its_incident_offers_d_and_w(
    tmp_path: Path,
) -> None:
    """Issue 36 point 2a: a job below its configured rate (no baseline run to date what it
    ran on) within a day of a swap of torch: the alert names the swap, carries it as its
    fact, and its incident offers d to check and w to swap back. A swap over a day before
    the slowdown, or one refused, is not named."""
    audit = tmp_path / "audit.jsonl"
    w, engine, clock = setup(tmp_path)
    clock.t = 1_800_000_000.0
    swapped_at = clock.t - 3600.0
    audit.write_text(
        audit_line(clock.t - 2 * 86400.0, "box")  # too old to explain it
        + audit_line(swapped_at, "box")
        + audit_line(clock.t - 60.0, "box", outcome="refused")
    )
    w = Workloads(w.host, tmp_path / "runs.json", audit=audit)
    (alert,) = run(w, engine, clock, 20, 4.6)
    at = time.strftime("%H:%M", time.localtime(swapped_at))
    assert alert.message.endswith(f"; after torch cu128 -> cu130 at {at} (swap by gpumon)")
    swap = alert.facts.torch_swap
    assert swap is not None and abs(swap.at - swapped_at) < 1.0
    assert AlertFacts.from_json(alert.facts.to_json()) == alert.facts  # kept by a recording
    (incident,) = incidents(engine.active())
    assert f"torch cu128 -> cu130 at {at} (swap by gpumon)" in incident.headline
    assert screen_fixes(incident) == "d check torch, w swap back to cu128"
    assert [f.command for f in incident.fixes] == [
        "gpumon doctor box",
        "gpumon swap-torch box cu128",
    ]
    # without the swap (only the old one in the log): no fact; the doctor is the fix
    # (issue 36 point 2: never "none that gpumon knows"), w is not offered
    audit.write_text(audit_line(clock.t - 2 * 86400.0, "box"))
    w2, engine2, clock2 = setup(tmp_path)
    clock2.t = clock.t
    w2 = Workloads(w2.host, tmp_path / "runs.json", audit=audit)
    (plain,) = run(w2, engine2, clock2, 20, 4.6)
    assert plain.facts.torch_swap is None and "torch" not in plain.message
    (incident2,) = incidents(engine2.active())
    assert screen_fixes(incident2) == "d check torch and the GPUs"
    assert command_fix(incident2) == "fix: gpumon doctor box"


def test_gpus_idle_after_a_swap_name_it_and_offer_d_and_w(tmp_path: Path) -> None:
    """gpu_idle_held of a job's GPUs after a torch swap names it (the engine asks the
    host's audit log through the monitor's reader) and offers d and w; a version that
    changed too is swapped back with its version."""
    audit = tmp_path / "audit.jsonl"
    now = 1_800_000_000.0
    entry = json.loads(audit_line(now - 600.0, "box"))
    entry["parameters"]["from"] = "2.10.0+cu128"
    audit.write_text(json.dumps(entry) + "\n")
    clock = Clock()
    clock.t = now
    rules = AlertRules(idle_held_after_s=60.0)
    engine = AlertEngine("box", rules, clock, jobs={"drafter": GPUS})
    engine.torch_swap = lambda since: SwapReader(audit).latest("box", since)
    for k in range(0, 130, 2):
        clock.t = now + k
        gpus = tuple(
            GpuSample(i, uuid=f"GPU-{i}", utilization_pct=0.0, memory_used_mib=80000)
            for i in range(8)
        )
        procs = tuple(GpuProcess(100 + i, "python", 80000, gpu_uuid=f"GPU-{i}") for i in GPUS)
        engine.on_sample(HostSample("box", clock.t, None, gpus, procs))
    (idle,) = [a for a in engine.active() if a.key == "gpu_idle_held:job:drafter"]
    at = time.strftime("%H:%M", time.localtime(now - 600.0))
    assert idle.message.endswith(
        f"; after torch 2.10.0+cu128 -> 2.11.0+cu130 at {at} (swap by gpumon)"
    )
    (incident,) = [i for i in incidents(engine.active()) if i.cause.key == idle.key]
    assert screen_fixes(incident) == "d check torch, w swap back to cu128"
    assert incident.fixes[1].command == "gpumon swap-torch box cu128 --version 2.10.0"


def test_a_run_slow_only_in_its_warm_up_raises_nothing(tmp_path: Path) -> None:
    """A run gpumon sees begin (its log spoke before its first step) is compiling for its
    first WARMUP_S: slow then is not slow; slow after it still is."""
    w, engine, clock = setup(tmp_path, slow_for_s=15.0)
    w.on_log("job:drafter", "/l/d.log", ["loading checkpoint shards"], clock.t, backlog=True)
    warm = int(WARMUP_S) - 5
    assert run(w, engine, clock, warm, 4.6) == []  # 175 s at 23 %, far past slow_for_s
    assert run(w, engine, clock, 60, 20.3, first=warm + 1) == []
    (alert,) = run(w, engine, clock, 20, 4.6, first=warm + 61)  # slow after it: said
    assert alert.message.startswith("drafter at 4.6 Ktok/s, 23 % of its expected")


def test_a_run_already_going_when_gpumon_came_is_judged_at_once(tmp_path: Path) -> None:
    """Its first read already has steps: its age is unknown, so no warm-up is assumed (the
    demo's `check --demo-time 150`, a restarted gpumon)."""
    w, engine, clock = setup(tmp_path, slow_for_s=15.0)
    (alert,) = run(w, engine, clock, 20, 4.6, first=5000)
    assert alert.job == "drafter"
    assert w.jobs["drafter"].run_start_seen is False


def test_a_run_whose_log_began_after_gpumon_came_has_its_warm_up(tmp_path: Path) -> None:
    """Its very first line is a step, but the log was not there when gpumon began to
    follow it (the agent's first read of it is not backlog): gpumon saw the run begin."""
    w, engine, clock = setup(tmp_path, slow_for_s=15.0)
    warm = int(WARMUP_S) - 5
    assert run(w, engine, clock, warm, 4.6, backlog=False) == []  # slow, but warming up
    assert w.jobs["drafter"].run_start_seen is True
    (alert,) = run(w, engine, clock, 25, 4.6, first=warm + 1)  # slow after it: said
    assert alert.message.startswith("drafter at 4.6 Ktok/s, 23 % of its expected")


def test_a_slow_job_whose_gpus_clocks_are_held_down_says_so_and_its_fix_goes_first(
    tmp_path: Path,
) -> None:
    """A drafter at a quarter of its speed because GPU 6 throttles (NVML's
    HW_THERMAL_SLOWDOWN, 0x40; the power cap 0x4 on the others is a busy GPU's normal):
    the verdict names the held clocks, and its incident says to check cooling and power
    before the doctor (torch is the wrong place to look)."""
    w, engine, clock = setup(tmp_path)

    def throttled(t: float) -> HostSample:
        base = sample(t, util=97.0, power=300.0)
        gpus = tuple(
            dataclasses.replace(
                g,
                clocks_event_reasons=0x40 if g.index == 6 else 0x4,
                sm_clock_mhz=1100 if g.index == 6 else 2500,
                max_sm_clock_mhz=2617,
            )
            for g in base.gpus
        )
        return dataclasses.replace(base, gpus=gpus)

    for k in range(1, 18):
        clock.t += 1.0
        w.on_log("job:drafter", "/l/d.log", [step(k, 4.6)], clock.t, backlog=k == 1)
        w.judge_stalls(engine, throttled(clock.t), clock.t)
    (alert,) = [a for a in engine.active() if a.kind == "job_slow"]
    assert alert.message.endswith(
        "; clocks held down: hardware thermal slowdown on GPU 6 (SM at 1.1 of 2.6 GHz)"
    ), alert.message
    (incident,) = incidents(engine.active())
    assert [f.words for f in incident.fixes] == [
        "check its GPUs' cooling, power and the node's event log (clocks held down)",
        "check torch and the GPUs",
    ], incident.fixes
    assert command_fix(incident) == (
        "fix: check its GPUs' cooling, power and the node's event log (clocks held down)"
    )
    # the power cap alone is no held clock: the verdict without it says nothing of clocks
    w2, engine2, clock2 = setup(tmp_path / "2")
    (plain,) = run(w2, engine2, clock2, 17, 4.6)
    assert "clocks" not in plain.message


def test_clocks_held_names_each_reason_by_gpu_and_nothing_when_unreported() -> None:
    def gpu(i: int, mask: int | None, sm: int | None = None) -> GpuSample:
        return GpuSample(i, clocks_event_reasons=mask, sm_clock_mhz=sm, max_sm_clock_mhz=2617)

    assert clocks_held([gpu(5, None), gpu(6, None)]) is None  # not reported: not "none"
    assert clocks_held([gpu(5, 0x4), gpu(6, 0x1)]) is None  # power cap, idle: normal
    said = clocks_held([gpu(5, 0x80, 900), gpu(6, 0x80, 1100), gpu(7, 0x8 | 0x80)])
    assert said == (
        "hardware power-brake slowdown on GPUs 5-7, hardware slowdown on GPU 7 (SM at 1.0 of "
        "2.6 GHz)"
    )
