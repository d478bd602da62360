"""AlertEngine: memory hysteresis, time to full, OOM death, logs, kernel lines, cgroup counters,
and a restarted drafter in the simulator's training-oom scenario (the scenario end to end,
with the real job program: tests/system/test_alerts_scenario.py)."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpumon.backends.alerts import fit_time_to_full
from gpumon.backends.alerts.engine import (
    Alert,
    AlertEngine,
    AlertRules,
    check_level,
    log_key_prefix,
)
from gpumon.backends.alerts.kinds import KINDS
from gpumon.backends.alerts.store import is_condition
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.parsers import parse_query_gpu
from gpumon.backends.sim import MEMORY_TOTAL_MIB, OOM_AT, SimSettings, wall_time

from sim_samples import sim_printers, sim_sample

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NVIDIA = FIXTURES / "nvidia"
TOTAL = 97887
RESERVED = 637
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def gpu(index: int, used: int | None, **kw: object) -> GpuSample:
    free = None if used is None else TOTAL - RESERVED - used
    values: dict[str, object] = {
        "memory_total_mib": TOTAL,
        "memory_reserved_mib": RESERVED,
        "memory_used_mib": used,
        "memory_free_mib": free,
    }
    values.update(kw)
    return GpuSample(index=index, **values)  # type: ignore[arg-type]


def at_pct(pct: float) -> int:
    return round(TOTAL * pct / 100.0)


def sample(t: float, *gpus: GpuSample, processes: tuple[GpuProcess, ...] = ()) -> HostSample:
    return HostSample("h1", t, None, tuple(gpus), processes)


def engine_with_log(rules: AlertRules | None = None) -> tuple[AlertEngine, Clock, list[Alert]]:
    clock = Clock()
    engine = AlertEngine("h1", rules or AlertRules(), clock=clock)
    heard: list[Alert] = []
    engine.add_listener(heard.append)
    return engine, clock, heard


def feed_pcts(engine: AlertEngine, pcts: list[float], start: float = T0, index: int = 0) -> None:
    for k, p in enumerate(pcts):
        engine.on_sample(sample(start + k, gpu(index, at_pct(p))))


# --------------------------------------------------------------------------- rules


def test_rules_from_mapping_defaults_overrides_and_host_layering() -> None:
    assert AlertRules.from_mapping({}, "alerts") == AlertRules()
    base = AlertRules.from_mapping({"memory_warning_pct": 90, "ttf_horizon_s": 120}, "alerts")
    assert (base.memory_warning_pct, base.ttf_horizon_s) == (90.0, 120.0)
    host = AlertRules.from_mapping({"memory_critical_pct": 97.5}, "hosts.gpu1.alerts", base)
    assert (host.memory_warning_pct, host.memory_critical_pct) == (90.0, 97.5)
    assert isinstance(AlertRules.from_mapping({"clear_samples": 5}, "a").clear_samples, int)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"memory_warnign_pct": 90}, "alerts.memory_warnign_pct: unknown key (did you mean"),
        ({"memory_warning_pct": True}, "alerts.memory_warning_pct: expected a number"),
        ({"memory_warning_pct": "95"}, "alerts.memory_warning_pct: expected a number"),
        ({"memory_critical_pct": 101}, "alerts.memory_critical_pct: expected a number from 1"),
        ({"clear_samples": 2.5}, "alerts.clear_samples: expected an integer"),
        ({"ttf_horizon_s": float("nan")}, "alerts.ttf_horizon_s: expected a number"),
        ({"memory_critical_pct": 90}, "alerts.memory_critical_pct: must be >= memory_warning_pct"),
    ],
)
def test_bad_rules_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        AlertRules.from_mapping(data, "alerts")


# ---------------------------------------------------------------- memory hysteresis


def test_oscillating_around_the_threshold_does_not_flap() -> None:
    engine, _, heard = engine_with_log()
    feed_pcts(engine, [90.0] + [94.6, 95.4] * 20)
    assert [a.key for a in heard] == ["memory:0"]
    assert engine.active()[0].severity is Health.WARNING
    feed_pcts(engine, [94.0, 93.5, 94.5, 93.9] * 5, start=T0 + 100)  # under 95, not 2 points under
    assert [a.key for a in engine.active()] == ["memory:0"]
    feed_pcts(engine, [92.9, 92.5], start=T0 + 200)  # two calm samples: not yet
    assert engine.active()
    feed_pcts(engine, [92.0], start=T0 + 202)  # the third clears it
    assert engine.active() == []
    (past,) = engine.history()
    assert not past.active and past.time == T0 + 2 and past.last_seen == T0 + 201
    assert len(heard) == 1


def test_escalation_rings_again_but_stepping_down_does_not() -> None:
    engine, _, heard = engine_with_log()
    feed_pcts(engine, [95.5, 98.7, 98.0, 97.0, 96.0, 96.0, 96.0, 99.0])
    assert [(a.key, a.severity) for a in heard] == [
        ("memory:0", Health.WARNING),
        ("memory:0", Health.CRITICAL),
        ("memory:0", Health.CRITICAL),  # back to critical after stepping down to warning
    ]
    assert heard[0].time == heard[2].time == T0  # one alert, raised once


def test_too_little_free_memory_warns_even_under_the_percentage() -> None:
    engine, _, _ = engine_with_log()
    small = dict(memory_total_mib=24576, memory_reserved_mib=0)
    engine.on_sample(sample(T0, gpu(0, 23000, memory_free_mib=1576, **small)))  # 93.6%, 1.5 GiB
    (a,) = engine.active()
    assert a.kind == "memory" and a.severity is Health.WARNING and "1.5 GiB free" in a.message
    off = AlertRules(memory_warning_free_gib=0.0)
    quiet = AlertEngine("h1", off, clock=Clock())
    quiet.on_sample(sample(T0, gpu(0, 23000, memory_free_mib=1576, **small)))
    assert quiet.active() == []


def test_memory_level_is_the_alerts_level_for_the_last_sample() -> None:
    """What a screen colours: the memory alert's level (hysteresis included) for the last
    sample, the thresholds' level for an older one, None when memory is not reported."""
    engine, _, _ = engine_with_log()
    feed_pcts(engine, [97.5])
    latest = gpu(0, at_pct(97.5))
    assert engine.memory_level(latest, T0) is Health.WARNING  # under 98.5: not critical
    assert engine.active()[0].severity is Health.WARNING
    feed_pcts(engine, [94.0], start=T0 + 1)  # under 95, within the clear margin
    assert engine.memory_level(gpu(0, at_pct(94.0)), T0 + 1) is Health.WARNING
    assert engine.memory_level(gpu(0, at_pct(94.0)), T0) is Health.OK  # an older sample
    assert engine.memory_level(gpu(0, None), T0 + 1) is None
    assert engine.memory_level(gpu(5, at_pct(99.0)), T0 + 1) is Health.CRITICAL  # unseen GPU


