"""What runs on a host, as the monitor sees it: SGLang servers and jobs.

Holds one ``SglangTracker`` per server port and one ``JobTracker`` per configured job,
tells the agent what to fetch and follow, and feeds the trackers from its messages. The
OOM verdict on a job comes from the alert engine (one matcher for the whole program).

Two clocks, as in the monitor. The callers give the wall time (``t``, ``now``): it dates
the alerts and says when the target's own stamps were read where the agent did not.
Every duration is judged on ``ticks`` (the monitor's ``watch_clock``: monotonic, less the
spans gpumon did not run), which the trackers are fed and judged at (``now()``): no step,
silence, rate, warm-up or idle time of a job or a server is a difference of wall-clock
readings, so a wall-clock step pages no false ``job_stalled``, ``job_slow``,
``sglang_hung`` or ``vllm_wedged`` and delays no true one. Without ``ticks`` (a test, a
tracker driven by hand) the callers' time is the only clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.alerts.facts import MIB, NO_FACTS, AlertFacts
from gpumon.backends.alerts.incident import failure_kind
from gpumon.backends.alerts.kinds import Tag, tagged
from gpumon.backends.alerts.store import Alert
from gpumon.backends.config.load import HostConfig
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.model import GpuRef, GpuRegistry, GpuSample, Health, HostSample
from gpumon.backends.parsers.oom import KEEP_PATTERN
from gpumon.backends.parsers.processes import foreign
from gpumon.backends.paths import host_file_name, state_dir
from gpumon.backends.workloads.changes import SeenReader, SwapReader
from gpumon.backends.workloads.engine import (
    ENGINES,
    SGLANG,
    VLLM,
    ServingEngine,
)
from gpumon.backends.workloads.engine import (
    SERVER_INFO_PATHS as SERVER_INFO_PATHS,  # SGLang's info pages, read from here too
)

if TYPE_CHECKING:
    # the servers' trackers and their parsers only where a host has servers, imported
    # where the first is tracked (``ServingEngine.parts``) or judged
    # a job's trackers, verdicts and memory (progress and collective parsers, the
    # baselines' JSON) only where a host has jobs: imported where the first is made
    from gpumon.backends.parsers.flight_recorder import FrReport
    from gpumon.backends.remote.protocol import ServerInfo
    from gpumon.backends.workloads.memory import JobMemory
    from gpumon.backends.workloads.sglang import Hung, SglangTracker
    from gpumon.backends.workloads.slow import RunBaselines, SlowWatch
    from gpumon.backends.workloads.trackers import JobTracker
    from gpumon.backends.workloads.vllm import VllmTracker

# What a job's log says it died of: a crash its log says (not ``oom_death``, the GPU's
# memory collapsing, which the automatic restart acts on: a job's state is judged when
# its log is read, and a job restarted by hand writes its log before its GPU fills again).
CRASH_KINDS = tagged(Tag.CRASH) & tagged(Tag.LOG_FAILURE)
_OOM_KINDS = tagged(Tag.OOM)
_SGLANG_KINDS = tagged(Tag.SGLANG)
NCCL_SPIN_UTIL_PCT = 95.0  # every rank this busy ...
NCCL_SPIN_POWER_SHARE = 0.35  # ... on less than this share of its power limit: a spin
SERVER_COMMANDS_KEPT = 256  # servers' command lines kept (ports come and go)
_PORT_IN_PATH = lazy_pattern(r"(?<!\d)(\d{2,5})(?!\d)")


@dataclass(frozen=True, slots=True)
class LogSource:
    """Which followed log a tag names: a job's (``job``), the SGLang log (``sglang``), or
    one of ``watch_logs``. ``tag`` is what the agent is given and sends back with each
    batch of lines, and what recordings and ``snapshot --json`` keep: ``job:NAME``,
    ``sglang``, ``watch``."""

    job: str | None = None
    sglang: bool = False

    @property
    def tag(self) -> str:
        if self.job is not None:
            return f"job:{self.job}"
        return "sglang" if self.sglang else "watch"

    @classmethod
    def from_tag(cls, tag: str) -> LogSource:
        """The source ``tag`` names (a tag gpumon did not give reads as a watched log)."""
        kind, sep, name = tag.partition(":")
        if kind == "job" and sep:
            return cls(job=name)
        return cls(sglang=tag == "sglang")

    def what(self) -> str:
        """In a message: "job drafter's log", "watched log"."""
        return f"job {self.job}'s log" if self.job is not None else "watched log"


class Workloads:
    def __init__(
        self,
        host: HostConfig,
        baselines: Path | None = None,
        *,
        learn: bool = True,
        audit: Path | None = None,
        torch_seen: Path | None = None,
        clock: Callable[[], float] = time.time,
        ticks: Callable[[], float] | None = None,
    ) -> None:
        """``baselines``: the JSON file of the jobs' good runs (``slow.py``); by default
        ``baselines/HOST.json`` in the state directory. ``learn``: False reads it only
        (a replay). ``audit``: the audit log a slow job's torch swaps are read from,
        ``torch_seen``: the doctor's torch-seen log (``changes.py``; by default
        ``paths.audit_log()`` and ``paths.torch_seen_log()``). ``clock``: the wall clock,
        ``ticks``: the clock durations are judged on (module docstring; None: the
        callers' wall time)."""
        self.host = host
        self.clock = clock
        self.ticks = ticks
        self._baselines_at = (
            baselines or state_dir() / "baselines" / f"{host_file_name(host.name)}.json"
        )
        self._learn = learn
        self._baselines: RunBaselines | None = None
        self.swaps = SwapReader(audit)
        self.torch_seen = SeenReader(torch_seen)
        self.slow: dict[str, SlowWatch] = {}
        # each engine's servers by its name (``ServingEngine.name``), from its
        # ``[hosts.NAME.<name>]`` ports and, later, discovery: the agent's answers are
        # routed by the engine their tag names, so a third engine is one more ENGINES entry
        self.servers: dict[str, dict[int, SglangTracker]] = {}
        for engine in ENGINES:
            config = getattr(host, engine.name, None)
            ports = config.ports if config is not None else ()
            self.servers[engine.name] = {p: engine.tracker(p) for p in ports}
        self.sglang = self.servers[SGLANG.name]
        self.vllm = cast("dict[int, VllmTracker]", self.servers[VLLM.name])
        # engine -> (the sample, its servers' ports and GPU device files, their GPUs):
        # worked out once per sample, however many judges and views ask
        self._gpus: dict[str, tuple[HostSample, object, dict[int, tuple[int, ...]]]] = {}
        # What each job's flight-recorder dumps said of its stall (the evidence step):
        # the verdict names the rank from them until the stall ends.
        self.collectives: dict[str, FrReport] = {}
        self.jobs: dict[str, JobTracker] = {}
        # what each job was seen to need of its GPUs' memory (its restart's free-GPU check)
        self.memory: dict[str, JobMemory] = {}
        if host.jobs:  # the trackers' modules only for a host with jobs (TYPE_CHECKING)
            from gpumon.backends.workloads.memory import JobMemory
            from gpumon.backends.workloads.trackers import JobTracker

            self.jobs = {j.name: JobTracker(j.name, j.progress, j.gpus) for j in host.jobs}
            self.memory = {j.name: JobMemory() for j in host.jobs}
        self.server_commands: dict[int, str] = {}  # port -> how the SGLang server started
        self.first_rounds: set[str] = set()  # the agent's parts that answered once
        # job -> since when processes hold its GPUs (``now()``)
        self.held_since: dict[str, float] = {}

    @property
    def baselines(self) -> RunBaselines:
        """The jobs' good runs (``slow.py``), read when a job is first judged slow."""
        if self._baselines is None:
            from gpumon.backends.workloads.slow import RunBaselines  # see TYPE_CHECKING

            self._baselines = RunBaselines(self._baselines_at, learn=self._learn)
        return self._baselines

    # --- clocks ------------------------------------------------------------------------
    def now(self) -> float:
        """Now on the clock the trackers keep their times on (module docstring)."""
        return self.ticks() if self.ticks is not None else self.clock()

    def wall_of(self, t: float) -> float:
        """``t`` of the trackers' clock on the wall clock: as long ago as it was."""
        return t if self.ticks is None else self.clock() - (self.ticks() - t)

    def _judged(self, wall: float) -> float:
        """Now for the trackers, given the caller's wall time ``wall``."""
        return wall if self.ticks is None else self.ticks()

    # --- what the agent is asked to do -------------------------------------------------
    def log_specs(self) -> list[dict[str, str]]:
        """The logs the agent follows: watch_logs, every job's log, the SGLang log."""
        h = self.host
        sources = [(p, LogSource()) for p in h.watch_logs]
        sources += [(j.log, LogSource(job=j.name)) for j in h.jobs if j.log]
        if h.sglang is not None and h.sglang.log:
            sources.append((h.sglang.log, LogSource(sglang=True)))
        specs = [{"path": p, "tag": s.tag, "keep": KEEP_PATTERN} for p, s in sources]
        if h.vllm is not None and h.vllm.log:
            specs.append({"path": h.vllm.log, "tag": VLLM.name, "keep": KEEP_PATTERN})
        return specs

    def http_targets(self) -> list[dict[str, Any]]:
        return [e.target(port) for e in ENGINES for port in self.servers[e.name]]

    @property
    def vllm_hung_after_s(self) -> float:
        """``[hosts.NAME.vllm] hung_after_s``: requests and no token this long is wedged."""
        from gpumon.backends.workloads.vllm import HUNG_AFTER_S  # see TYPE_CHECKING

        return self.host.vllm.hung_after_s if self.host.vllm is not None else HUNG_AFTER_S

    def discover_vllm(self) -> bool:
        """vLLM discovery is on unless ``[hosts.NAME.vllm]`` says ``discover = false``."""
        return self.host.vllm is None or self.host.vllm.discover

    def discover(self) -> bool:
        """SGLang discovery is on unless the host's ``[hosts.NAME.sglang]`` table says
        ``discover = false``: no table needed."""
        return self.host.sglang is None or self.host.sglang.discover

    # --- agent messages ----------------------------------------------------------------
    def on_first_round(self, part: str, ports: Sequence[int]) -> None:
        """A part of the agent answered once (``logs``, ``discover``); the servers that
        discovery found are tracked from now on, unknown (``up`` null) until fetched."""
        self.first_rounds.add(part)
        if part == "discover":
            for port in ports:
                if port not in self.sglang:
                    self.sglang[port] = SGLANG.tracker(port)
        elif part == "discover-vllm":
            for port in ports:
                if port not in self.vllm:
                    self.vllm[port] = cast("VllmTracker", VLLM.tracker(port))

    def on_server_info(self, info: ServerInfo, *, command: str | None = None) -> None:
        """The agent's discovery of a server's processes (``info``, as the agent sent it):
        an SGLang server's command line (``command``: its secrets masked, None: not sent),
        which its hang's fix says; a vLLM server's command line's parallel sizes, the
        ``/dev/nvidiaN`` its process tree holds (its GPUs) and its API server's PID (the
        bundle reads its command line and output there)."""
        engine, port = info.engine, info.port
        if not 0 < port < 65536:
            return
        commands = self.server_commands
        if command is not None:
            if len(commands) >= SERVER_COMMANDS_KEPT and port not in commands:
                del commands[next(iter(commands))]  # the oldest: ports come and go
            commands[port] = command
        if engine != VLLM.name:
            return
        if port not in self.vllm:
            self.vllm[port] = cast("VllmTracker", VLLM.tracker(port))
        sizes = {"tp": info.tp, "pp": info.pp, "dp": info.dp}
        parallel = {k: v for k, v in sizes.items() if v is not None}
        self.vllm[port].observe_processes(parallel, info.minors, info.pid if info.pid > 0 else None)

    def on_http(
        self,
        tag: str,
        status: int | None,
        body: str,
        error: str | None,
        t: float,
        *,
        at: float | None = None,
    ) -> None:
        """A fetch of ``tag``'s URL (an engine's ``NAME:PORT`` for ``/metrics``,
        ``NAME-info:PORT`` for its info page, ``NAME-health:PORT`` for its probe): HTTP
        status (None: no answer). A tag of no engine is not one gpumon asked for."""
        came = self._judged(t)
        for engine in ENGINES:
            routed = engine.parse_tag(tag)
            if routed is None:
                continue
            part, port = routed
            servers = self.servers[engine.name]
            server = servers.get(port)
            if server is None:  # discovered by the agent
                server = servers[port] = engine.tracker(port)
            if part == "health":
                server.observe_health(status, error, came)
            elif part == "info":
                server.observe_info(status, body)
            else:
                server.observe_http(status, body, came, error, at=at)
            return

    def on_log(
        self,
        tag: str,
        path: str,
        lines: list[str],
        t: float,
        *,
        backlog: bool,
        read_at: float | None = None,
    ) -> None:
        """New lines of a followed log that came at wall time ``t``; ``backlog``: the tail
        that was there at start; ``read_at``: when the agent read them, by the target's
        clock (the one its lines' stamps are on; None: ``t``)."""
        came = self._judged(t)
        read = t if read_at is None else read_at
        if tag == VLLM.name:
            server = _server_for(self.vllm, path)
            if server is not None:  # a VllmTracker: reads vLLM's lines
                for line in lines:
                    server.observe_log_line(line, came, read_at=read)
            return
        source = LogSource.from_tag(tag)
        if source.job is not None:
            job = self.jobs.get(source.job)
            if job is not None:  # the tracker decides whether progress means "running again"
                job.feed_lines(lines, came, backlog=backlog)
        elif source.sglang:
            tracker = self._server_for(path)
            if tracker is not None:
                for line in lines:
                    tracker.observe_log_line(line, came, read_at=read)

    def _server_for(self, path: str) -> SglangTracker | None:
        """The server a log file belongs to: a configured port in its name, or the only one."""
        return _server_for(self.sglang, path)

    def apply_alerts(self, alerts: AlertEngine, t: float, refs: GpuRegistry | None = None) -> None:
        """A job whose log has an active OOM or crash alert has crashed (says which, on
        which GPU of ``refs``, the newest sample's, and torchrun's first observed failure
        and restarts where its log had them), at wall time ``t``."""
        for alert in alerts.active():
            kind = failure_kind(alert)
            job = self.jobs.get(alert.job or "")
            if kind not in CRASH_KINDS or job is None or job.crashed:
                continue
            reason = "OOM" if kind in _OOM_KINDS else "crash"
            gpu = None
            if alert.gpu is not None:  # a GPU no sample lists (yet) is still that index
                gpu = (refs.index(alert.gpu) if refs else None) or GpuRef(alert.gpu)
            facts = [job.root_cause.text] if job.root_cause is not None else []
            n = job.elastic_restarts
            if n:
                facts.append(f"after {n} torchrun restart{'s' if n != 1 else ''}")
            job.mark_crashed(reason, self._judged(t), gpu=gpu, facts=tuple(facts))
            memory = self.memory.get(job.name)
            if memory is not None and kind in _OOM_KINDS and alert.gpu is not None:
                said = alert.facts  # PyTorch's "Tried to allocate 2.00 GiB", "… memory in use"
                tried = None if said.tried_bytes is None else -(-said.tried_bytes // MIB)
                memory.oom(alert.gpu, tried, said.in_use_bytes, said.in_use_by_pid)

    def restarted(self, job: str) -> None:
        """``job`` was restarted through gpumon (``JobWatch``): the GPU its OOM ran out on
        is no longer where its cause is."""
        memory = self.memory.get(job)
        if memory is not None:
            memory.restarted()

    def name_collective(
        self, job: str, report: FrReport, alerts: AlertEngine, now: float
    ) -> list[Alert]:
        """What ``job``'s flight-recorder dumps said (the evidence step read them): its
        ``job_stalled`` names the rank from now on (at once where it is raised), until the
        stall ends. A report that found no stuck collective changes nothing."""
        if report.stuck is None:
            return []
        self.collectives[job] = report
        stalled = next(
            (a for a in alerts.active() if a.kind == "job_stalled" and a.job == job), None
        )
        if stalled is None:
            return []
        gpu = next((r.gpu for r in report.rows if r.rank in report.blamed), stalled.gpu)
        return alerts.on_job_condition(
            "job_stalled",
            job,
            Health.CRITICAL,
            report.words(job),
            now,
            gpu=gpu,
            # above its peak: the history shows the peak's words, and these say more
            score=stalled.peak_score + 1e-3,
            facts=AlertFacts(collective=report),
        )

    def judge_stalls(
        self,
        alerts: AlertEngine,
        sample: HostSample | None,
        now: float,
        *,
        processes_known: bool = True,
    ) -> None:
        """``job_stalled`` and ``job_slow`` for each job (``stall.py``, ``slow.py``):
        raised, updated or ended at wall time ``now``, judged on ``now()``; ``sample``:
        the newest GPU sample, whose processes say whether the job's GPUs are held
        (None: not known yet, nothing is judged). A job whose log
        ended in a failure when gpumon came is down while no process holds its GPUs
        (``AlertEngine.judge_job_down``), judged once the process list is known
        (``processes_known``: an empty list before it came says nothing)."""
        if sample is None or not self.jobs:
            return
        # imported here: a host without jobs never needs them (TYPE_CHECKING)
        from gpumon.backends.workloads.slow import CLOCKS_ADVICE, SlowWatch, clocks_held, judge_slow
        from gpumon.backends.workloads.stall import stall_verdict

        judged = self._judged(now)
        by_index = {g.index: g for g in sample.gpus}
        ended = set(alerts.jobs_ended_in_failure()) if processes_known else set()
        others = set(foreign(sample.processes, self.host.container))
        for job in self.jobs.values():
            held = any(sample.processes_for(by_index[i]) for i in job.gpus if i in by_index)
            # another container's process on its GPUs is not the job's
            own = {
                i: [p for p in sample.processes_for(by_index[i]) if p not in others]
                for i in job.gpus
                if i in by_index
            }
            memory = self.memory.get(job.name)
            if memory is not None and processes_known:  # what it needs, for its restart
                for i, procs in own.items():
                    memory.observe(i, procs)
            if job.name in ended:
                alerts.judge_job_down(job.name, not any(own.values()), now)
            if not held:
                self.held_since.pop(job.name, None)
            else:
                self.held_since.setdefault(job.name, judged)
            config = self.host.job(job.name)
            if config is not None and config.server is not None:
                continue  # a server: its own verdicts judge it (sglang_hung, vllm_wedged)
            configured = config.stall_after_s if config is not None else None
            followed = config is not None and config.log is not None
            held_since = self.held_since.get(job.name) if followed else None
            spin = _nccl_spin(sample, job.gpus) if held else None
            stall = stall_verdict(job, judged, held_since, configured, spin)
            text = None if stall is None else stall.message
            gpu = None if stall is None else stall.gpu
            score = 0.0 if stall is None else stall.silent_s
            level = Health.CRITICAL if stall is None else stall.severity
            named = self.collectives.get(job.name) if stall is not None else None
            if stall is None:
                self.collectives.pop(job.name, None)
            elif named is not None and named.stuck is not None:
                text, level = named.words(job.name), Health.CRITICAL
                gpu = next((r.gpu for r in named.rows if r.rank in named.blamed), gpu)
            stalled = NO_FACTS if named is None else AlertFacts(collective=named)
            alerts.on_job_condition(
                "job_stalled", job.name, level, text, now, gpu=gpu, score=score, facts=stalled
            )
            if config is not None:
                gpus = [by_index[i] for i in job.gpus if i in by_index]
                slow = judge_slow(
                    job,
                    self.slow.setdefault(job.name, SlowWatch()),
                    judged,
                    wall=now,
                    expect=config.expect_tokens_per_s,
                    below=config.slow_below,
                    for_s=config.slow_for_s,
                    gpu_util=_mean([g.utilization_pct for g in gpus]),
                    gpu_power=_mean([g.power_w for g in gpus]),
                    baselines=self.baselines,
                    changes=partial(self.torch_seen.since, self.host.name, now=now),
                    swaps=partial(self.swaps.latest, self.host.name),
                    clocks=clocks_held(gpus),
                )
                text = None if slow is None else slow.message
                facts = NO_FACTS
                if slow is not None:
                    facts = AlertFacts(
                        rate=slow.rate,
                        baseline=slow.baseline,
                        unit=slow.unit,
                        torch_swap=slow.swap,
                        advice=CLOCKS_ADVICE if slow.clocks else None,
                    )
                alerts.on_job_condition(
                    "job_slow", job.name, Health.WARNING, text, now, facts=facts
                )
        if ended:
            self.apply_alerts(alerts, now, sample.gpu_refs)  # down since its log's failure

    def server_gpus(self, sample: HostSample | None) -> Mapping[int, tuple[int, ...]]:
        """Port -> the GPUs its ranks run on, where that can be told: one server owns
        every GPU that runs an ``sglang`` process; several map onto those GPUs in order
        when there are as many, else onto all GPUs when there are as many as servers
        (one server per GPU). Otherwise nothing: a guess would mislead the evidence."""
        return self._engine_gpus_once(SGLANG, sample, _sglang_gpus)

    def _engine_gpus_once(
        self,
        engine: ServingEngine,
        sample: HostSample | None,
        how: Callable[[Mapping[int, SglangTracker], HostSample], dict[int, tuple[int, ...]]],
    ) -> Mapping[int, tuple[int, ...]]:
        """``how``'s port -> GPUs of ``engine``'s servers on ``sample``, worked out again
        only for a new sample or when the servers (their ports, their GPU device files)
        changed: the monitor's judges, the pane's owner column and the fixes ask for it
        several times a sample."""
        servers = self.servers[engine.name]
        if sample is None or not servers:
            return {}
        key = tuple((port, s.minors) for port, s in servers.items())
        known = self._gpus.get(engine.name)
        if known is not None and known[0] is sample and known[1] == key:
            return known[2]
        gpus = how(servers, sample)
        self._gpus[engine.name] = (sample, key, gpus)
        return gpus

    def serving_gpus(self, sample: HostSample | None) -> dict[int, int]:
        """GPU -> the port of the SGLang server that holds it and is up and answering
        (its last ``/metrics`` fetch answered, fresh), where the servers' GPUs can be told
        (``server_gpus``): a GPU of such a server at 0 % is a server without traffic, not
        a GPU held and idle. A server that does not answer gives nothing: its GPUs held
        and idle are what ``gpu_idle_held`` is for."""
        out: dict[int, int] = {}
        for port, gpus in self.server_gpus(sample).items():
            tracker = self.sglang.get(port)
            if tracker is not None and tracker.up and not tracker.stale:
                out.update(dict.fromkeys(gpus, port))
        return out

    def vllm_gpus(self, sample: HostSample | None) -> Mapping[int, tuple[int, ...]]:
        """Port -> the GPUs of each vLLM server, where they can be told (``_engine_gpus``)."""
        return self._engine_gpus_once(VLLM, sample, lambda s, at: _engine_gpus(s, "vllm", at))

    def log_gpus(self, path: str, sample: HostSample | None) -> tuple[int, ...] | None:
        """The GPUs of the server whose log ``path`` is, where they can be told
        (``server_gpus``): its failures are then on its GPU, beside its other alerts."""
        server = self._server_for(path)
        if server is None:
            return None
        return self.server_gpus(sample).get(server.port) or None

    def judge_hung(
        self, alerts: AlertEngine, t: float, sample: HostSample | None = None
    ) -> list[tuple[str, str]]:
        """Raise or end ``sglang_hung`` for every server (``SglangTracker.hung``) at wall
        time ``t`` (judged on ``now()``): a warning from its log's failed health check
        on, critical at ``hung_after_s``; returns the ``/health_generate`` probes to ask
        now, as (URL, tag): only of hung servers, at most once per ``hung_after_s`` each
        (SGLang holds the probe 20 s, and each one is a generation request)."""
        if not self.sglang:
            return []
        from gpumon.backends.workloads.sglang import HUNG_AFTER_S  # see TYPE_CHECKING

        after = self.host.sglang.hung_after_s if self.host.sglang is not None else HUNG_AFTER_S
        probes = []
        gpus = self.server_gpus(sample)
        judged = self._judged(t)
        for port, tracker in self.sglang.items():
            verdict = tracker.hung(judged, after, early=True)
            tracker.hung_s = None if verdict is None else verdict.silent_s
            if verdict is None:
                if not tracker.hung_holds(judged, after):  # no page is no token
                    alerts.on_server_condition("sglang_hung", Health.CRITICAL, port, None, t)
                continue
            if not verdict.early and tracker.wants_health_probe(judged, after):
                probes.append(SGLANG.probe(port))
            text = self._hung_text(verdict, alerts, judged, after)
            spin, named = _gpu_evidence(sample, gpus.get(port, ()))
            text += f"; {spin}" if spin else ""
            first = gpus.get(port, (None,))[0]
            job = next((j.name for j in self.host.jobs if j.server == port), None)
            alerts.on_server_condition(
                "sglang_hung",
                Health.WARNING if verdict.early else Health.CRITICAL,
                port,
                text,
                t,
                score=verdict.silent_s,
                gpu=first,
                names_gpu=named is not None and named == first,
                schedulers=scheduler_pids(sample, gpus.get(port, ())),
                job=job,
                command=self.server_commands.get(port),
            )
        return probes

    def judge_vllm(
        self, alerts: AlertEngine, t: float, sample: HostSample | None = None
    ) -> list[tuple[str, str]]:
        """``vllm_wedged``, ``vllm_engine_dead``, ``vllm_kv_pressure`` and an unreadable
        page for every vLLM server; returns the ``/health`` probes to ask now (a wedged
        server's, at most once per ``hung_after_s``: its answer is evidence only)."""
        if not self.vllm:
            return []
        from gpumon.backends.workloads.sglang import HEALTH_PROBE_TIMEOUT_S  # see TYPE_CHECKING
        from gpumon.backends.workloads.vllm import KV_PRESSURE_MIN

        cfg = self.host.vllm
        after = self.vllm_hung_after_s
        minimum = cfg.kv_pressure_min if cfg is not None else KV_PRESSURE_MIN
        gpus = self.vllm_gpus(sample)
        probes = []
        judged = self._judged(t)
        for port, server in self.vllm.items():
            first = gpus.get(port, (None,))[0]
            job = next((j.name for j in self.host.jobs if j.server == port), None)
            engine = vllm_engine_pids(sample, gpus.get(port, ()))
            verdict = server.hung(judged, after)
            if verdict is None:
                if not server.hung_holds(judged, after):  # no page is no token
                    alerts.on_server_condition("vllm_wedged", Health.CRITICAL, port, None, t)
            else:
                if server.wants_health_probe(judged, after):
                    probes.append(VLLM.probe(port))
                parts = [verdict.headline()]
                silent = verdict.silent_s
                health = server.health_text(judged, after + HEALTH_PROBE_TIMEOUT_S, silent)
                if health is not None:
                    parts.append(health)
                if verdict.last_decode is not None:
                    line, age = verdict.last_decode
                    parts.append(f"last stats line {age:.0f} s ago: {_stats_quote(line)}")
                spin, named = _gpu_evidence(sample, gpus.get(port, ()))
                if spin:
                    parts.append(spin)
                alerts.on_server_condition(
                    "vllm_wedged", Health.CRITICAL, port, "; ".join(parts), t,
                    score=verdict.silent_s, gpu=first,
                    names_gpu=named is not None and named == first,
                    engine_pids=engine, server_pid=server.pid, job=job,
                    command=self.server_commands.get(port),
                )  # fmt: skip
            alerts.on_server_condition(
                "vllm_engine_dead", Health.CRITICAL, port, server.dead_text(), t,
                gpu=first, server_pid=server.pid, job=job,
                command=self.server_commands.get(port),
            )  # fmt: skip
            alerts.on_server_condition(
                "vllm_kv_pressure", Health.WARNING, port, server.kv_pressure(minimum), t, gpu=first
            )
            alerts.on_server_condition(
                "vllm_error", Health.WARNING, port, server.page_error(), t, gpu=first
            )
        return probes

    def judge_pages(self, alerts: AlertEngine, t: float, sample: HostSample | None = None) -> None:
        """``sglang_error`` (key ``sglang_page:PORT``) for every server whose ``/metrics``
        page came but cannot be read (``SglangTracker.page_error``); ended when it reads
        again or no page comes at all (a stopped server is not a fault)."""
        gpus = self.server_gpus(sample)
        for port, tracker in self.sglang.items():
            text = tracker.page_error()
            alerts.on_sglang_page(port, text, t, gpu=gpus.get(port, (None,))[0])

    def judge_spec(self, alerts: AlertEngine, t: float) -> None:
        """``spec_accept_low`` for every server of both engines whose drafter's accept
        length stayed below its engine's ``spec_accept_min`` for ``SPEC_LOW_FOR_S`` while
        it decodes (SGLang's accept length; vLLM's mean acceptance length, the same
        tokens per verify step)."""
        if not self.sglang and not self.vllm:
            return
        from gpumon.backends.workloads.sglang import (  # see TYPE_CHECKING
            SPEC_ACCEPT_MIN,
            SPEC_LOW_FOR_S,
        )

        cfg, vcfg = self.host.sglang, self.host.vllm
        servers = [
            (tracker, cfg.spec_accept_min if cfg else SPEC_ACCEPT_MIN, "accept length")
            for tracker in self.sglang.values()
        ] + [
            (server, vcfg.spec_accept_min if vcfg else SPEC_ACCEPT_MIN, "mean acceptance length")
            for server in self.vllm.values()
        ]
        judged = self._judged(t)
        for tracker, minimum, length_is in servers:
            port = tracker.port
            low = tracker.spec_low(judged, minimum)
            if low is None or low < SPEC_LOW_FOR_S:
                alerts.on_spec_accept_low(port, None, t)
                continue
            rate = tracker.spec_accept_rate
            of = f" (accept rate {rate:.0%})" if rate is not None else ""
            text = (
                f"{tracker.engine} :{port} drafter tokens rejected: {length_is} "
                f"{tracker.spec_accept_length:.2f}{of} for {low:.0f} s, below {minimum:g}: "
                "speculative decoding costs more than it saves"
            )
            alerts.on_spec_accept_low(port, text, t)

    def _hung_text(self, verdict: Hung, alerts: AlertEngine, t: float, after: float) -> str:
        """The headline, then the evidence: what ``/health_generate`` answered, what the
        server's log said of it lately (a watchdog dump, a failed health check, a crashed
        scheduler) and its last decode line; ``t`` on the trackers' clock."""
        from gpumon.backends.parsers.sglang import parse_sglang_log_line  # see TYPE_CHECKING
        from gpumon.backends.workloads.sglang import HEALTH_PROBE_TIMEOUT_S

        parts = [verdict.headline()]
        tracker = self.sglang[verdict.port]
        health = tracker.health_text(t, after + HEALTH_PROBE_TIMEOUT_S, verdict.silent_s)
        if health is not None:
            parts.append(health)
        said = [
            a
            for a in alerts.active()
            if a.kind in _SGLANG_KINDS
            and a.key.startswith("log:")  # its log's lines: sglang_error, kv_cache_full
            and not a.facts.health_check  # health_text says it
            and self._server_for(a.key.removeprefix("log:").rpartition(":")[0]) is tracker
        ]
        if said:
            newest = max(said, key=lambda a: a.last_seen).message
            parts.append(f"its log: {newest[:120]}")
        if verdict.last_decode is not None:
            line, age = verdict.last_decode
            stamp = parse_sglang_log_line(line)
            when = f" at {stamp.time[-8:]}" if stamp is not None and stamp.time else ""
            parts.append(f"last decode line{when} ({age:.0f} s ago)")
        return "; ".join(parts)

    # --- views -------------------------------------------------------------------------
    def rates_pending(self) -> bool:
        """True while a server is not yet known up or down, or one that is up (or a
        running job) still lacks its first rate."""
        servers = any(
            s.up is None or (s.up and s.gen_tokens_per_s is None)
            for s in [*self.sglang.values(), *self.vllm.values()]
        )
        jobs = any(
            j.running
            and j.last_update is not None
            and (j.tokens_per_s is None or (j.eta_s is None and j.total_steps is not None))
            for j in self.jobs.values()
        )
        return servers or jobs

    def waiting_for(self) -> list[tuple[str, str]]:
        """What a one-shot answer still waits for, as (source, what did not come): the
        first poll of the followed logs, discovery's first round, each server's first
        answer and, for a server that is up, its second observation (a rate needs two;
        a server without ``/metrics`` has none to give)."""
        out = []
        if self.log_specs() and "logs" not in self.first_rounds:
            out.append(("followed logs", "no answer"))
        # the agent's one scan finds both engines and says vLLM's round first; with
        # SGLang's off, vLLM's is waited for where a [hosts.NAME.vllm] table asks for it
        if self.discover() and "discover" not in self.first_rounds:
            out.append(("SGLang discovery", "no answer"))
        elif (
            self.host.vllm is not None
            and self.host.vllm.discover
            and "discover-vllm" not in self.first_rounds
        ):
            out.append(("vLLM discovery", "no answer"))
        for port in sorted(self.vllm):
            v = self.vllm[port]
            if v.up is None:
                out.append((f"vLLM :{port}", "no answer"))
            elif v.up and v.metrics_enabled and v.gen_tokens_per_s is None:
                out.append((f"vLLM :{port}", "no second observation"))
        for port in sorted(self.sglang):
            s = self.sglang[port]
            if s.up is None:
                out.append((f"SGLang :{port}", "no answer"))
            elif (s.up and s.metrics_enabled is not False and s.gen_tokens_per_s is None) or (
                s.unreadable is not None and s.page_error() is None  # is it, or a blip?
            ):
                out.append((f"SGLang :{port}", "no second observation"))
        return out

    def sglang_json(self) -> list[dict[str, Any]]:
        return [self.sglang[p].snapshot_json() for p in sorted(self.sglang)]

    def vllm_json(self) -> list[dict[str, Any]]:
        return [self.vllm[p].snapshot_json() for p in sorted(self.vllm)]

    def jobs_json(self) -> list[dict[str, Any]]:
        return [j.snapshot_json(self.wall_of) for j in self.jobs.values()]


# SGLang's own test for its schedulers (cudacore_pyspy_dump_utils.py,
# _is_sglang_scheduler_process): the setproctitle title they run under.
SCHEDULER_TITLE = "sglang::scheduler"


def scheduler_pids(sample: HostSample | None, gpus: Sequence[int]) -> tuple[int, ...]:
    """The PIDs of the SGLang schedulers on ``gpus`` (``sglang::scheduler_TP0`` ...), as
    the watched machine numbers them (else the host's), in GPU order: what py-spy dumps
    and ``K`` stops. Empty where no sample lists them."""
    return _titled_pids(sample, gpus, SCHEDULER_TITLE)


def _titled_pids(sample: HostSample | None, gpus: Sequence[int], title: str) -> tuple[int, ...]:
    if sample is None:
        return ()
    out: list[int] = []
    for gpu in sample.gpus:
        if gpu.index not in gpus:
            continue
        for p in sample.processes_for(gpu):
            pid = p.shown_pid
            if (p.name or "").startswith(title) and pid is not None and pid not in out:
                out.append(pid)
    return tuple(out)


# vLLM's processes as set_process_title names them (vllm/utils/system_utils.py 0.34.0:
# VLLM_PROCESS_NAME_PREFIX "VLLM", then "::EngineCore", "::Worker_TP0" and the like)
VLLM_TITLE = "VLLM::"


def vllm_engine_pids(sample: HostSample | None, gpus: Sequence[int]) -> tuple[int, ...]:
    """The PIDs of a vLLM server's engine core and workers on ``gpus`` (their
    ``VLLM::`` titles), as the watched machine numbers them (else the host's), in GPU
    order: what py-spy dumps on a wedged engine. Empty where no sample lists them."""
    return _titled_pids(sample, gpus, VLLM_TITLE)


def _server_for(servers: Mapping[int, SglangTracker], path: str) -> SglangTracker | None:
    """The server a log file belongs to: a known port in its name, or the only one."""
    name = path.rsplit("/", 1)[-1]
    for m in _PORT_IN_PATH.finditer(name):
        if int(m[1]) in servers:
            return servers[int(m[1])]
    return next(iter(servers.values())) if len(servers) == 1 else None


def _sglang_gpus(
    servers: Mapping[int, SglangTracker], sample: HostSample
) -> dict[int, tuple[int, ...]]:
    """``Workloads.server_gpus``' rule on ``sample``."""
    ports = sorted(servers)
    hosting = [
        g.index
        for g in sample.gpus
        if any("sglang" in (p.name or "") for p in sample.processes_for(g))
    ]
    if len(ports) == 1:
        return {ports[0]: tuple(hosting)} if hosting else {}
    if len(hosting) != len(ports):
        hosting = [g.index for g in sample.gpus] if len(sample.gpus) == len(ports) else []
    return {port: (index,) for port, index in zip(ports, hosting, strict=False)}


def _engine_gpus(
    servers: Mapping[int, SglangTracker], process: str, sample: HostSample | None
) -> dict[int, tuple[int, ...]]:
    """Port -> the GPUs its processes run on where that can be told: the GPUs whose
    device files its process tree holds (``VllmTracker.minors``, from the agent), else
    ``server_gpus``' rule (one server owns every GPU running a ``process`` process;
    several map onto those in order when there are as many)."""
    if sample is None or not servers:
        return {}
    refs = sample.gpu_refs
    held = {
        port: tuple(sorted({r.index for r in refs.holders(s.minors) if r.index is not None}))
        for port, s in servers.items()
        if s.minors
    }
    if held:
        return {port: gpus for port, gpus in held.items() if gpus}
    ports = sorted(servers)
    hosting = [
        g.index
        for g in sample.gpus
        if any(process in (p.name or "").lower() for p in sample.processes_for(g))
    ]
    if len(ports) == 1:
        return {ports[0]: tuple(hosting)} if hosting else {}
    if len(hosting) != len(ports):
        return {}
    return {port: (index,) for port, index in zip(ports, hosting, strict=True)}


def _stats_quote(line: str, limit: int = 120) -> str:
    """vLLM's stats line from its generation throughput on (the field that says whether
    it made tokens), whole fields up to ``limit`` characters: its stamp and prefix are in
    the age already, and a cut in the middle of a word reads as garbage."""
    start = line.find("Avg generation throughput")
    text = line[start:] if start >= 0 else line
    if len(text) > limit:
        text = text[:limit].rsplit(", ", 1)[0]
    return text


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _gpu_evidence(
    sample: HostSample | None, gpus: tuple[int, ...]
) -> tuple[str | None, int | None]:
    """What a hung server's GPUs do: every rank busy at low power is the NCCL-spin
    signature (a kernel spins waiting for a peer that never comes: "utilisation" counts a
    resident kernel, the power says nothing is computed); idle GPUs point at the CPU
    side (a stuck scheduler or tokenizer). With the one GPU it names by itself ("GPU 3
    idle"; None: it names several, or none)."""
    if sample is None or not gpus:
        return None, None
    by_index = {g.index: g for g in sample.gpus}
    shown = [by_index[i] for i in gpus if i in by_index]
    utils = [g.utilization_pct for g in shown]
    if not shown or any(u is None for u in utils):
        return None, None
    one = shown[0].index if len(shown) == 1 else None
    spin = _spin_words(shown)
    if spin is not None:
        return spin, one
    if all(u is not None and u <= 5 for u in utils):
        return f"{_which(shown)} idle ({max(u or 0 for u in utils):.0f} %): stuck off the GPU", one
    return None, None


def _which(shown: Sequence[GpuSample]) -> str:
    if len(shown) == 1:
        return f"GPU {shown[0].index}"
    return f"GPUs {','.join(str(g.index) for g in shown)}"


def _spin_words(shown: Sequence[GpuSample]) -> str | None:
    """The NCCL-spin signature of ``shown`` in words, or None: every one busy at low power."""
    utils = [g.utilization_pct for g in shown]
    powers = [(g.power_w, g.power_limit_w or g.enforced_power_limit_w) for g in shown]
    if not shown or not all(u is not None and u >= NCCL_SPIN_UTIL_PCT for u in utils):
        return None
    if not all(w is not None and cap and w < NCCL_SPIN_POWER_SHARE * cap for w, cap in powers):
        return None
    watts = "/".join(f"{w:.0f}" for w, _ in powers if w is not None)
    cap = powers[0][1] or 0.0
    # One GPU has no peer on this machine to wait for: a single-GPU server (the demo's
    # wedged vLLM) spinning is a kernel busy without work, a collective only when its
    # peers are on other machines.
    why = (
        "a kernel spins without work (or waits in a collective for a peer on another machine)"
        if len(shown) == 1
        else "an NCCL spin (a rank waits in a collective for a peer)"
    )
    return f"{_which(shown)} at 100 % utilisation on {watts} W of {cap:.0f} W: {why}"


def _nccl_spin(sample: HostSample, gpus: Sequence[int]) -> str | None:
    """The NCCL-spin signature on a job's ``gpus`` now, in words (``_spin_words``)."""
    by_index = {g.index: g for g in sample.gpus}
    return _spin_words([by_index[i] for i in gpus if i in by_index])
