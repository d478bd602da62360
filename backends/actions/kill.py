"""Terminating a GPU process (the ``K`` key): SIGTERM, then, when it is still there after
a while, SIGKILL if the user says so; through the right namespace; audited.

- With host access (the monitor's list comes from the Proxmox host and the process has a
  host PID): ``kill -s SIG HOSTPID`` on the host itself (``Transport.open_host_stream``),
  which reaches any container's process.
- Otherwise: ``kill -s SIG PID`` by the PID inside the watched container, through the
  transport as every command goes there (``pct exec ID -- kill ...``).
- A process with neither (another container's, seen without host access) cannot be
  reached: ``kill_plan`` raises ``KillError`` saying so.

Every signal sent is one audit entry (``audit.record("kill", ...)``), success or not.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

from gpumon.backends.actions import audit
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import GpuProcess, ProcessSource
from gpumon.backends.monitor.processes import container_label
from gpumon.backends.transport.base import Transport, TransportError

__all__ = ["KillError", "KillOutcome", "KillPlan", "kill_plan", "send_signal", "wait_gone"]

Signal = Literal["TERM", "KILL"]
TERM_WAIT_S = 10.0  # how long SIGTERM gets before SIGKILL is offered


class KillError(GpumonError):
    """The process cannot be signalled from here; the message says why."""


@dataclass(frozen=True, slots=True)
class KillPlan:
    """Which process, by which PID, through which way."""

    host: str
    process: GpuProcess
    pid: int  # the PID the kill command names
    on_host: bool  # True: on the Proxmox host by host PID; False: inside the container
    container: int | None  # the watched CT (``pct exec`` wraps the command)

    def command(self, sig: Signal) -> list[str]:
        return ["kill", "-s", sig, str(self.pid)]

    def describe(self, sig: Signal) -> str:
        """``kill -s TERM 3187442 on the Proxmox host`` / ``... inside CT 200``."""
        where = (
            "on the Proxmox host"
            if self.on_host
            else ("on the host" if self.container is None else f"inside CT {self.container}")
        )
        return f"{' '.join(self.command(sig))} {where}"

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
    host: str, process: GpuProcess, *, host_access: bool, container: int | None
) -> KillPlan:
    """How ``process`` can be signalled. Raises KillError when it cannot be reached."""
    if host_access and process.host_pid is not None and process.source == ProcessSource.HOST:
        return KillPlan(host, process, process.host_pid, True, container)
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


async def send_signal(transport: Transport, plan: KillPlan, sig: Signal) -> KillOutcome:
    """Send ``sig``; audited. Never raises for a failed kill: the outcome says it."""
    started = time.monotonic()
    argv = plan.command(sig)
    try:
        res = await transport.run(argv, timeout=15.0, on_host=plan.on_host)
    except TransportError as e:
        outcome = KillOutcome(False, f"{plan.describe(sig)}: {e}")
    else:
        if res.exit_code == 0:
            outcome = KillOutcome(True, f"sent SIG{sig} ({plan.describe(sig)})")
        else:
            why = (res.stderr or res.stdout).strip().splitlines()
            text = why[-1] if why else f"exit {res.exit_code}"
            outcome = KillOutcome(False, f"{plan.describe(sig)} failed: {text}")
    try:
        audit.record(
            "kill",
            plan.host,
            "ok" if outcome.ok else "failed",
            parameters={
                "signal": sig,
                "host_pid": plan.process.host_pid,
                "pid": plan.process.pid,
                "container": plan.process.container,
                "command": plan.process.command or plan.process.name,
                "via": "host" if plan.on_host else "container",
            },
            commands=[" ".join(argv)],
            pids=[plan.pid],
            duration_s=time.monotonic() - started,
            detail=outcome.message,
        )
    except OSError as e:
        return KillOutcome(outcome.ok, f"{outcome.message}; audit log not written: {e}")
    return outcome


async def alive(transport: Transport, plan: KillPlan) -> bool:
    """Whether the PID is still there (``kill -0``; an unreachable machine counts as yes)."""
    try:
        res = await transport.run(["kill", "-0", str(plan.pid)], timeout=10.0, on_host=plan.on_host)
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
