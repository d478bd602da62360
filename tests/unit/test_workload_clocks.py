"""Issue 34 point 5 for the rules that judge durations beyond the connection: a job's stall
and slowness, an SGLang server's hang, a GPU held and idle, a server without traffic, a
GPU filling up, an OOM death. Each story runs on a monotonic ``FakeClock`` twice, once
with gpumon's wall clock left alone and once stepped: +1 h, then -1.5 h (30 min behind
where it began, as NTP correcting a clock set by hand). The alerts, second by second, must
be the same: a step raises nothing false and delays nothing true.

On the old code the +1 h step made the running job ``job_stalled`` (critical) at the next
sample and ``job_slow`` from its derived rate, and a busy server whose decode lines were
read ``sglang_hung``; the -30 min step hid the job's true stall, the server's true hang
(SGLang's ``sglang_hung``, vLLM's ``vllm_wedged``), the idle GPUs and the filling one for
30 min. The target's own times (the agent's reading
times, a log line's stamp, a scrape's reading) are on the target's clock, which is not
stepped here: they are compared only with each other.
tests/integration/test_watch_clocks_ssh.py plays the job's story with a real watch."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import Alert, AlertRules
from gpumon.backends.config import HostConfig
from gpumon.backends.config.workloads import JobConfig, SglangConfig, VllmConfig
from gpumon.backends.model import ConnState, GpuProcess, GpuSample, Health, HostSample
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.sources.agent import dispatch, handlers
from gpumon.backends.remote import protocol
from gpumon.backends.sim.scenario import HANG_AT, SimSettings, wall_time
from gpumon.backends.sim.sglang_model import (
    HUNG_INDEX,
    LOG_INTERVAL_S,
    UPTIME_AT_T0,
    log_lines,
    metrics_text,
)

from quiet_source import Quiet
from stepped_clock import Wall
from upstream_captures import UPSTREAM
from waiting import FakeClock

GIB = 1024
TOTAL = 97887
STEPS = {20: +3600.0, 45: -5400.0}  # second -> the wall clock's step then
Said = tuple[str, int | None, str, str]  # an alert: kind, GPU, severity, words
Seen = list[tuple[int, frozenset[Said]]]  # each second: the alerts heard or active then


class Story:
    """A monitor on a ``FakeClock`` (its monotonic clock) and a ``Wall`` beside it, and
    what it said each second: every alert its listeners heard then (one raised and ended
    within the second is a page all the same) and every alert active at its end (kind,
    GPU, severity, words: the keys of OOM deaths name their wall-clock time, and the
    dates are the wall clock's)."""

    def __init__(self, host: HostConfig, wall_at: float = 1_800_000_000.0) -> None:
        self.ticks = FakeClock(5000.0)
        self.wall = Wall(self.ticks.time, at=wall_at)
        self.monitor = HostMonitor(
            host,
            Quiet(),
            clock=self.wall,
            ticks=self.ticks.time,
            sleep=self.ticks.sleep,
            record=False,
        )
        self.monitor.ingest_status(ConnState.CONNECTED)
        self.heard: set[Said] = set()
        self.monitor.alerts.add_listener(lambda a: self.heard.add(_said(a)))
        self.seen: Seen = []
        table = handlers(self.monitor, lambda _hello: False)
        self.table = table

    def agent(self, message: protocol.Message) -> None:
        """A message as the agent sends it, through the real dispatch."""
        dispatch(self.monitor, self.table, protocol.encode(message).encode())

    def second(self, s: int) -> None:
        """The end of second ``s``: note what was said, then the clock moves on 1 s."""
        now = {_said(a) for a in self.monitor.alerts.active()}
        self.seen.append((s, frozenset(now | self.heard)))
        self.heard.clear()
        self.ticks.advance(1.0)


def _said(alert: Alert) -> Said:
    return (alert.kind, alert.gpu, alert.severity.value, alert.message)


def _first(seen: Seen, kind: str, severity: str | None = None) -> int | None:
    return next(
        (s for s, alerts in seen if any(a[0] == kind and severity in (None, a[2]) for a in alerts)),
        None,
    )


# ----------------------------------------------------------- a job and the host's GPUs

JOB_LOG = "/data/train.log"
JOB = JobConfig(
    "train",
    gpus=(0,),
    log=JOB_LOG,
    stall_after_s=10.0,
    expect_tokens_per_s=20000.0,
    slow_for_s=5.0,
)
RULES = AlertRules(idle_held_after_s=30.0)
SERVER = 30000
LAST_STEP_AT = 39  # the job's last line; it stalls after that
FILLING_FROM = 40  # GPU 2 fills from here (its trend spans the step back at 45)
FALLS_AT = 46  # GPU 4's memory falls from 95 % to 2 % (just after the step back)


def _gpu(index: int, used: float, util: float) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        utilization_pct=util,
        memory_total_mib=TOTAL,
        memory_reserved_mib=637,
        memory_used_mib=round(used),
        memory_free_mib=TOTAL - 637 - round(used),
    )


