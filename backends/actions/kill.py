"""Terminating a GPU process (the ``K`` key): SIGTERM, then, when it is still there after
a while, SIGKILL if the user says so; through the right namespace; audited.

- With host access (the monitor's list comes from the Proxmox host and the process has a
  host PID): ``kill -s SIG HOSTPID`` on the host itself (``Transport.open_host_stream``),
  which reaches any container's process.
- Otherwise: ``kill -s SIG PID`` by the PID inside the watched container, through the
  transport as every command goes there (``pct exec ID -- kill ...``).
- A process with neither (another container's, seen without host access) cannot be
  reached: ``kill_plan`` raises ``KillError`` saying so.

Between the listing and the key the PID may have ended and been given to another
process. So when the record has the process's start time (``start_ticks``: field 22 of
``/proc/PID/stat``, clock ticks after boot, the same number in every PID namespace of
one kernel) the signal goes in one ``sh -c`` that reads the stat file of that PID (after
the last ``)``: the command name may hold spaces and parentheses), compares the start
time and only then execs ``kill``; a mismatch exits ``REUSED_EXIT`` and nothing is
signalled. Without a known start time the plain ``kill`` runs and the dialog says that
PID reuse is not ruled out.

Every signal sent (or not sent: a reused PID) is one audit entry
(``audit.record("kill", ...)``); the first names the evidence bundle kept before it
(the dialog's evidence step, as a restart's: ``bundle``).
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gpumon.backends.actions import audit
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import GpuProcess, HostSample, ProcessSource
from gpumon.backends.parsers.processes import container_label
from gpumon.backends.transport.base import Transport, TransportError, wrap_container

if TYPE_CHECKING:
    from gpumon.backends.alerts.store import Alert

__all__ = [
    "REUSED_EXIT",
    "SERVER_KILL_KINDS",
    "KillError",
    "KillOutcome",
    "KillPlan",
    "api_server",
    "guarded_script",
    "hung_scheduler",
    "kill_plan",
    "send_signal",
    "wait_gone",
]

Signal = Literal["TERM", "KILL", "0"]  # "0": is it there (``kill -s 0``)
TERM_WAIT_S = 10.0  # how long SIGTERM gets before SIGKILL is offered
REUSED_EXIT = 3  # the guard's exit status when the PID is now another process's
GONE_EXIT = 1  # no such process (as ``kill`` says it)


class KillError(GpumonError):
    """The process cannot be signalled from here; the message says why."""


def guarded_script(pid: int, start_ticks: int, sig: Signal, proc: str = "/proc") -> str:
    """The ``sh -c`` text that sends ``sig`` to ``pid`` only while ``{proc}/{pid}/stat``
    still says the process started at ``start_ticks``: ``${20}`` after the last ``)`` is
    field 22. ``exec kill`` runs the ``kill`` program of PATH (not the shell's builtin:
    the simulator's stand-in is there). Exits ``GONE_EXIT`` when there is no such PID,
    ``REUSED_EXIT`` when it is another process now; else ``kill``'s own status."""
    stat = shlex.quote(f"{proc}/{pid}/stat")
    return (
        f"set -f; s=$(cat {stat}) || "
        f'{{ echo "no process {pid} ({proc}/{pid}/stat)" >&2; exit {GONE_EXIT}; }}; '
        f'set -- ${{s##*)}}; [ "${{20}}" = {start_ticks} ] || '
        f'{{ echo "PID {pid} started at tick ${{20}}, not {start_ticks}" >&2; '
        f"exit {REUSED_EXIT}; }}; exec kill -s {sig} {pid}"
    )


@dataclass(frozen=True, slots=True)
class KillPlan:
    """Which process, by which PID, through which way."""

    host: str
    process: GpuProcess
    pid: int  # the PID the kill command names
    on_host: bool  # True: on the Proxmox host by host PID; False: inside the container
    container: int | None  # the watched CT (``pct exec`` wraps the command)
    proc: str = "/proc"  # where the command's side has /proc (the simulator's own)

    @property
    def start_ticks(self) -> int | None:
        """The start time the guard compares (None: unknown, not guarded)."""
        return self.process.start_ticks

    def command(self, sig: Signal) -> list[str]:
        """The argv the transport runs (inside the container: it wraps it in pct exec)."""
        if self.start_ticks is None:
            return ["kill", "-s", sig, str(self.pid)]
        return ["sh", "-c", guarded_script(self.pid, self.start_ticks, sig, self.proc)]

    def shell_line(self, sig: Signal) -> str:
        """Exactly what the target's shell runs: ``pct exec 200 -- sh -c '...'`` inside
        the container, the command alone on the host."""
        argv = self.command(sig)
        return shlex.join(argv if self.on_host else wrap_container(argv, self.container))

    @property
    def where(self) -> str:
        if self.on_host:
            return "on the Proxmox host"
        return "on the host" if self.container is None else f"inside CT {self.container}"

    def describe(self, sig: Signal) -> str:
        """``kill -s TERM 3187442 on the Proxmox host`` / ``... inside CT 200`` (in words:
        the command that runs is ``shell_line``)."""
        return f"kill -s {sig} {self.pid} {self.where}"

    def guard_text(self) -> str:
        """What the dialog says about PID reuse."""
        if self.start_ticks is None:
            return "start time unknown: a reused PID is not ruled out"
        return (
            f"first checks that PID {self.pid} still started at tick {self.start_ticks} "
            "(else signals nothing)"
        )

    @property
    def summary(self) -> str:
        """``host PID 3187442, CT201 PID 88, user root: jupyter-lab ...`` for the dialog."""
        p = self.process
        parts = []
        if p.host_pid is not None:
            parts.append(f"host PID {p.host_pid}")
        if p.pid is not None:
            where = "" if self.container is None else f"CT{self.container} "
            parts.append(f"{where}PID {p.pid}")
        elif p.source == ProcessSource.HOST:
            parts.append(f"in {container_label(p.container)}")
        if p.user:
            parts.append(f"user {p.user}")
        return ", ".join(parts)


def kill_plan(
    host: str,
    process: GpuProcess,
    *,
    host_access: bool,
    container: int | None,
    host_proc: str = "/proc",
) -> KillPlan:
    """How ``process`` can be signalled (``host_proc``: the host side's /proc, where the
    guard reads on the host). Raises KillError when it cannot be reached."""
    if host_access and process.host_pid is not None and process.source == ProcessSource.HOST:
        return KillPlan(host, process, process.host_pid, True, container, host_proc)
    if process.pid is not None:
        return KillPlan(host, process, process.pid, False, container)
    where = container_label(process.container)
    raise KillError(
        f"no PID of this process is reachable from here ({where}, host PID "
        f"{process.host_pid or 'unknown'}): it needs host-side access (host_processes)"
    )


@dataclass(frozen=True, slots=True)
class KillOutcome:
    ok: bool
    message: str
    reused: bool = False  # the PID is another process's now: nothing was signalled


async def send_signal(
    transport: Transport, plan: KillPlan, sig: Signal, *, bundle: str | None = None
) -> KillOutcome:
    """Send ``sig``; audited (``bundle``: the evidence kept before it). Never raises for a
    failed kill: the outcome says it."""
    started = time.monotonic()
    argv = plan.command(sig)
    try:
        res = await transport.run(argv, timeout=15.0, on_host=plan.on_host)
    except TransportError as e:
        outcome = KillOutcome(False, f"{plan.describe(sig)}: {e}")
    else:
        if res.exit_code == 0:
            outcome = KillOutcome(True, f"sent SIG{sig} ({plan.describe(sig)})")
        elif res.exit_code == REUSED_EXIT and plan.start_ticks is not None:
            why = (res.stderr or res.stdout).strip().splitlines()
            detail = f" ({why[-1]})" if why else ""
            text = f"PID {plan.pid} is now a different process; not killed{detail}"
            outcome = KillOutcome(False, text, reused=True)
        else:
            why = (res.stderr or res.stdout).strip().splitlines()
            text = why[-1] if why else f"exit {res.exit_code}"
            outcome = KillOutcome(False, f"{plan.describe(sig)} failed: {text}")
    status = "ok" if outcome.ok else ("refused" if outcome.reused else "failed")
    try:
        audit.record(
            "kill",
            plan.host,
            status,
            parameters={
                "signal": sig,
                "host_pid": plan.process.host_pid,
                "pid": plan.process.pid,
                "container": plan.process.container,
                "command": plan.process.command or plan.process.name,
                "via": "host" if plan.on_host else "container",
                "start_ticks": plan.start_ticks,
            },
            commands=[plan.shell_line(sig)],
            pids=[plan.pid],
            duration_s=time.monotonic() - started,
            detail=outcome.message,
            bundle=bundle,
        )
    except OSError as e:
        return KillOutcome(outcome.ok, f"{outcome.message}; audit log not written: {e}")
    return outcome


async def alive(transport: Transport, plan: KillPlan) -> bool:
    """Whether the process is still there (``kill -s 0``, guarded as the signal was: a
    PID now another process's means it ended; an unreachable machine counts as yes)."""
    try:
        res = await transport.run(plan.command("0"), timeout=10.0, on_host=plan.on_host)
    except TransportError:
        return True
    return res.exit_code == 0


async def wait_gone(
    transport: Transport, plan: KillPlan, timeout: float = TERM_WAIT_S, poll_s: float = 0.5
) -> bool:
    """True once the process is gone, False when it is still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if not await alive(transport, plan):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll_s)


# The alerts a K of a process that is no job's answers: memory another container or the
# host holds, memory held by nothing that computes.
KILL_KINDS = ("foreign_process", "gpu_idle_held")
# ... and those whose fix is K on a vLLM server's API server (``server_pid``, discovery's)
SERVER_KILL_KINDS = ("vllm_wedged", "vllm_engine_dead")


def kill_alert(alerts: Iterable[Alert], process: GpuProcess, gpus: Iterable[int]) -> str | None:
    """The key of the alert the kill of ``process`` (on the GPUs ``gpus``, indexes)
    answers, whose incident its evidence is of: the newest active ``foreign_process`` that
    names it its holder, else the newest active vLLM alert whose server's API server it
    is or ``sglang_hung`` whose first scheduler it is (the process their K fix names),
    else the newest active ``foreign_process`` or ``gpu_idle_held`` of one of its GPUs;
    None: no such alert."""
    on = set(gpus)
    active = [a for a in alerts if a.active]
    found = [a for a in active if a.kind in KILL_KINDS]
    held = [
        a
        for a in found
        if a.facts.held is not None
        and process.host_pid is not None
        and a.facts.held.holder.pid == process.host_pid
    ]
    server = [
        a
        for a in active
        if a.kind in SERVER_KILL_KINDS
        and process.pid is not None
        and a.facts.server_pid == process.pid
    ]
    listed = process.shown_pid
    server += [a for a in active if a.kind == "sglang_hung" and listed in a.facts.schedulers[:1]]
    mine = held or server or [a for a in found if a.gpu is not None and a.gpu in on]
    return max(mine, key=lambda a: a.time).key if mine else None


def hung_scheduler(alert: Alert, sample: HostSample) -> GpuProcess | None:
    """The process ``K`` stops for a hung SGLang server (``sglang_hung``): its first
    scheduler (``schedulers``, as the fix "K stop its scheduler (PID N)" names it), as
    ``sample`` lists it; None where the alert names none or it is no longer listed."""
    if alert.kind != "sglang_hung" or not alert.facts.schedulers:
        return None
    first = alert.facts.schedulers[0]
    return next((p for p in sample.processes if p.shown_pid == first), None)


def api_server(alert: Alert, container: int | None) -> GpuProcess | None:
    """The process ``K`` stops for ``alert`` where its fix is K on a vLLM server's API
    server (a wedged engine's, a dead engine core's: its exit takes the engine processes
    with it): that API server by its PID in the watched machine (discovery's,
    ``server_pid``), with the command line discovery sent (masked); None where the alert
    names none. Not a GPU process: no memory, no start time known (the dialog says that
    a reused PID is not ruled out)."""
    pid = alert.facts.server_pid
    if alert.kind not in SERVER_KILL_KINDS or pid is None:
        return None
    return GpuProcess(
        pid,
        "vllm",
        None,
        container=None if container is None else str(container),
        command=alert.facts.command,
    )
