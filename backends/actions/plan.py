"""What a restart, stop or start of a job will do: the confirmation plan, and the GPU
readings it and the run check (``GpuReadings`` from a HostMonitor, or any callable).

``make_plan`` reads the job's state on the target; ``ActionPlan.rows()`` is what the
confirmation shows (labelled rows with a level), ``ActionPlan.lines()`` the same as plain
text for the terminal; ``ActionPlan.with_params`` re-renders it after the user edits a value.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from gpumon.backends.actions.jobs import (
    SERVER_HEALTH,
    JobError,
    JobStatus,
    job_status,
    method_for,
    session_name,
)
from gpumon.backends.actions.params import ParamValue, merge_params, render_command
from gpumon.backends.actions.rows import PlanRow
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import GpuSample
from gpumon.backends.parsers.processes import foreign, holder_text, index_ranges, process_words
from gpumon.backends.transport.base import Transport

if TYPE_CHECKING:
    from gpumon.backends.monitor.state import HostMonitor
    from gpumon.backends.workloads.memory import JobMemory

Action = Literal["restart", "stop", "start"]


class Step(enum.StrEnum):
    EVIDENCE = "evidence"  # stacks and dumps kept in a bundle before the stop ends them
    STOP = "stop"
    WAIT_FREE = "wait_free"
    START = "start"
    VERIFY = "verify"
    DONE = "done"  # the last progress call: the outcome's message


STEPS: Mapping[Action, tuple[Step, ...]] = {
    "restart": (Step.EVIDENCE, Step.STOP, Step.WAIT_FREE, Step.START, Step.VERIFY),
    "stop": (Step.EVIDENCE, Step.STOP, Step.WAIT_FREE),
    "start": (Step.WAIT_FREE, Step.START, Step.VERIFY),
}

# --- GPU readings ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    """A process of another container (or of the host) holding memory on a GPU: no stop
    of the job frees it. ``words``: "CT 201 jupyter-lab"; ``name``: "jupyter-lab"."""

    words: str
    name: str
    mib: int | None
    host_pid: int | None = None


@dataclass(frozen=True, slots=True)
class GpuUse:
    used_mib: int | None  # None: not reported
    pids: tuple[int, ...] = ()  # compute processes on this GPU (host PIDs)
    holders: tuple[str, ...] = ()  # the same, in words: "1234 python3 in CT200"
    # Held by another container's (or the host's) processes: no stop of the job frees
    # it, so the wait for the job's memory to go does not count it (CT 201's jupyter on
    # GPU 6); what the job needs is counted against what it leaves (``room_verdict``).
    foreign_mib: int = 0
    foreign_pids: tuple[int, ...] = ()  # those processes: no worker of the job's launch
    capacity_mib: int | None = None  # used + free as the driver says (its total less its reserve)
    others: tuple[Holder, ...] = ()  # those processes, the biggest first

    @property
    def free_mib(self) -> int | None:
        """What is free on the GPU now; None when not known."""
        if self.capacity_mib is None or self.used_mib is None:
            return None
        return max(self.capacity_mib - self.used_mib, 0)


@dataclass(frozen=True, slots=True)
class GpuReadings:
    time: float  # epoch seconds the sample was taken (gpumon's clock)
    gpus: Mapping[int, GpuUse]


Readings = Callable[[], GpuReadings | None]


def monitor_readings(monitor: HostMonitor) -> Readings:
    """Readings from a running HostMonitor's latest sample (None before the first one, and
    while the monitor's data is stale: old numbers must not pass for free GPUs)."""

    def read() -> GpuReadings | None:
        sample = monitor.latest
        if sample is None or monitor.is_stale():
            return None
        gpus = {}
        for g in sample.gpus:
            procs = sample.processes_for(g)
            pids = tuple(n for p in procs if (n := p.pid or p.host_pid) is not None)
            holders = tuple(process_words(p) for p in procs)
            others = foreign(procs, monitor.host.container)
            held = sum(p.memory_mib or 0 for p in others)
            alien = tuple(n for p in others if (n := p.pid or p.host_pid) is not None)
            who = tuple(
                Holder(holder_text(p), p.short_name or "[unknown]", p.memory_mib, p.host_pid)
                for p in sorted(others, key=lambda p: -(p.memory_mib or 0))
            )
            gpus[g.index] = GpuUse(
                g.memory_used_mib, pids, holders, held, alien, capacity_mib(g), who
            )
        return GpuReadings(sample.time, gpus)

    return read