def test_unknown_memory_keeps_the_state() -> None:
    engine, _, _ = engine_with_log()
    feed_pcts(engine, [96.0])
    for k in range(5):
        engine.on_sample(sample(T0 + 1 + k, gpu(0, None)))
    assert [a.key for a in engine.active()] == ["memory:0"]


# --------------------------------------------------------------------- time to full


def test_fit_is_exact_on_a_line_and_robust_to_outliers() -> None:
    times = [float(t) for t in range(30)]
    used = [50000.0 + 100.0 * t for t in range(30)]
    fit = fit_time_to_full(times, used, 29.0, 60000.0, 1.0)
    assert fit is not None and fit[0] == pytest.approx(71.0) and fit[1] == pytest.approx(100.0)
    used[5], used[17], used[22] = 90000.0, 10.0, 59000.0  # three wild points
    fit = fit_time_to_full(times, used, 29.0, 60000.0, 1.0)
    assert fit is not None and fit[0] == pytest.approx(71.0, rel=0.05)
    assert fit_time_to_full(times, [50000.0] * 30, 29.0, 60000.0, 1.0) is None  # flat
    falling = [60000.0 - 100.0 * t for t in range(30)]
    assert fit_time_to_full(times, falling, 29.0, 70000.0, 1.0) is None


def test_time_to_full_needs_enough_points_and_warns_on_two_samples_in_a_row() -> None:
    engine, _, heard = engine_with_log()
    rate = TOTAL * 0.003  # 80% + 0.3 points/s: about 294 MiB/s
    for k in range(30):
        engine.on_sample(sample(T0 + k, gpu(0, at_pct(80.0 + 0.3 * k))))
        if k < 20:
            assert engine.time_to_full(0) is None  # under two 10 s windows of points
        if k == 20:
            assert heard == []  # under the horizon once: not yet
    ttf = engine.time_to_full(0)
    expected = (TOTAL - RESERVED - at_pct(88.7)) / rate
    assert ttf is not None and ttf == pytest.approx(expected, abs=1.0)
    keys = [a.key for a in heard]
    assert keys == ["time_to_full:0"]
    first = heard[0]
    assert first.time == T0 + 21
    assert first.severity is Health.WARNING and re.search(
        r"full in ~\d+ s at \+\d+ MiB/s", first.message
    )


def test_loading_a_job_is_not_a_trend() -> None:
    engine, _, heard = engine_with_log()
    for k in range(40):  # 0 -> 88% in 20 s (weights and KV cache), then flat
        p = min(88.0, 4.4 * k)
        engine.on_sample(sample(T0 + k, gpu(0, at_pct(p))))
    assert heard == [] and engine.time_to_full(0) is None


