"""Incidents: the alerts of one failure, grouped, with the cause first.

When a job dies of CUDA OOM the engine raises several alerts about the same thing: the
memory-critical condition while it filled, the CUDA OOM line of its log, the memory drop
of its GPUs, maybe a crash. A tired person needs one line that says what happened in the
physical GPU's terms and what fixes it; the rest is evidence. ``incidents(alerts)`` groups
alerts into ``Incident`` views (nothing is stored: the alerts stay the record):

- the subject: alerts of the same host and job are one incident; without a job, those of
  the same GPU; anything else (a container OOM kill, a stale stream) stands alone;
- time: an alert joins its subject's incident while that incident is active or ended at
  most ``INCIDENT_GAP_S`` before it was raised, so yesterday's OOM is its own incident;
- the cause: the alert whose kind explains the others best (its ``cause_rank``: the CUDA OOM
  line before the crash, before the memory drop, before the memory condition), ties by
  severity then the earliest;
- ``headline``: one line in the physical GPU's terms, e.g. "drafter: CUDA OOM on GPU 6
  (tried 2.00 GiB, 90 MiB free)" (PyTorch's own device number, which CUDA_VISIBLE_DEVICES
  renumbers, is left to the evidence). When another container or the host held memory
  on the GPU that ran out (a ``foreign_process`` alert of the incident, seen while it ran
  out) that is the cause and the headline says it: "(tried 2.00 GiB, 90 MiB free; 6.0
  GiB held by CT 201 jupyter-lab)". An Xid says what it is ("Xid 79 on GPU 6: fallen off
  the bus"); what to do about it is its fixes. It is rendered from the alerts' typed
  facts (``facts.py``: the bytes tried and free, the holder, the Xid), never parsed out
  of a message; ``said`` is the same line in parts (``Headline``: the job it leads with,
  the line without the holder's clause) for a screen that shortens it;
- ``fix``: the job to restart, when the incident has one;
- ``fixes``: what fixes it, the first the best, each as ``Fix``: the dashboard key and its
  words ("r", "restart drafter"), and the command a headless user runs ("gpumon restart
  demo drafter"), or advice only ("reboot the node"). A holder comes first ("K", "stop
  it"): restarting alone would run out again. An Xid's are NVIDIA's action for its code
  (``parsers.xid``, the one table): an application error is the job's restart; a
  hardware one is the GPU's reset or the node's reboot, draining the node and the
  hand-over bundle. A job slow or idle after a torch swap (its ``torch_swap`` fact) has
  ``d`` to check the torch and ``w`` to swap back; without one, a slow job has ``d`` (the
  doctor: torch against the driver, the GPUs' clocks and health) and GPUs held idle ``s``
  to stop the job that holds them, else ``K`` on the process that does.

``line(incident, fix_hint)`` adds the fix in the caller's words ("r restart" on the
screen, "gpumon restart demo drafter" in ``check``); ``screen_fixes`` and
``command_fix`` say the fixes as the dashboard and the headless commands do.
``IncidentBell`` says when a new critical alert starts an incident worth a bell (once per
incident, not per alert).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from gpumon.backends.alerts.facts import Held, TorchSwap, size_words
from gpumon.backends.alerts.kinds import Tag, cause_rank, tagged
from gpumon.backends.alerts.store import JOB_DOWN_KEY, Alert
from gpumon.backends.model import Health
from gpumon.backends.parsers.processes import holder_words, index_ranges
from gpumon.backends.parsers.xid import REBOOT_NODE, RESET_GPU, RESTART_APP, xid_info

__all__ = [
    "INCIDENT_GAP_S",
    "RESTART_FIXES",
    "Fix",
    "Headline",
    "Incident",
    "IncidentBell",
    "alert_headline",
    "by_urgency",
    "command_fix",
    "failure_kind",
    "holder",
    "holder_fix",
    "hung_server_fixes",
    "idle_fixes",
    "incidents",
    "line",
    "screen_fix",
    "screen_fixes",
    "torch_swap_fixes",
    "wedged_vllm_fixes",
]

INCIDENT_GAP_S = 120.0
BELL_SUBJECTS_KEPT = 1024  # subjects the bell remembers (the oldest-rung go first)
_JOB_LED_KINDS = tagged(Tag.JOB_PROGRESS)
# A holder seen this long before the cause was raised still explains it (the engine's
# crash verdict uses the same window: ``AlertEngine.foreign_holder``).
HOLDER_WITHIN_S = 60.0
# Causes that say a GPU ran out of memory: another container's memory there explains them.
_RAN_OUT_KINDS = tagged(Tag.RAN_OUT)
# Xids of the application (NVIDIA's RESTART_APP on a channel of one process): restarting
# the job is the fix. The rest are the GPU's or the node's: drain it, hand the evidence over.
APPLICATION_XIDS = frozenset({8, 13, 31, 43, 45})

Subject = tuple[str, str, object]  # (host, "job" | "gpu" | "key", value)


@dataclass(frozen=True, slots=True)
class Fix:
    """One thing that fixes an incident. ``key``: the dashboard key that does it ("r",
    "K"; None: no key does it); ``words``: what it does ("restart drafter", "stop CT 201
    jupyter-lab", "reboot the node"); ``command``: the command a headless user runs
    ("gpumon restart demo drafter"; None: advice only, nothing gpumon runs)."""

    key: str | None
    words: str
    command: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"key": self.key, "words": self.words, "command": self.command}


@dataclass(frozen=True, slots=True)
class Headline:
    """An incident's line in parts: ``what`` happened ("CUDA OOM on GPU 6 (tried 2.00 GiB,
    90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"), the ``job`` it leads with
    ("drafter"; None: it has none, or ``what`` says it itself) and ``bare``: ``what``
    without the holder's clause, where a screen may leave it out (the fix "K stop jupyter-lab"
    and the GPU row still say it; None: no such clause). ``verbatim``: ``what`` says the
    alert's message whole (what ``check`` need not print again below it)."""

    what: str
    job: str | None = None
    bare: str | None = None
    verbatim: bool = False

    def __str__(self) -> str:
        """``drafter: CUDA OOM on GPU 6 (...)``."""
        return self.lead(self.what)

    @property
    def core(self) -> str:
        """The line without the holder's clause (the whole line where it has none)."""
        return self.lead(self.bare or self.what)

    def lead(self, what: str) -> str:
        """``what`` after the job it leads with."""
        return f"{self.job}: {what}" if self.job else what