def capacity_mib(gpu: GpuSample) -> int | None:
    """What a GPU's memory holds in all for processes: used + free where both are
    reported (the driver keeps a reserve out of the total), else the total."""
    if gpu.memory_used_mib is not None and gpu.memory_free_mib is not None:
        return gpu.memory_used_mib + gpu.memory_free_mib
    return gpu.memory_total_mib


def job_needs(job: JobConfig, memory: JobMemory | None) -> dict[int, int]:
    """What ``job`` needs free on each of its GPUs (MiB): its ``need_mib``, else what it
    was seen to need there (``JobMemory``); a GPU without either is left out."""
    out = {}
    for index in job.gpus:
        need = job.need_mib if job.need_mib is not None else None
        if need is None and memory is not None:
            need = memory.need_mib(index)
        if need is not None:
            out[index] = need
    return out


@dataclass(frozen=True, slots=True)
class Blocker:
    """Another container's (or the host's) memory on a GPU ``job`` needs: the GPU its
    OOM ran out on (``cause``: its incident's cause still there), or one where what it
    needs does not fit beside that memory."""

    job: str
    gpu: int
    holders: tuple[Holder, ...]
    cause: bool = False
    need_mib: int | None = None
    room_mib: int | None = None  # what the GPU leaves the job beside them

    @property
    def who(self) -> str:
        """ "CT 201 jupyter-lab holds 6.0 GiB", "CT 201 jupyter-lab and 1 more hold 7.0 GiB"."""
        first = self.holders[0].words if self.holders else "another container"
        held = sum(h.mib or 0 for h in self.holders)
        if len(self.holders) > 1:
            return f"{first} and {len(self.holders) - 1} more hold {mib(held)}"
        return f"{first} holds {mib(held)}"

    @property
    def pids(self) -> str:
        """ "host PID 3187442", for a command line that stops it; "" when not known."""
        known = [str(h.host_pid) for h in self.holders if h.host_pid is not None]
        return f"host PID{'s' if len(known) > 1 else ''} {' '.join(known)}" if known else ""

    def text(self) -> str:
        """ "the cause is still on GPU 6: CT 201 jupyter-lab holds 6.0 GiB", or "GPU 7
        cannot hold drafter: it needs 90.0 GiB, 80.0 GiB left beside CT 202 python3 (16.0
        GiB)"."""
        if self.cause:
            return f"the cause is still on GPU {self.gpu}: {self.who}"
        room = f", {mib(self.room_mib)} left" if self.room_mib is not None else ""
        return (
            f"GPU {self.gpu} cannot hold {self.job}: it needs {mib(self.need_mib)}{room}; "
            f"{self.who}"
        )


def in_the_way(
    readings: GpuReadings | None,
    job: JobConfig,
    needs: Mapping[int, int],
    ran_out: int | None = None,
) -> tuple[Blocker, ...]:
    """What another container (or the host) holds on the job's GPUs that a restart would
    walk back into: its memory on ``ran_out`` (the GPU its last OOM named), or memory
    that leaves a GPU less than the job ``needs`` there where the whole GPU would hold
    it. () without readings."""
    if readings is None:
        return ()
    out = []
    for index in job.gpus:
        use = readings.gpus.get(index)
        if use is None or not use.others:
            continue
        need, capacity = needs.get(index), use.capacity_mib
        room = None if capacity is None else capacity - use.foreign_mib
        # short only because of them: a need beyond the whole GPU is not theirs to free
        short = (
            need is not None
            and capacity is not None
            and room is not None
            and room < need <= capacity
        )
        if index == ran_out or short:
            out.append(Blocker(job.name, index, use.others, index == ran_out, need, room))
    return tuple(out)