def test_horizon_zero_turns_ttf_warnings_off() -> None:
    engine, _, heard = engine_with_log(AlertRules(ttf_horizon_s=0))
    for k in range(30):
        engine.on_sample(sample(T0 + k, gpu(0, at_pct(80.0 + 0.3 * k))))
    assert heard == [] and engine.time_to_full(0) is not None


# ------------------------------------------------------------------------ OOM death


def test_memory_collapse_is_a_likely_oom_death_without_any_log() -> None:
    engine, _, heard = engine_with_log()
    proc = GpuProcess(4242, "python3", 90000, gpu_uuid="GPU-a")
    for k, p in enumerate([96.0, 97.0, 98.0]):
        engine.on_sample(sample(T0 + k, gpu(0, at_pct(p), uuid="GPU-a"), processes=(proc,)))
    engine.on_sample(sample(T0 + 3, gpu(0, 12, uuid="GPU-a")))
    death = [a for a in heard if a.kind == "oom_death"]
    assert len(death) == 1
    assert death[0].severity is Health.CRITICAL and death[0].gpu == 0
    assert (
        death[0].message
        == "GPU 0 memory fell from 98% to 0% in 1 s (process 4242 python3): likely OOM death"
    )


def test_an_oom_death_names_who_held_the_gpu_before_its_fall_when_a_list_came_between() -> None:
    """Triple run 2 (beside a CPU hog): the process list taken after the drafter died came
    before the sample with the fall; the death named the jupyter that is still there."""
    engine, _, heard = engine_with_log()
    drafter = GpuProcess(874, "python3 -m train.drafter", 84000, gpu_uuid="GPU-a")
    jupyter = GpuProcess(3187442, "jupyter-lab", 6000, gpu_uuid="GPU-a")
    for k, p in enumerate([96.0, 97.0, 98.0]):
        at = sample(T0 + k, gpu(0, at_pct(p), uuid="GPU-a"), processes=(drafter, jupyter))
        engine.on_sample(at)
    engine.on_processes(sample(T0 + 2, gpu(0, at_pct(98.0), uuid="GPU-a"), processes=(jupyter,)))
    engine.on_sample(sample(T0 + 3, gpu(0, 12, uuid="GPU-a"), processes=(jupyter,)))
    [death] = [a for a in heard if a.kind == "oom_death"]
    assert "874 train.drafter" in death.message, death.message


def test_a_slow_release_or_a_job_ending_at_80_percent_is_not_an_oom_death() -> None:
    engine, _, heard = engine_with_log()
    feed_pcts(engine, [92.0] + [92.0 - 6 * k for k in range(1, 16)])  # 92 -> 2 over 15 s
    feed_pcts(engine, [80.0, 1.0], start=T0 + 100, index=1)
    assert [a for a in heard if a.kind == "oom_death"] == []


def test_gpu_health_problems_from_the_parser_are_alerts_while_present() -> None:
    engine, _, _ = engine_with_log()
    gpus = parse_query_gpu((NVIDIA / "query_gpu_with_na.csv").read_text()).gpus
    engine.on_sample(HostSample("h1", T0, None, gpus))
    health = {a.gpu: (a.severity, a.message) for a in engine.active() if a.kind == "gpu_health"}
    assert health[4] == (Health.CRITICAL, "GPU 4: GPU is lost")
    assert health[7][0] is Health.CRITICAL and "GPU requires reset" in health[7][1]
    assert health[3][0] is Health.WARNING and "Unknown Error" in health[3][1]
    assert set(health) == {3, 4, 7}
    healthy = parse_query_gpu((NVIDIA / "query_gpu_8x_rtxpro6000.csv").read_text()).gpus
    for k in range(1, 4):
        engine.on_sample(HostSample("h1", T0 + k, None, healthy))
    assert [a for a in engine.active() if a.kind == "gpu_health"] == []
    # that snapshot's GPU 6 is 99.1% full: critical memory alert
    assert [(a.key, a.severity) for a in engine.active()] == [("memory:6", Health.CRITICAL)]


# ------------------------------------------------------------------------------ logs

OOM_LINES = [
    "step 1",
    "CUDA_VISIBLE_DEVICES=5,6,7",
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 1, in <module>',
    "    main()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 94.97 GiB of which 1.23 GiB is free. Of the allocated memory 1 GiB is allocated.",
]