@dataclass(frozen=True, slots=True)
class Incident:
    """One failure as the user sees it: ``cause`` leads, ``evidence`` is the rest (newest
    first). ``severity``: the worst of its active alerts, or of all once it ended.
    ``said``: its headline in parts (``Headline``), ``headline`` the same as one line."""

    cause: Alert
    evidence: tuple[Alert, ...]
    said: Headline
    fix: str | None  # the job whose restart fixes it
    fixes: tuple[Fix, ...] = ()  # what fixes it, the best first (``Fix``)

    @property
    def headline(self) -> str:
        return str(self.said)

    @property
    def alerts(self) -> tuple[Alert, ...]:
        return (self.cause, *self.evidence)

    @property
    def host(self) -> str:
        return self.cause.host

    @property
    def job(self) -> str | None:
        return next((a.job for a in self.alerts if a.job), None)

    @property
    def gpu(self) -> int | None:
        """The physical GPU of the cause (else of the first alert that names one)."""
        if self.cause.gpu is not None:
            return self.cause.gpu
        return next((a.gpu for a in self.alerts if a.gpu is not None), None)

    @property
    def active(self) -> bool:
        return any(a.active for a in self.alerts)

    @property
    def acknowledged(self) -> bool:
        """Every active alert of it is acknowledged (nothing new to look at)."""
        live = [a for a in self.alerts if a.active]
        return bool(live) and all(a.acknowledged for a in live)

    @property
    def severity(self) -> Health:
        live = [a for a in self.alerts if a.active] or list(self.alerts)
        return Health.worst(*(a.severity for a in live))

    @property
    def time(self) -> float:
        """When its first alert was raised."""
        return min(a.time for a in self.alerts)

    @property
    def last_seen(self) -> float:
        return max(a.last_seen for a in self.alerts)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(a.key for a in self.alerts)

    @property
    def restarts(self) -> tuple[Alert, ...]:
        """The job's restarts (and starts) through gpumon in this incident, oldest first:
        "restarted by root at 05:40:13 (new PID 2433201)", the record of what was done."""
        return tuple(sorted((a for a in self.alerts if a.kind == RESTARTED), key=lambda a: a.time))