def room_verdict(
    index: int, use: GpuUse | None, need: int | None, free_mib: int, *, despite: bool = False
) -> tuple[bool, Blocker | None]:
    """Whether GPU ``index`` is ready for the job (``ready``), and the holder in the way
    when it is not ready because of one. A GPU with ``need`` free is ready whatever else
    it holds; else it waits for the job's own memory to go (less than ``free_mib`` left
    beside other containers'); once that went, memory of other containers that leaves
    less than ``need``, where the GPU without it would hold the job, is in the way (the
    wait names it and ends at its timeout), unless the user restarts ``despite`` it. The
    job's own memory gone, nothing else is waited for: no other container's memory, a
    need not known, or one that the whole GPU would not hold (its stop frees nothing
    more)."""
    if use is None or use.used_mib is None:
        return False, None
    free = use.free_mib
    if need is not None and free is not None and free >= need:
        return True, None
    if use.used_mib - use.foreign_mib >= free_mib:
        return False, None  # the job's own memory (or its container's) is still there
    if need is None or free is None or despite or not use.others:
        return True, None
    if free + use.foreign_mib < need:
        return True, None  # even without them the GPU would not hold it: not theirs
    return False, Blocker("", index, use.others, need_mib=need, room_mib=free)


def mib(value: int | None) -> str:
    """GPU memory as the screen shows it: ``84.2 GiB`` from 1 GiB up, ``12 MiB`` below
    (never ``86 214 MiB``, which reads as two numbers); ``not reported`` for None."""
    if value is None:
        return "not reported"
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value} MiB"


def gpu_summary(readings: GpuReadings | None, gpus: tuple[int, ...]) -> str:
    """``GPU 5: 12 MiB, GPU 6: 44.1 GiB (PID 123)``."""
    if readings is None:
        return "no GPU sample yet"
    parts = []
    for index in gpus:
        use = readings.gpus.get(index)
        if use is None:
            parts.append(f"GPU {index}: not reported")
            continue
        pids = f" (PID {' '.join(map(str, use.pids))})" if use.pids else ""
        if use.holders:
            pids = f" (held by {', '.join(use.holders)})"
        parts.append(f"GPU {index}: {mib(use.used_mib)}{pids}")
    return ", ".join(parts)


# --- the plan -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobTarget:
    """The host a job runs on and how to reach it; ``read_only`` is the global flag (the
    host's own ``read_only`` applies as well)."""

    host: HostConfig
    transport: Transport
    readings: Readings | None = None
    read_only: bool = False
    # Where the evidence step reads the job's incident, processes and logs (None: a
    # target without a monitor keeps no evidence)
    monitor: HostMonitor | None = None

    @classmethod
    def from_monitor(cls, monitor: HostMonitor, *, read_only: bool = False) -> JobTarget:
        """Through the monitor's own connection, with its GPU readings and what it saw of
        its jobs' memory. The host is the monitor's (for ``demo`` it carries the simulated
        ``drafter`` job)."""
        return cls(
            monitor.host, monitor.transport, monitor_readings(monitor), read_only, monitor=monitor
        )

    def server_engine(self, job: JobConfig) -> str:
        """The engine of the server ``job`` is (its ``server`` port): ``vllm`` for a port
        of the host's ``[hosts.NAME.vllm] ports`` or one the monitor found serving vLLM,
        else ``sglang``."""
        vllm = self.host.vllm.ports if self.host.vllm is not None else ()
        found = self.monitor.workloads.vllm if self.monitor is not None else {}
        return "vllm" if job.server in vllm or job.server in found else "sglang"

    def job_memory(self, job: str) -> JobMemory | None:
        """What the monitor saw ``job`` need of its GPUs (None: no monitor, or not seen)."""
        return None if self.monitor is None else self.monitor.workloads.memory.get(job)

    def needs(self, job: JobConfig) -> dict[int, int]:
        """What ``job`` needs free on each of its GPUs, where known (``job_needs``)."""
        return job_needs(job, self.job_memory(job.name))

    def in_the_way(self, job: JobConfig) -> tuple[Blocker, ...]:
        """Other containers' memory a restart of ``job`` would walk back into, now."""
        if self.readings is None or not job.gpus:
            return ()
        memory = self.job_memory(job.name)
        ran_out = memory.ran_out if memory is not None else None
        return in_the_way(self.readings(), job, self.needs(job), ran_out)