def test_a_log_oom_is_critical_on_the_translated_gpu_and_rings_once() -> None:
    engine, clock, heard = engine_with_log()
    new = engine.on_log_lines("/logs/d.log", OOM_LINES, job="drafter")
    assert new == heard and len(new) == 1
    a = new[0]
    assert (a.kind, a.severity, a.gpu, a.job, a.host) == (
        "cuda_oom",
        Health.CRITICAL,
        6,
        "drafter",
        "h1",
    )
    assert a.key == "log:/logs/d.log:6" and a.key.startswith(log_key_prefix("/logs/d.log"))
    assert a.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert a.message.endswith("[process GPU 1 = GPU 6 (CUDA_VISIBLE_DEVICES=5,6,7)]")
    clock.t += 5
    assert engine.on_log_lines("/logs/d.log", OOM_LINES[2:]) == []  # same OOM again: coalesced
    assert engine.active()[0].last_seen == T0 + 5 and len(heard) == 1


def test_without_visible_devices_the_job_gpus_or_the_local_number_are_used() -> None:
    engine, _, _ = engine_with_log()
    (a,) = engine.on_log_lines("/a.log", OOM_LINES[2:], gpus=(5, 6, 7))
    assert a.gpu == 6 and "process GPU 1 = GPU 6 (job GPUs 5,6,7)" in a.message
    (b,) = engine.on_log_lines("/b.log", OOM_LINES[2:], gpus=(3,))
    assert b.gpu == 3 and "the job's GPU" in b.message
    (c,) = engine.on_log_lines("/c.log", OOM_LINES[2:])
    assert c.gpu == 1 and c.message.endswith(
        "[GPU 1 (process-local; CUDA_VISIBLE_DEVICES unknown)]"
    )
    (d,) = engine.on_log_lines("/d.log", OOM_LINES[2:], cuda_visible_devices="2,0")
    assert d.gpu == 0


def test_backlog_that_ends_in_an_oom_is_history_dated_by_its_file() -> None:
    """Issue 34 point 7: a log last written 3 days ago ending in a CUDA OOM was an active
    critical alert opened now (paged 4 s after a fresh watch, check exit 2)."""
    engine, _, heard = engine_with_log()
    written = T0 - 3 * 86400
    lines = [f"step {k}" for k in range(500)] + OOM_LINES + ["", "Killed", "exit 1"]
    assert engine.on_log_lines("/logs/d.log", lines, backlog=True, written=written) == []
    assert engine.active() == [] and heard == []
    (past,) = engine.history()
    assert (past.kind, past.gpu, past.active, past.time) == ("cuda_oom", 6, False, written)
    assert past.message.endswith("(before gpumon started)")
    assert engine.jobs_ended_in_failure() == []  # no configured job: history, nothing more


def test_a_configured_job_still_down_since_its_logs_oom_is_one_condition_dated_by_it() -> None:
    engine, clock, heard = engine_with_log()
    written = T0 - 3 * 86400
    lines = [f"step {k}" for k in range(500)] + OOM_LINES + ["", "Killed", "exit 1"]
    engine.on_log_lines("/logs/d.log", lines, job="d", backlog=True, written=written)
    assert engine.active() == [] and engine.jobs_ended_in_failure() == ["d"]
    engine.judge_job_down("d", True, clock.t)
    (down,) = engine.active()
    assert (down.key, down.kind, down.severity, down.gpu, down.job) == (
        "job_crashed:d",
        "job_crashed",
        Health.CRITICAL,
        6,
        "d",
    )
    assert is_condition(down) and down.time == written  # dated by the line, not now
    assert down.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert "before gpumon started" not in down.message  # the job's state now
    assert engine.source_lines(down.key)[-1] == OOM_LINES[-1]
    engine.judge_job_down("d", True, clock.t + 5)
    assert engine.active() == [down] and heard == []  # one condition, rung by no listener
    clock.t += 60
    engine.on_log_lines("/logs/d.log", ["step 0"])  # its log written again: a new run
    assert engine.active() == [] and engine.jobs_ended_in_failure() == []


def test_a_configured_job_running_again_leaves_its_logs_oom_history_only() -> None:
    engine, clock, _ = engine_with_log()
    engine.on_log_lines("/logs/d.log", OOM_LINES, job="d", backlog=True, written=T0 - 60)
    engine.judge_job_down("d", False, clock.t)  # its GPUs are held: it runs
    assert engine.active() == [] and engine.jobs_ended_in_failure() == []
    engine.judge_job_down("d", True, clock.t + 1)  # judged once: a later stop is no backlog
    assert engine.active() == []