def subject(alert: Alert) -> Subject:
    """What an alert is about: its job, else its GPU, else only itself."""
    if alert.job:
        return (alert.host, "job", alert.job)
    if alert.gpu is not None:
        return (alert.host, "gpu", alert.gpu)
    return (alert.host, "key", alert.key)


def incidents(
    alerts: Iterable[Alert], *, restartable: Collection[str] | Callable[[str], bool] | None = None
) -> list[Incident]:
    """Group ``alerts`` (any mix of hosts, active or not) into incidents, the most urgent
    first (``by_urgency``). ``restartable``: the jobs a restart can fix (names, or a
    predicate); None means any job."""
    groups: list[tuple[Subject, list[Alert]]] = []
    open_by_subject: dict[Subject, int] = {}
    for alert in sorted(alerts, key=lambda a: a.time):
        key = subject(alert)
        at = open_by_subject.get(key)
        if at is not None:
            members = groups[at][1]
            live = any(a.active for a in members)
            if live or alert.time - max(a.last_seen for a in members) <= INCIDENT_GAP_S:
                members.append(alert)
                if alert.kind == RESTARTED:  # the chapter ends: what comes next is new
                    del open_by_subject[key]
                continue
        if alert.kind != RESTARTED:  # a restart with nothing before it opens no story
            open_by_subject[key] = len(groups)
        groups.append((key, [alert]))
    return by_urgency(_incident(members, restartable) for _, members in groups)


def by_urgency(found: Iterable[Incident]) -> list[Incident]:
    """``found`` the most urgent first: active before ended, unacknowledged before
    acknowledged, then by severity, then the newest (also for incidents of several hosts)."""
    return sorted(
        found,
        key=lambda i: (not i.active, i.acknowledged, -i.severity.rank, -i.time, -i.last_seen),
    )


def _incident(
    members: Sequence[Alert], restartable: Collection[str] | Callable[[str], bool] | None
) -> Incident:
    # The cause is the alert that explains the others best, ended or not: a restart or an
    # acknowledgement ends the CUDA OOM's alert, not the story (CT 201's jupyter, still
    # holding GPU 6 after the restart, stays its cause's evidence, not the headline).
    cause = min(members, key=lambda a: (cause_rank(a.kind), -a.severity.rank, a.time))
    evidence = tuple(
        sorted((a for a in members if a is not cause), key=lambda a: a.time, reverse=True)
    )
    job = cause.job or next((a.job for a in members if a.job), None)
    can = job if job is not None and _can_restart(job, restartable) else None
    if any(a.kind == RESTARTED and a.time >= cause.time for a in members):
        can = None  # done: its record says by whom and when
    held = holder(cause, members)
    fixes = _fixes(cause, can, held)
    fix = can if any(f.key == "r" for f in fixes) else None  # a restart that fixes it
    return Incident(cause, evidence, headline(cause, job, held=held), fix, fixes)