@dataclass(frozen=True, slots=True)
class ActionPlan:
    """Exactly what a restart/stop/start will do, for the confirmation dialog.

    ``state`` and ``last_alert`` are what the caller knows (shown as given); ``status`` is
    the job on the target when the plan was made. ``refusal`` says why it cannot run (read
    only, no start command, already running); a run of a refused plan records "refused".
    """

    action: Action
    host: str
    host_label: str
    job: JobConfig
    params: Mapping[str, ParamValue]
    start_command: str | None
    stop_command: str | None
    status: JobStatus
    state: str | None = None
    last_alert: str | None = None
    gpus_now: str | None = None  # the job's GPUs when the plan was made
    refusal: str | None = None
    detached_by: str = "setsid nohup"  # or "tmux session gpumon-JOB"
    # Other containers' memory a start would walk back into (the incident's cause still
    # there): said before the plan; ``despite``: the user chose to go on anyway, so the
    # wait for free GPUs does not wait for it to leave.
    in_the_way: tuple[Blocker, ...] = ()
    despite: bool = False
    needs: Mapping[int, int] = field(default_factory=dict)  # MiB the job needs, by GPU
    # A server job's probe that says it serves again (``jobs.SERVER_HEALTH``, by engine)
    server_health: str = SERVER_HEALTH["sglang"]

    @property
    def steps(self) -> tuple[Step, ...]:
        return STEPS[self.action]

    @property
    def pids(self) -> tuple[int, ...]:
        """The PIDs the stop step would signal now (it re-reads them when it runs)."""
        return self.status.pids if Step.STOP in self.steps else ()

    @property
    def commands(self) -> list[str]:
        """The commands that will run (the stop as signals when there is no stop command)."""
        out = []
        if Step.STOP in self.steps:
            out.append(self.stop_command or self._signal_text())
        if Step.START in self.steps and self.start_command:
            out.append(self.start_command)
        return out

    def _signal_text(self) -> str:
        group = self.status.record.pgid if self.status.record else None
        if group is None or not self.status.running:
            return "(nothing to signal: not running)"
        return f"kill -TERM -{group}; kill -KILL -{group} after {self.job.stop_timeout:g} s"

    def with_params(self, overrides: Mapping[str, ParamValue | str]) -> ActionPlan:
        """This plan with some parameters changed (text is parsed to the default's type).
        Raises ParamError for an unknown name (listing the known ones) or a bad value."""
        params = merge_params(self.job, {**self.params, **overrides})
        start, stop = _commands(self.job, params)
        return replace(self, params=params, start_command=start, stop_command=stop)

    @property
    def title(self) -> str:
        """``Restart drafter on ct200 (ssh root@pve1 -> pct exec 200)``."""
        return f"{self.action.capitalize()} {self.job.name} on {self.host} ({self.host_label})"

    @property
    def warnings(self) -> list[str]:
        """What stands in the way of a start, before the plan ("the cause is still on GPU
        6: CT 201 jupyter-lab holds 6.0 GiB"); each front end adds its own way out."""
        return [b.text() for b in self.in_the_way] if Step.START in self.steps else []

    def with_cause(self, found: tuple[Blocker, ...]) -> ActionPlan:
        """This plan with what stands in the way now (read again as the GPUs change)."""
        return replace(self, in_the_way=found)

    def anyway(self) -> ActionPlan:
        """This plan, confirmed despite what stands in the way."""
        return replace(self, despite=bool(self.in_the_way))

    def rows(self) -> list[PlanRow]:
        """What is known about the job, what each step will do, and why it is refused: the
        last alert is a warning, the refusal a problem, the rest info."""
        job = self.job
        out = []
        if self.state:
            out.append(PlanRow("state", self.state))
        out.append(PlanRow("on target", self.status.describe()))
        if self.last_alert:
            out.append(PlanRow("last alert", self.last_alert, "warning"))
        if self.params:
            shown = []
            for name, value in self.params.items():
                default = job.params.get(name)
                note = "" if value == default else f" (default {default!r})"
                shown.append(f"{name} = {value!r}{note}")
            out.append(PlanRow("parameters", "; ".join(shown)))
        out += [PlanRow(s.value, self._step_text(s), step=s) for s in self.steps]
        if self.refusal:
            out.append(PlanRow("REFUSED", self.refusal, "problem"))
        return out

    def lines(self) -> list[str]:
        """The plan as plain text for the terminal: the title, then one ``label: text`` line
        per row, the texts aligned."""
        return [self.title, *(f"  {r.label + ':':<11} {r.text}" for r in self.rows())]

    def _step_text(self, step: Step) -> str:
        job = self.job
        if step is Step.EVIDENCE:
            return evidence_text(job, self.status.running)
        if step is Step.STOP:
            if not self.status.running:
                return "nothing to stop (not running)"
            group = self.status.record.pgid if self.status.record else "?"
            how = self.stop_command or f"SIGTERM to process group {group}"
            return (
                f"{how} (PIDs {join_pids(self.status.pids)}), SIGKILL after {job.stop_timeout:g} s"
            )
        if step is Step.WAIT_FREE:
            if not job.gpus:
                return "no GPUs configured: not waiting"
            gpus = ", ".join(map(str, job.gpus))
            now = f"; now {self.gpus_now}" if self.gpus_now else ""
            until = f"until GPUs {gpus} use < {mib(job.free_mib)} of {job.name}'s"
            if self.needs:
                need = ", ".join(f"GPU {i}: {mib(n)}" for i, n in sorted(self.needs.items()))
                how = "need_mib" if job.need_mib is not None else "seen"
                until += f" and have what it needs free ({need}; {how})"
            if self.despite:
                until += "; other containers' memory not waited for (restarting anyway)"
            return f"{until}{now}"
        if step is Step.START:
            how = self.detached_by
            where = f" in {job.workdir}" if job.workdir else ""
            return f"{self.start_command}{where}  [detached: {how}; log {self.status.log_path}]"
        if job.server is not None:  # serving, not just up
            return f":{job.server}{self.server_health} answers 200 within {job.verify_s:g} s"
        return f"alive after {job.verify_s:g} s and its log growing"