def test_backlog_with_two_runs_that_both_died_names_the_last_oom() -> None:
    engine, clock, _ = engine_with_log()
    kv = "[2026-08-25 14:22:03] KV cache pool is full. Retract requests. #retracted_reqs: 3"
    lines = OOM_LINES + [kv] * 30 + [f"step {k}" for k in range(100)] + OOM_LINES + [kv]
    engine.on_log_lines("/logs/d.log", lines, job="d", backlog=True)
    past = engine.history()
    assert [h.kind for h in past] == ["kv_cache_full", "cuda_oom"]  # one read's repeats folded
    assert not any(h.active for h in past)
    engine.judge_job_down("d", True, clock.t)
    (down,) = engine.active()
    assert past[1].message == down.message + " (before gpumon started)"
    kept = engine.source_lines(down.key)  # the second run's traceback, up to line 142
    assert kept[-len(OOM_LINES) :] == tuple(OOM_LINES) and kv not in kept


def test_backlog_with_an_old_oom_and_a_later_run_is_history_only() -> None:
    engine, _, heard = engine_with_log()
    lines = OOM_LINES + ["run 1 resumed"] + [f"step {k}" for k in range(200)]
    engine.on_log_lines("/logs/d.log", lines, backlog=True)
    assert engine.active() == [] and heard == []
    (past,) = engine.history()
    assert past.kind == "cuda_oom" and not past.active


def test_sglang_logs_through_the_engine() -> None:
    engine, _, heard = engine_with_log()
    crashed = (FIXTURES / "sglang" / "server_oom.log").read_text().splitlines()
    engine.on_log_lines("/srv/sglang-3.log", crashed, job="sglang-3", backlog=True)
    assert engine.active() == []  # the log's backlog: history
    a = next(h for h in engine.history() if h.kind == "cuda_oom")
    assert (a.kind, a.gpu, a.job) == ("cuda_oom", 3, "sglang-3")
    assert a.message.startswith("SGLang Scheduler: torch.OutOfMemoryError: CUDA out of memory.")
    busy = (FIXTURES / "sglang" / "server_decode.log").read_text().splitlines()
    new = engine.on_log_lines("/srv/sglang-5.log", busy, job="sglang-5", gpus=(5,))
    assert [(x.kind, x.severity, x.gpu) for x in new] == [("kv_cache_full", Health.WARNING, 5)]
    assert heard == new


def test_uuid_visible_devices_map_through_the_latest_sample() -> None:
    engine, _, _ = engine_with_log()
    engine.on_sample(sample(T0, gpu(0, 10, uuid="GPU-aaaa-1"), gpu(1, 10, uuid="GPU-bbbb-2")))
    (a,) = engine.on_log_lines("/x.log", OOM_LINES[2:], cuda_visible_devices="GPU-bbbb,GPU-aaaa")
    assert a.gpu == 0 and "process GPU 1 = GPU-aaaa = GPU 0" in a.message


def test_log_activity_well_after_the_oom_means_a_new_run() -> None:
    engine, clock, _ = engine_with_log()
    engine.on_log_lines("/logs/d.log", OOM_LINES)
    clock.t += 5
    engine.on_log_lines("/logs/d.log", ["[2026-11-29 14:26:41] Received sigquit from a child"])
    assert engine.active()  # crash aftermath, seconds later
    clock.t += 40
    engine.on_log_lines("/logs/d.log", ["drafter: run 1 resumed from checkpoint step 650"])
    assert engine.active() == []


def test_acknowledge_ends_events_and_silences_conditions() -> None:
    engine, _, _ = engine_with_log()
    engine.on_log_lines("/logs/d.log", OOM_LINES)
    feed_pcts(engine, [99.0], index=2)
    keys = {a.kind: a.key for a in engine.active()}
    assert engine.acknowledge(keys["cuda_oom"]) and not engine.acknowledge(keys["cuda_oom"])
    assert engine.acknowledge(keys["memory"])
    (mem,) = engine.active()
    assert mem.acknowledged and mem.kind == "memory"
    assert not engine.acknowledge("nope")
    assert engine.worst() is Health.CRITICAL  # acknowledged conditions still count
    assert engine.acknowledge_all() == 0


def test_clear_by_prefix_for_the_restart_action() -> None:
    engine, _, _ = engine_with_log()
    engine.on_log_lines("/logs/d.log", OOM_LINES)
    engine.on_log_lines("/logs/d.log.1", OOM_LINES)
    assert engine.clear(log_key_prefix("/logs/d.log")) == 1
    assert [a.key for a in engine.active()] == ["log:/logs/d.log.1:6"]