# The causes a restart of the job fixes: the job is dead (its OOM, its memory dropping to
# nothing, a crash, the kernel's or its cgroup's OOM killer) or hung in a collective
# (stalled: only a restart ends it). Not the others: a memory ramp or time-to-full is
# a job still running (restarting it loses its work to a warning: watch it), a slow or
# idle-holding job is not broken by itself, a GPU health problem is the GPU's (a restart
# lands on the same GPU), an Xid says by its class (``_xid_fixes``: its application
# errors), and a server or the connection is no job.
RESTART_FIXES = tagged(Tag.RESTART_FIXES)
RESTARTED = "job_restarted"  # the record of a restart: it ends its incident's chapter


def holder(cause: Alert, members: Iterable[Alert]) -> Held | None:
    """Who else held memory on the GPU that ``cause`` says ran out ("6.0 GiB held by CT
    201 jupyter-lab"): the ``foreign_process`` alert of the same GPU among ``members``,
    active (seen first after the cause too: the host's process list comes every few
    seconds), or seen at most ``HOLDER_WITHIN_S`` before ``cause`` was raised; None when
    there is none (or ``cause`` is not about memory running out, or the alert does not
    say who: one of a recording from before facts)."""
    if cause.kind not in _RAN_OUT_KINDS or cause.gpu is None:
        return None
    seen = [
        a
        for a in members
        if a.kind == "foreign_process"
        and a.gpu == cause.gpu
        and (a.active or a.last_seen >= cause.time - HOLDER_WITHIN_S)
    ]
    if not seen:
        return None
    latest = max(seen, key=lambda a: (a.active, a.last_seen))
    return latest.facts.held


def _fixes(cause: Alert, job: str | None, held: Held | None = None) -> tuple[Fix, ...]:
    """What fixes an incident led by ``cause``; ``job``: the job a restart can fix (a
    restart only for the causes it fixes, ``RESTART_FIXES``, and an Xid's application errors);
    ``held``: another container's (or the host's) memory on the GPU that ran out, which
    ``K`` stops (no headless command does: None)."""
    restart = Fix("r", f"restart {job}", f"gpumon restart {cause.host} {job}") if job else None
    out: list[Fix] = []
    if cause.kind == "foreign_process":  # the holder itself leads: no restart frees it
        return (holder_fix(cause.facts.held),)
    if held is not None:
        out.append(holder_fix(held))
    xid = cause.facts.xid if cause.kind == "xid" else None
    if cause.kind == "gpu_health":
        out += _health_fixes(cause)
    elif xid is not None:
        gpu = None if cause.gpu is None else str(cause.gpu)
        # the action the alert said (45 alone or not, 154's from its line)
        out += _xid_fixes(xid.code, cause.host, restart, gpu, xid.action)
    elif cause.kind == "sglang_hung":
        if restart is not None:  # the server is a configured job (its ``server`` key)
            out += hung_server_fixes(cause.facts.schedulers)
            out.insert(1, restart)
        else:
            out += hung_server_fixes(cause.facts.schedulers, cause.facts.command)
    elif cause.kind in ("vllm_wedged", "vllm_engine_dead"):
        out += _vllm_fixes(cause, restart)
    elif cause.facts.torch_swap is not None and cause.kind in _AFTER_SWAP_KINDS:
        out += torch_swap_fixes(cause.host, cause.facts.torch_swap)
    elif cause.kind == "gpu_idle_held":
        out += idle_fixes(cause)
    elif cause.kind == "job_slow":
        if cause.facts.advice:  # its GPUs' clocks are held down: the likelier cause
            out.append(Fix(None, cause.facts.advice))
        out.append(Fix("d", "check torch and the GPUs", f"gpumon doctor {cause.host}"))
    elif restart is not None and cause.kind in RESTART_FIXES:
        out.append(restart)
    out += [Fix(None, advice) for advice in _ENGINE_FIXES.get(cause.kind, ())]
    return tuple(out)


def holder_fix(held: Held | None) -> Fix:
    """``K`` on the holder, named so that it is never taken for ``s`` (stop the job): "stop
    jupyter-lab" (its ``Held.holder``'s program), "stop CT 201's process" where its
    program is not known, "stop the holder" where the alert does not say who (one of a
    recording from before facts)."""
    if held is None:
        return Fix("K", "stop the holder")
    who = held.holder
    if who.program:
        return Fix("K", f"stop {who.program}")
    where = holder_words(who.container, None).rpartition(" ")[0]  # "CT 201 [unknown]"
    return Fix("K", f"stop {where}'s process")