def evidence_off(job: JobConfig) -> str | None:
    """Why the job keeps no evidence before its stop (None: it keeps it)."""
    if job.evidence and job.evidence_s > 0:
        return None
    key = "evidence = false" if not job.evidence else "evidence_s = 0"
    return f"off ({key} in the job's config)"


def evidence_text(job: JobConfig, running: bool) -> str:
    """What the evidence step will do, or why it does nothing."""
    if (off := evidence_off(job)) is not None:
        return off
    if not running:
        return "nothing running to keep evidence of"
    return (
        f"py-spy stacks, flight-recorder dumps, log tails and nvidia-smi -q into a bundle, "
        f"at most {job.evidence_s:g} s (Esc skips it)"
    )


def _commands(job: JobConfig, params: Mapping[str, ParamValue]) -> tuple[str | None, str | None]:
    """The rendered (start, stop) commands."""
    start = render_command(job.start, params) if job.start else None
    return start, render_command(job.stop, params) if job.stop else None


def _detached_by(transport: Transport, status: JobStatus, job: JobConfig) -> str:
    method = method_for(transport)
    if method == "tmux" or (method == "auto" and status.tmux):
        return "tmux session " + session_name(job.name)
    return "setsid nohup"


def find_job(host: HostConfig, name: str) -> JobConfig:
    """The job ``name`` of ``host``; JobError listing the configured jobs otherwise."""
    job = host.job(name)
    if job is None:
        known = ", ".join(j.name for j in host.jobs) or "none configured"
        raise JobError(f"host {host.name} has no job {name!r}; jobs: {known}")
    return job