def test_a_soft_watchdog_dump_warns_and_the_hard_timeout_after_it_is_critical() -> None:
    engine, clock, heard = engine_with_log()
    soft = "Scheduler watchdog timeout (self.watchdog_timeout=120.0, self.soft=True)"
    hard = "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    engine.on_log_lines("/s.log", [f"[2026-08-25 14:22:03 TP0] {soft}"], gpus=(5,))
    (a,) = engine.active()
    assert (a.kind, a.severity, a.gpu) == ("sglang_error", Health.WARNING, 5)
    assert (
        a.message
        == "SGLang Scheduler TP0: SGLang watchdog dump (soft): the scheduler was stuck 120 s"
    )
    clock.t += 180
    engine.on_log_lines(
        "/s.log",
        [
            f"[2026-08-25 14:25:03 TP0] {hard}",
            "[2026-08-25 14:25:08] SIGQUIT received. signum=None, frame=None. It usually means"
            " one child failed.",
        ],
    )
    (b,) = engine.active()  # the shutdown is the watchdog's, not a second alert
    assert (b.kind, b.severity) == ("sglang_error", Health.CRITICAL)
    assert b.message.endswith("the scheduler was stuck 300 s; the server is being killed (SIGQUIT)")
    assert [x.severity for x in heard] == [Health.WARNING, Health.CRITICAL]


def test_kv_cache_warnings_coalesce_and_expire() -> None:
    engine, clock, heard = engine_with_log()
    line = "[2026-08-25 14:22:03] KV cache pool is full. Retract requests. #retracted_reqs: 3"
    engine.on_log_lines("/s.log", [line], job="sglang-5", gpus=(5,))
    clock.t += 60
    engine.on_log_lines("/s.log", [line, "Decode batch, #running-req: 64"])
    (a,) = engine.active()
    assert (a.kind, a.severity, a.gpu, a.last_seen) == ("kv_cache_full", Health.WARNING, 5, T0 + 60)
    engine.on_sample(sample(T0 + 170, gpu(5, at_pct(80))))
    assert engine.active() and len(heard) == 1
    engine.on_sample(sample(T0 + 181, gpu(5, at_pct(80))))
    assert engine.active() == []


# ------------------------------------------------------------------ kernel and cgroup


def test_kernel_xids_map_to_gpus_and_skip_informational_ones() -> None:
    engine, _, heard = engine_with_log()
    gpus = parse_query_gpu((NVIDIA / "query_gpu_8x_rtxpro6000.csv").read_text()).gpus
    engine.on_sample(HostSample("h1", T0, None, gpus))
    heard.clear()
    lines = (NVIDIA / "dmesg_xid.txt").read_text().splitlines()
    new = engine.on_kernel_lines(lines)
    assert new == heard
    got = [(a.gpu, a.severity, a.message.split(":")[0]) for a in new]
    assert got == [
        (0, Health.WARNING, "Xid 13 on GPU 0"),  # two Xid 13 lines: one alert
        (5, Health.WARNING, "Xid 31 on GPU 5"),
        (1, Health.WARNING, "Xid 45 on GPU 1"),  # solo: no other Xid on its bus
        (2, Health.CRITICAL, "Xid 48 on GPU 2"),
        (2, Health.CRITICAL, "Xid 171 on GPU 2"),
        (2, Health.WARNING, "Xid 63 on GPU 2"),
        (2, Health.CRITICAL, "Xid 154 on GPU 2"),
        (3, Health.WARNING, "Xid 94 on GPU 3"),
        (7, Health.CRITICAL, "Xid 119 on GPU 7"),
        (7, Health.CRITICAL, "Xid 154 on GPU 7"),
        (4, Health.CRITICAL, "Xid 79 on GPU 4"),
        (4, Health.CRITICAL, "Xid 154 on GPU 4"),
    ]
    assert "pid 2419020 sglang::schedul)" in new[1].message
    # The table's meaning and NVIDIA's action, said once (not "GPU has fallen off the bus:
    # GPU has fallen off the bus."); the driver's words only where they add something.
    assert (
        new[10].message == "Xid 79 on GPU 4: fallen off the bus — reboot the node (PCI 0000:9a:00)"
    )
    assert new[11].message.endswith(
        "GPU recovery action changed — reboot the node (PCI 0000:9a:00)"
    )
    assert new[1].message.startswith("Xid 31 on GPU 5: GPU memory page fault — restart the app")
    assert "[Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS" in new[1].message
    assert new[2].message.startswith(
        "Xid 45 on GPU 1: application torn down, no other Xid — restart the Fabric Manager"
    )
    assert engine.on_kernel_lines(lines) == []  # dmesg re-read after a reconnect: no repeats


def test_kernel_backlog_is_history_and_an_unreadable_log_is_one_note() -> None:
    engine, _, heard = engine_with_log()
    lines = (NVIDIA / "dmesg_xid.txt").read_text().splitlines()
    assert engine.on_kernel_lines(lines, backlog=True) == []
    past = engine.history()
    assert heard == [] and engine.active() == [] and len(past) == 12  # repeats folded
    assert all(not a.active for a in past)
    denied = "dmesg: read kernel buffer failed: Operation not permitted"
    for _ in range(50):
        engine.on_kernel_lines([denied])
    assert [text for _, text in engine.notes()] == [f"kernel log not readable here: {denied}"]
    assert engine.active() == [] and heard == []