def hung_server_fixes(schedulers: Sequence[int], command: str | None = None) -> list[Fix]:
    """What can be done for a hung SGLang server with the scheduler PIDs ``schedulers``:
    first its stacks, as SGLang's own watchdog takes them (``py-spy dump --native`` of
    each scheduler: ``cudacore_pyspy_dump_utils.py``, formats.md), then ``K`` on its
    scheduler and, where known (``command``: a server that is no job), the command line
    it was started with, to start it again. Not SIGQUIT: SGLang's handler for it kills
    the process tree and dumps nothing."""
    again = [Fix(None, f"start it again: {command}")] if command else []
    if not schedulers:
        stacks = "its stacks: py-spy dump --native --pid <each sglang::scheduler PID>"
        return [Fix(None, stacks), *again]
    first = schedulers[0]
    each = f" (each scheduler: {', '.join(map(str, schedulers))})" if len(schedulers) > 1 else ""
    return [
        Fix(None, f"its stacks: py-spy dump --native --pid {first}{each}"),
        Fix("K", f"stop its scheduler (PID {first})"),
        *again,
    ]


def wedged_vllm_fixes(
    engine: Sequence[int], server: int | None, command: str | None = None
) -> list[Fix]:
    """What can be done for a wedged vLLM server: first its engine's stacks (``py-spy
    dump --native`` of its engine core and workers, ``engine``: the PIDs titled
    ``VLLM::EngineCore``, ``VLLM::Worker_TP0``; the stuck step is in one of them, not in
    the API server that still answers ``/health``), then its restart (``_restart_vllm``)."""
    if engine:
        each = f" (each engine process: {', '.join(map(str, engine))})" if len(engine) > 1 else ""
        stacks = f"its stacks: py-spy dump --native --pid {engine[0]}{each}"
    else:
        stacks = "its stacks: py-spy dump --native --pid <each VLLM::EngineCore, VLLM::Worker PID>"
    return [Fix(None, stacks), *_restart_vllm(server, command)]


def _vllm_fixes(cause: Alert, restart: Fix | None) -> list[Fix]:
    """A wedged engine's or dead engine core's fixes: where the server is a configured
    job (``restart``: its ``r``), the wedged engine's stacks then ``r``, which stops the
    job's process group (API server and engine processes together) and starts it again;
    else ``K`` on its API server and its command line."""
    facts = cause.facts
    wedged = cause.kind == "vllm_wedged"
    if restart is not None:
        return [wedged_vllm_fixes(facts.engine_pids, None)[0], restart] if wedged else [restart]
    if wedged:
        return wedged_vllm_fixes(facts.engine_pids, facts.server_pid, facts.command)
    return _restart_vllm(facts.server_pid, facts.command)


def _restart_vllm(server: int | None, command: str | None) -> list[Fix]:
    """``K`` on a vLLM server's API server (``server``, discovery's PID: its exit takes its
    engine processes with it), then its start again with ``command`` (its command line,
    masked) where known; advice only where its PID is not known."""
    again = [Fix(None, f"start it again: {command}")] if command else []
    if server is None:
        return again or [Fix(None, "restart the server (its API server and engine processes)")]
    if again:
        return [Fix("K", f"stop its API server (PID {server})"), *again]
    return [Fix("K", f"stop its API server (PID {server}), then start it again")]


# A job slow or idle after a torch swap: the swap is the likely cause (its fact, set by the
# rule that raised it), so the doctor checks the torch and a swap back undoes it.
_AFTER_SWAP_KINDS = frozenset({"job_slow", "gpu_idle_held"})