def _gpus(s: int) -> tuple[GpuSample, ...]:
    filling = 0.62 * TOTAL + max(s - FILLING_FROM, 0) * 1000.0
    return (
        _gpu(0, 80 * GIB, 90.0),  # the job, busy
        _gpu(1, 6 * GIB, 0.0),  # a jupyter kernel holding 6 GiB at 0 %: held and idle
        _gpu(2, filling, 60.0),  # flat at 62 % (over ttf_min_used_pct), then 1 GiB/s more
        _gpu(3, 69 * GIB, 0.0),  # an SGLang server's KV pool, no traffic: server_idle
        _gpu(4, 0.95 * TOTAL if s < FALLS_AT else 0.02 * TOTAL, 50.0),  # an OOM death
    )


PROCESSES = (
    GpuProcess(100, "python train.py", 80 * GIB, gpu_uuid="GPU-0"),
    GpuProcess(200, "jupyter-lab", 6 * GIB, gpu_uuid="GPU-1"),
    GpuProcess(300, "python grow.py", 30 * GIB, gpu_uuid="GPU-2"),
    GpuProcess(311, "sglang::scheduler_TP0", 69 * GIB, gpu_uuid="GPU-3"),
    GpuProcess(400, "python eval.py", 90 * GIB, gpu_uuid="GPU-4"),
)


def _step_line(k: int) -> str:
    return f"step {k}/100000 | loss 2.3100 | tokens {k * 20000}"


def _job_story(steps: dict[int, float], tmp_path: Path) -> Seen:
    """70 s, a sample and the job's line each second (its first read from the log's
    backlog, so its rate is judged at once), on gpumon's wall clock stepped by ``steps``;
    the target's clock (the agent's reading times) is not."""
    host = HostConfig(
        name="box",
        kind="local",
        kernel_log=False,
        alerts=RULES,
        jobs=(JOB,),
        sglang=SglangConfig(ports=(SERVER,), discover=False),
    )
    story = Story(host)
    monitor, wall, agent = story.monitor, story.wall, story.agent
    monitor.workloads.baselines.path = tmp_path / "runs.json"
    target = wall()  # the target's clock, never stepped
    monitor.ingest_processes(PROCESSES, wall())
    # one answer of the server (up and answering; its GPU 3 has the sglang process)
    scrape = metrics_text(SimSettings(scenario="sglang"), 0, 30.0, -UPTIME_AT_T0)
    agent(protocol.Http(f"sglang:{SERVER}", target, 200, scrape))
    agent(protocol.Log(f"job:{JOB.name}", JOB_LOG, target, True, [_step_line(0)]))
    for s in range(70):
        wall.offset += steps.get(s, 0.0)
        monitor.ingest_sample(HostSample("box", wall(), None, _gpus(s), monitor.processes))
        if s <= LAST_STEP_AT:
            agent(protocol.Log(f"job:{JOB.name}", JOB_LOG, target + s, False, [_step_line(s)]))
        story.second(s)
    return story.seen


def test_a_wall_clock_step_changes_no_verdict_on_a_job_or_the_gpus(tmp_path: Path) -> None:
    steady = _job_story({}, tmp_path)
    # what the story pages at all (else the comparison below proves nothing)
    assert _first(steady, "gpu_idle_held") == 30  # GPU 1's jupyter, 30 s held and idle
    assert _first(steady, "server_idle") == 30  # GPU 3's server without traffic
    stalled = _first(steady, "job_stalled")
    assert stalled is not None and LAST_STEP_AT + 10 <= stalled <= LAST_STEP_AT + 11
    assert _first(steady, "job_slow") is None  # 20 Ktok/s, as expected
    assert _first(steady, "oom_death") == FALLS_AT
    filling = _first(steady, "time_to_full")
    assert filling is not None and FILLING_FROM < filling < 70
    stepped = _job_story(STEPS, tmp_path)
    for (s, want), (_, got) in zip(steady, stepped, strict=True):
        assert got == want, f"at {s} s (the wall clock stepped at {sorted(STEPS)} s)"


# ----------------------------------------------------------- an SGLang server that hangs

HANG = SimSettings(scenario="hang")
STARTED = -UPTIME_AT_T0
SGLANG_LOG = f"/data/sglang-{SERVER}.log"