def test_host_oom_killer_names_the_victim_its_cgroup_and_gpu() -> None:
    engine, _, heard = engine_with_log()
    proc = GpuProcess(2433019, None, 1200, gpu_uuid="GPU-x")
    engine.on_sample(sample(T0, gpu(3, at_pct(40), uuid="GPU-x"), processes=(proc,)))
    engine.on_kernel_lines((NVIDIA / "host_oom_killer.txt").read_text().splitlines())
    (a,) = heard
    assert (a.kind, a.severity, a.gpu) == ("host_oom_kill", Health.CRITICAL, 3)
    assert a.message == (
        "OOM killer (host out of memory) killed python3 (pid 2433019, 160.0 GiB anon) in "
        "/lxc/105/ns/user.slice/user-0.slice/session-7.scope"
    )


def test_cgroup_oom_kill_counter() -> None:
    engine, _, heard = engine_with_log()
    assert engine.on_memory_events("oom 1\noom_kill 1\n") == []  # baseline
    assert engine.on_memory_events("oom 1\noom_kill 1\n") == []
    (a,) = engine.on_memory_events("oom 3\noom_kill 3\n")
    assert a.kind == "cgroup_oom_kill" and a.severity is Health.CRITICAL
    assert "2 process(es) OOM-killed (memory.events oom_kill 1 -> 3)" in a.message
    assert engine.on_memory_events("oom 4\noom_kill 4\n") == []  # folded into the active one
    (now,) = engine.active()
    assert now.key == a.key and now.message.endswith("(memory.events oom_kill 1 -> 4)")
    assert engine.on_memory_events("oom_kill 0\n") == []  # a new cgroup: new baseline
    assert engine.on_memory_events("garbage") == [] and heard == [a]
    engine.acknowledge(a.key)
    (b,) = engine.on_memory_events("oom_kill 1\n")
    assert b.key != a.key and b.message.endswith("(memory.events oom_kill 0 -> 1)")


# ------------------------------------------------------------------ records and API


def test_to_json_has_exactly_the_documented_keys() -> None:
    alert = Alert("memory:6", Health.WARNING, "memory", "h1", 6, None, "m", T0, T0)
    out = alert.to_json()
    assert list(out) == [
        "severity",
        "kind",
        "host",
        "gpu",
        "job",
        "message",
        "time",
        "first_message",
        "peak_message",
        "peak_severity",
        "facts",
    ]
    assert out["severity"] == "warning" and out["gpu"] == 6 and out["job"] is None
    assert out["facts"] == {}  # made by hand: none known (the engine gives its rules')
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", out["time"])
    assert datetime.fromisoformat(out["time"]).timestamp() == T0
    assert set(KINDS) >= {"memory", "cuda_oom", "oom_death", "xid", "sglang_error"}


def test_active_is_worst_first_then_newest_and_history_is_bounded() -> None:
    engine, clock, _ = engine_with_log()
    feed_pcts(engine, [96.0], index=0)
    clock.t += 1
    engine.on_log_lines("/x.log", ["[2026-08-25] KV cache pool is full. Retract requests."])
    clock.t += 1
    engine.on_log_lines("/y.log", OOM_LINES)
    assert [a.kind for a in engine.active()] == ["cuda_oom", "kv_cache_full", "memory"]
    for pid in range(600):
        line = f"Out of memory: Killed process {pid} (p{pid}) total-vm:1kB, anon-rss:1kB, x"
        (a,) = engine.on_kernel_lines([line])
        assert engine.acknowledge(a.key)
    history = engine.history()
    assert len(history) == 500
    assert history[0].message.startswith("OOM killer (host out of memory) killed p599 (pid 599")
    assert {a.kind for a in history} >= {"cuda_oom", "memory", "kv_cache_full"}  # active stay


def test_a_broken_listener_does_not_stop_alerting() -> None:
    engine = AlertEngine("h1", AlertRules(), clock=Clock())
    heard: list[Alert] = []

    def broken(alert: Alert) -> None:
        raise RuntimeError("ui gone")

    engine.add_listener(broken)  # before the one that works
    engine.add_listener(heard.append)
    feed_pcts(engine, [99.0])
    assert len(heard) == 1
    later: list[Alert] = []
    engine.add_listener(later.append)
    engine.remove_listener(heard.append)
    engine.on_log_lines("/y.log", OOM_LINES)
    assert [a.kind for a in later] == ["cuda_oom"] and len(heard) == 1  # removed: not told