async def make_plan(
    target: JobTarget,
    job_name: str,
    action: Action = "restart",
    *,
    params: Mapping[str, ParamValue | str] | None = None,
    state: str | None = None,
    last_alert: str | None = None,
) -> ActionPlan:
    """The plan for ``action`` on the job, with its status read from the target now.

    Raises JobError for an unknown job, ParamError for a bad parameter or template, and
    TransportError when the target cannot be reached. A plan that must not run (read-only,
    no ``start`` command, already running for ``start``) comes back with ``refusal`` set.
    """
    job = find_job(target.host, job_name)
    values = merge_params(job, params)
    start, stop = _commands(job, values)
    status = await job_status(target.transport, job)
    readings = target.readings() if target.readings and job.gpus else None
    needs = target.needs(job)
    refusal = None
    if target.read_only or target.host.read_only:
        where = "gpumon runs with --read-only" if target.read_only else "the host is read_only"
        refusal = f"read-only: {where}; nothing that changes {target.host.name} is allowed"
    elif action != "stop" and not job.start:
        refusal = f"job {job.name} has no start command in the config"
    elif action == "start" and status.running:
        refusal = f"{job.name} is already {status.describe()}; restart it instead"
    return ActionPlan(
        action=action,
        host=target.host.name,
        host_label=target.host.describe(),
        job=job,
        params=values,
        status=status,
        state=state,
        last_alert=last_alert,
        gpus_now=gpu_summary(readings, job.gpus) if readings else None,
        refusal=refusal,
        detached_by=_detached_by(target.transport, status, job),
        start_command=start,
        stop_command=stop,
        in_the_way=target.in_the_way(job) if refusal is None else (),
        needs=needs,
        server_health=SERVER_HEALTH[target.server_engine(job)],
    )


def join_pids(pids: list[int] | tuple[int, ...]) -> str:
    return " ".join(map(str, pids))


def workers_text(readings: GpuReadings | None, gpus: tuple[int, ...], pid: int | None) -> str:
    """Why the PID a launch reported is not on the GPUs: "its workers 15200-15202 hold GPUs
    5-7" (a launcher, torchrun or a shell, starts the processes that use the GPUs). Empty
    when ``pid`` itself is on them, or no process is listed on them (inside a container
    nvidia-smi may list none). Another container's processes on them (CT 201's jupyter,
    which keeps GPU 6 after the drafter's crash) are no workers of the launch."""
    if readings is None or pid is None:
        return ""
    on = {
        i: pids
        for i in gpus
        if (use := readings.gpus.get(i)) is not None
        and (pids := tuple(p for p in use.pids if p not in use.foreign_pids))
    }
    workers = sorted({p for pids in on.values() for p in pids})
    if not workers or pid in workers:
        return ""
    held = sorted(on)
    verb, who = ("holds", "worker") if len(workers) == 1 else ("hold", "workers")
    where = f"GPU{'s' if len(held) > 1 else ''} {index_ranges(held)}"
    return f"its {who} {index_ranges(workers)} {verb} {where}"