def torch_swap_fixes(host: str, swap: TorchSwap) -> list[Fix]:
    """What to do about a job slow or idle after ``swap``: ``d`` checks the torch now on
    ``host`` (``gpumon doctor``), ``w`` swaps back to the variant it had (its running
    jobs keep the torch they imported until they are restarted: the swap's plan says so)."""
    back = swap.variant
    check = Fix("d", "check torch", f"gpumon doctor {host}")
    if back is None:
        return [check, Fix("w", f"swap torch back to {swap.was}")]
    version = swap.was.partition("+")[0]
    exact = "" if version == swap.to.partition("+")[0] else f" --version {version}"
    command = f"gpumon swap-torch {host} {back}{exact}"
    return [check, Fix("w", f"swap back to {back}", command)]


def idle_fixes(cause: Alert) -> list[Fix]:
    """What frees GPUs held and idle (a ``gpu_idle_held`` with no torch swap before it):
    ``s`` stops the job that holds them ("stop drafter (frees GPUs 5-7)"; no headless
    command stops a job), else ``K`` stops the process that does (its ``held``); nothing
    where the process list named none."""
    facts = cause.facts
    if cause.job is not None:
        gpus = facts.gpus or (() if cause.gpu is None else (cause.gpu,))
        which = f" (frees GPU{'s' if len(gpus) > 1 else ''} {index_ranges(gpus)})" if gpus else ""
        return [Fix("s", f"stop {cause.job}{which}")]
    if facts.held is not None:
        return [holder_fix(facts.held)]
    return []


# The fixes vLLM prints with its memory failures (kinds.py says where), in its flags' names
_ENGINE_FIXES = {
    "vllm_kv_memory": (
        "start it with a higher --gpu-memory-utilization or a lower --max-model-len",
    ),
    "vllm_oom": ("restart it with a lower --max-num-seqs or --gpu-memory-utilization",),
    # vLLM's advice on preemption (docs/configuration/optimization.md; V0's warning in
    # vllm/core/scheduler.py: "Increase gpu_memory_utilization or tensor_parallel_size")
    "vllm_kv_pressure": (
        "restart it with a higher --gpu-memory-utilization, a lower --max-num-seqs or "
        "--max-num-batched-tokens, or a larger --tensor-parallel-size",
    ),
}


def _health_fixes(cause: Alert) -> list[Fix]:
    """What to do about a GPU health fact (``gpu_health:TOPIC:GPU``, ``alerts/health.py``):
    its advice ("drain the GPU and open a case with the vendor", "reset the GPU at the
    next chance"), said with the command that resets the GPU where it is one; a critical
    fact adds the bundle for the hand-over. The older per-GPU ``gpu_health`` (an error
    cell, a GPU gone) has none."""
    advice = cause.facts.advice
    if not advice:
        return []
    if cause.gpu is not None and advice.startswith(RESET_GPU):
        advice = _with_reset(advice, str(cause.gpu))
    out = [Fix(None, advice)]
    if cause.severity is Health.CRITICAL:
        out.append(Fix(None, f"gpumon bundle {cause.host}"))
    return out


def _xid_fixes(
    code: int, host: str, restart: Fix | None, gpu: str | None, said: str | None = None
) -> list[Fix]:
    """What to do about Xid ``code`` (NVIDIA's action from the one table, ``parsers.xid``)
    on GPU ``gpu`` of ``host`` (None: not one of the watched GPUs); ``said``: the action
    the alert names instead (Xid 154 carries the driver's recovery action)."""
    action = said or xid_info(code).action
    out: list[Fix] = []
    first, _, then = (action or "").partition("; ")
    if first == RESTART_APP and restart is not None:
        out.append(restart)  # then what the row adds (94: reset the GPU when convenient)
        if then:
            out.append(Fix(None, _with_reset(then, gpu)))
    elif code == 79:  # the GPU is gone from the bus: no reset reaches it
        out.append(Fix(None, f"{REBOOT_NODE} (the GPU cannot be reset in place)"))
    elif action is not None:
        out.append(Fix(None, _with_reset(action, gpu)))
    if code not in APPLICATION_XIDS:
        if action is None or "drain" not in action:
            out.append(Fix(None, "drain the node"))
        out.append(Fix(None, f"gpumon bundle {host}"))  # the evidence, for the hand-over
    return out