def test_check_level_reports_the_worst_alert() -> None:
    engine = AlertEngine("h1", AlertRules(), clock=Clock())
    assert check_level(engine, sample(T0, gpu(0, at_pct(50)))) == (Health.OK, "no alerts")
    level, text = check_level(engine, sample(T0 + 1, gpu(0, at_pct(96)), gpu(1, at_pct(99))))
    assert level is Health.CRITICAL
    assert text.startswith("GPU 1 memory 99.0% used") and text.endswith("(+1 more)")


def test_on_sample_is_cheap_for_8_gpus() -> None:
    engine = AlertEngine("h1", AlertRules(), clock=Clock())
    samples = [
        sample(T0 + k, *(gpu(i, at_pct(85 + (k % 7) * 0.1 + i)) for i in range(8)))
        for k in range(400)
    ]
    start = time.perf_counter()
    for s in samples:
        engine.on_sample(s)
    per_sample = (time.perf_counter() - start) / len(samples)
    assert per_sample < 0.002  # measured ~0.06 ms; generous for loaded CI machines


# --------------------------------------------------- the simulator's training-oom scenario


def test_a_restarted_drafter_refilling_its_gpu_clears_the_oom_alerts(tmp_path: Path) -> None:
    settings = SimSettings(restarts=(70.0,))
    printers = sim_printers(settings)
    clock = Clock()
    engine = AlertEngine("ct200", AlertRules(), clock=clock)
    for t in range(101):
        clock.t = wall_time(settings, t)
        engine.on_sample(sim_sample(printers, settings, t))
        if t == OOM_AT:
            engine.on_log_lines("/root/drafter.log", OOM_LINES, job="drafter")
        if t == OOM_AT + 3:
            assert {a.kind for a in engine.active()} == {"oom_death", "cuda_oom"}
    assert engine.active() == []  # refilled after the restart; and no ttf alarm while loading
    kinds = [a.kind for a in engine.history()]
    assert "time_to_full" in kinds and kinds.count("time_to_full") == 1


def test_these_gpus_have_the_simulators_memory_size() -> None:
    assert MEMORY_TOTAL_MIB == TOTAL


# ------------------------------------------------------------------- a GPU drops out


def test_a_gpu_that_drops_out_of_the_listing_is_a_critical_alert_until_it_is_back() -> None:
    engine, _clock, heard = engine_with_log()
    named = {"name": "NVIDIA RTX PRO 6000", "bus_id": "00000000:3B:00.0"}
    engine.on_sample(sample(T0, gpu(0, 1000), gpu(3, at_pct(97), **named)))
    assert [a.kind for a in engine.active()] == ["memory"]  # GPU 3 at 97 %: a warning
    engine.on_sample(sample(T0 + 1, gpu(0, 1000)))
    missing = [a for a in engine.active() if a.kind == "gpu_health"]
    assert len(missing) == 1 and missing[0].gpu == 3 and missing[0].severity is Health.CRITICAL
    assert "GPU 3 is no longer reported (NVIDIA RTX PRO 6000, 00000000:3B:00.0)" in (
        missing[0].message
    )
    assert [a.kind for a in heard] == ["memory", "gpu_health"]
    assert not any(a.kind == "memory" for a in engine.active())  # nothing observes it now
    engine.on_sample(sample(T0 + 2, gpu(0, 1000)))
    assert len(heard) == 2  # still missing: raised once
    for k in range(3):  # back and healthy: ends after clear_samples samples
        engine.on_sample(sample(T0 + 3 + k, gpu(0, 1000), gpu(3, 1000, **named)))
    assert engine.active() == []


def test_an_alert_keeps_the_lines_that_raised_it() -> None:
    # The detail view shows them (issue 26.3): the traceback's end with the key line for
    # a log event, even when the traceback came in two reads; the line for a kernel event.
    engine, clock, _ = engine_with_log()
    engine.on_log_lines("/logs/d.log", OOM_LINES[:4], job="drafter")
    (oom,) = engine.on_log_lines("/logs/d.log", OOM_LINES[4:])
    assert engine.source_lines(oom.key) == tuple(OOM_LINES)
    assert engine.source_lines("memory:6") == ()  # a sampled condition has none
    xid = "NVRM: Xid (PCI:0000:ba:00): 79, pid=1, name=x, GPU has fallen off the bus."
    feed_pcts(engine, [50.0])  # a GPU listed: kernel lines are no longer held for one
    clock.t += 1
    (fell,) = engine.on_kernel_lines([xid])
    assert engine.source_lines(fell.key) == (xid,)


def test_a_condition_remembers_when_it_peaked() -> None:
    engine, _, _ = engine_with_log()
    feed_pcts(engine, [96.0, 99.0, 97.0])
    (memory,) = engine.active()
    assert memory.time == T0 and memory.peak_at == T0 + 1 and memory.last_seen == T0 + 2
    assert "99" in memory.peak_text