def _hang_story(steps: dict[int, float]) -> Seen:
    """The simulator's server of GPU 0 from 20 s before its hang to 80 s after it: its
    decode lines as they are written (read at the target's time, read first), then a
    scrape, each second; gpumon's wall clock stepped by ``steps`` (keys: seconds from the
    start), the target's (the pages' and the lines' times) not."""
    host = HostConfig(
        name="box",
        kind="local",
        kernel_log=False,
        sglang=SglangConfig(ports=(SERVER,), log=SGLANG_LOG, discover=False),
    )
    start = HANG_AT - 20
    story = Story(host, wall_at=wall_time(HANG, start))  # both clocks agree at first
    logged = int((start - STARTED) // LOG_INTERVAL_S)
    for s in range(100):
        story.wall.offset += steps.get(s, 0.0)
        t = start + s
        target = wall_time(HANG, t)
        due = int((t - STARTED) // LOG_INTERVAL_S)
        lines = [
            ln for e in range(logged + 1, due + 1) for ln in log_lines(HANG, HUNG_INDEX, e, STARTED)
        ]
        logged = due
        if lines:
            story.agent(protocol.Log("sglang", SGLANG_LOG, target, False, lines))
        page = metrics_text(HANG, HUNG_INDEX, t, STARTED)
        story.agent(protocol.Http(f"sglang:{SERVER}", target, 200, page))
        story.second(s)
    return story.seen


@pytest.mark.parametrize("steps", [STEPS, {10: +3600.0, 30: -5400.0}], ids=["before", "around"])
def test_a_wall_clock_step_makes_no_server_hung_and_hides_no_hang(steps: dict[int, float]) -> None:
    """The steps come before the hang (at 20 s), or +1 h before it and -1.5 h 10 s into it."""
    steady = _hang_story({})
    # a warning once its log says the health check failed (25 s into the hang), critical
    # once the counters stood still 60 s (+ a scrape or two)
    early = _first(steady, "sglang_hung")
    assert early is not None and 20 + 25 <= early <= 20 + 30
    hung = _first(steady, "sglang_hung", Health.CRITICAL.value)
    assert hung is not None and 20 + 60 <= hung <= 20 + 62
    assert _hang_story(steps) == steady


# ----------------------------------------------------------- a vLLM server that wedges

VLLM_PORT = 8000
VLLM_LOG = "/data/vllm.log"
WEDGED_AT = 20  # its last generation token; its stats lines say 0.0 tok/s from then on
PAGE = (UPSTREAM / "vllm" / "0.34.0" / "metrics.prom").read_text()  # 24 + 24 running
GENERATED = re.compile(r"^(vllm:generation_tokens_total\{.*\}) 451000\.0$", re.M)


def _vllm_page(s: int) -> str:
    """vLLM 0.34.0's page at second ``s``: each engine 1,000 tokens a second until the
    wedge, then none, with its requests still running."""
    made = 451_000 + 1_000 * min(s, WEDGED_AT)
    return GENERATED.sub(lambda m: f"{m[1]} {made}.0", PAGE)


def _stats_line(at: float, tokens_per_s: float) -> str:
    """vLLM's periodic stats line (vllm/v1/metrics/loggers.py, as in the 0.34.0 capture's
    stats.log), stamped ``at`` by the target's clock."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(at))
    return (
        f"INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: {tokens_per_s:.1f} tokens/s, Running: 24 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 62.0%, Prefix cache hit rate: 40.0%"
    )


def _wedge_story(steps: dict[int, float]) -> Seen:
    """A vLLM server, its page read each second and its log's stats line every 5 s (read
    at the target's time), that wedges at ``WEDGED_AT``; gpumon's wall clock stepped by
    ``steps``, the target's not."""
    vllm = VllmConfig(ports=(VLLM_PORT,), log=VLLM_LOG, discover=False, hung_after_s=30.0)
    host = HostConfig(name="box", kind="local", kernel_log=False, vllm=vllm)
    story = Story(host)
    target = story.wall()  # the target's clock: both agree at first
    for s in range(80):
        story.wall.offset += steps.get(s, 0.0)
        if s % 5 == 0:
            line = _stats_line(target + s, 2000.0 if s < WEDGED_AT else 0.0)
            story.agent(protocol.Log("vllm", VLLM_LOG, target + s, False, [line]))
        story.agent(protocol.Http(f"vllm:{VLLM_PORT}", target + s, 200, _vllm_page(s)))
        story.second(s)
    return story.seen


@pytest.mark.parametrize("steps", [STEPS, {10: +3600.0, 30: -5400.0}], ids=["before", "around"])
def test_a_wall_clock_step_makes_no_vllm_server_wedged_and_hides_no_wedge(
    steps: dict[int, float],
) -> None:
    """The steps come during the wedge (+1 h as it begins, -1.5 h 25 s into it), or
    +1 h before it and -1.5 h 10 s into it."""
    steady = _wedge_story({})
    wedged = _first(steady, "vllm_wedged")  # no token for 30 s (+ a scrape)
    assert wedged is not None and WEDGED_AT + 30 <= wedged <= WEDGED_AT + 31
    assert _wedge_story(steps) == steady