def _with_reset(advice: str, gpu: str | None) -> str:
    """``reset the GPU`` with the command that does it, when the GPU is known."""
    if gpu is None or RESET_GPU not in advice or "nvidia-smi -r" in advice:
        return advice
    return advice.replace(RESET_GPU, f"{RESET_GPU} (nvidia-smi -r -i {gpu})", 1)


def _can_restart(job: str, restartable: Collection[str] | Callable[[str], bool] | None) -> bool:
    if restartable is None:
        return True
    if callable(restartable):
        return restartable(job)
    return job in restartable


def alert_headline(alert: Alert, job: str | None = None, *, held: Held | None = None) -> str:
    """One alert as a headline: "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
    (``headline`` as one line)."""
    return str(headline(alert, job, held=held))


def headline(alert: Alert, job: str | None = None, *, held: Held | None = None) -> Headline:
    """What ``alert`` says as the headline says it, from its facts.

    The job (``job``, else the alert's) leads; the GPU is the physical index the engine
    resolved; a condition alert says its peak (what was true at its worst). ``held``:
    another container's memory on that GPU ("6.0 GiB held by CT 201 jupyter-lab", see
    ``holder``), said as the cause. An Xid says what it is, not what to do (its fixes).
    An alert of a recording from before facts says its message, but a CUDA OOM, which
    says no more than its kind and GPU."""
    job = job or alert.job
    facts = alert.facts
    message = " ".join(alert.message.split())
    held_words = None if held is None else " ".join(str(held).split())
    bare, verbatim = None, False
    if failure_kind(alert) == "cuda_oom":
        what, bare = _cuda_oom(alert, held_words)
        held_words = None
    elif alert.kind in _JOB_LED_KINDS:  # its message leads with the job: "drafter stalled: ..."
        return Headline(message, verbatim=True)
    elif alert.kind in ("memory", "time_to_full", "oom_death", "gpu_health"):
        what = " ".join(alert.peak_text.split())
        verbatim = what == message
    elif alert.kind == "xid" and facts.xid is not None and _xid_where(alert) is not None:
        xid = facts.xid
        what = f"Xid {xid.code} on {_xid_where(alert)}: {xid.meaning}"  # its action: the fixes
    else:
        what = " ".join((facts.line or alert.message).split())
        verbatim = what == message
        if alert.gpu is not None and not facts.names_gpu:
            what = f"{what} (GPU {alert.gpu})"
    if held_words is not None:
        what = f"{what} ({held_words})"
    leads = job is not None and facts.job == job  # its words lead with it: "drafter's GPUs"
    return Headline(what, job if job and not leads else None, bare, verbatim)


def _cuda_oom(alert: Alert, held: str | None) -> tuple[str, str | None]:
    """A CUDA OOM as the headline says it, and the same without ``held`` where that is a
    clause of its own: "CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT
    201 jupyter-lab)"; without PyTorch's numbers, what its line says after "out of memory"."""
    facts = alert.facts
    on_gpu = f" on GPU {alert.gpu}" if alert.gpu is not None else ""
    said = (
        "" if facts.tried_bytes is None else f"tried {size_words(facts.tried_bytes)}",
        "" if facts.free_bytes is None else f"{size_words(facts.free_bytes)} free",
    )
    numbers = ", ".join(f for f in said if f)
    detail = f"{numbers}; {held}" if numbers and held else numbers or held or ""
    what = f"CUDA OOM{on_gpu}" + (f" ({detail})" if detail else "")
    if not detail and facts.detail:  # a form without PyTorch's numbers: say what it does say
        what += f": {' '.join(facts.detail.split())}"
    bare = f"CUDA OOM{on_gpu} ({numbers})" if numbers and held else None
    return what, bare


def _xid_where(alert: Alert) -> str | None:
    """``GPU 6``, ``PCI 0000:9a:00 (not a GPU of this host: CT 201's)``: the Xid's GPU and
    what it is to the host; None when the alert says neither."""
    xid, ref = alert.facts.xid, alert.facts.gpu
    if alert.gpu is not None:
        where = f"GPU {alert.gpu}"
    elif ref is not None and ref.pci is not None:
        where = f"PCI {ref.pci}"
    else:
        return None
    return f"{where} ({xid.whose})" if xid is not None and xid.whose else where


def failure_kind(alert: Alert) -> str:
    """The kind of what ``alert`` says happened: its kind, but for a job down since the
    failure its log ended in (``JOB_DOWN_KEY``, whose words are that line's) that
    failure's (``cuda_oom``), so the headline and the job's crash reason say the OOM as
    the OOM's alert does."""
    if alert.key.startswith(JOB_DOWN_KEY) and alert.facts.failure:
        return alert.facts.failure
    return alert.kind


def line(incident: Incident, fix_hint: str | None = None) -> str:
    """The headline with the fix in the caller's words: ``fix_hint`` "K stop jupyter-lab, r
    restart drafter" (``screen_fixes``) gives "drafter: CUDA OOM on GPU 6 (...) — K stop
    jupyter-lab, r restart drafter"; no hint (or nothing fixes it): the headline."""
    if not (incident.fixes or incident.fix) or not fix_hint:
        return incident.headline
    return f"{incident.headline} — {fix_hint}"


def screen_fixes(incident: Incident) -> str | None:
    """The fixes as the dashboard offers them: "K stop jupyter-lab, r restart drafter"
    (keys first, then advice: "reboot the node"); None when nothing fixes it."""
    return ", ".join(screen_fix(f) for f in incident.fixes) or None


def screen_fix(fix: Fix) -> str:
    """One fix as the dashboard says it: "K stop jupyter-lab", or the advice "drain the
    node"."""
    return f"{fix.key} {fix.words}" if fix.key else fix.words


def command_fix(incident: Incident) -> str | None:
    """The best fix as a headless command says it: "fix: gpumon restart demo drafter", or
    the advice ("fix: reboot the node"); a fix only a dashboard key does comes with that
    key and the next fix that has a command ("fix: stop jupyter-lab (the dashboard's K),
    then gpumon restart demo drafter"). None when nothing fixes it."""
    if not incident.fixes:
        return None
    best = incident.fixes[0]
    if best.command is None and best.key is not None:
        then = next((f.command for f in incident.fixes[1:] if f.command), None)
        said = f"{best.words} (the dashboard's {best.key})"
        return f"fix: {said}, then {then}" if then else f"fix: {said}"
    return f"fix: {best.command or best.words}"


class IncidentBell:
    """Once per incident: ``rings(alert, active)`` is True for a critical ``alert`` that no
    other active critical alert of its subject (job, else GPU) already rang for.

    ``active``: the host's active alerts, ``alert`` included or not."""

    def __init__(self) -> None:
        self._rung: dict[Subject, set[str]] = {}  # subject -> keys active when it rang

    def __len__(self) -> int:
        """How many subjects it remembers (bounded by ``BELL_SUBJECTS_KEPT``)."""
        return len(self._rung)

    def rings(self, alert: Alert, active: Iterable[Alert]) -> bool:
        if alert.severity is not Health.CRITICAL:
            return False
        key = subject(alert)
        live = {a.key for a in active if a.active and subject(a) == key}
        live.discard(alert.key)
        rung = self._rung.get(key)
        if rung is not None and rung & live:
            rung.add(alert.key)
            return False
        self._rung.pop(key, None)  # re-inserted last: the dict is oldest-rung first
        self._rung[key] = live | {alert.key}
        while len(self._rung) > BELL_SUBJECTS_KEPT:  # one-off alerts are subjects too
            del self._rung[next(iter(self._rung))]
        return True
