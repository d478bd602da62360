"""``gpumon restart HOST JOB``: the dashboard's restart, without the dashboard.

    gpumon restart HOST JOB [--param NAME=VALUE ...] [--yes] [--dry-run]

Prints the plan (what will be stopped, the exact start command), asks for confirmation on
a terminal (no terminal and no ``--yes``: refused, exit 2), then prints each step. Exit 0
when the job was restarted and verified, 1 when a step failed, 2 for a usage error, an
unknown job or parameter, a missing confirmation or a read-only refusal, 130 if cancelled.
``--dry-run`` prints the plan and changes nothing. GPU memory readings come from a
HostMonitor on the host, started for the duration of the command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, TextIO

from gpumon.backends.config import Config, HostConfig, resolve_host
from gpumon.tui.cli.options import sim_settings

if TYPE_CHECKING:
    from gpumon.backends.actions import Outcome, Step
    from gpumon.backends.monitor import HostMonitor

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_CANCELLED = 0, 1, 2, 130


def parse_params(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x y"]`` as a dict; ValueError for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--param {item!r}: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def cmd_restart(args: argparse.Namespace, config: Config) -> int:
    """Run ``gpumon restart`` with parsed ``args``; returns the exit code."""
    try:
        params = parse_params(args.param)
    except ValueError as e:
        print(f"gpumon restart: {e}", file=sys.stderr)
        return EXIT_REFUSED
    host = resolve_host(config, args.host)
    return asyncio.run(_restart(args, host, params, sys.stdout))


async def _first_sample(monitor: HostMonitor, timeout: float) -> str | None:
    """Wait for a GPU sample, and the other sources' first round (who else holds the GPUs,
    the job's log: what may stand in the way of the restart); the reason when no sample
    came."""
    from gpumon.backends.model import ConnState

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while monitor.latest is None or not monitor.first_rounds_done():
        if monitor.latest is not None and loop.time() >= deadline:
            return None
        if monitor.status.state == ConnState.FAILED or loop.time() >= deadline:
            return monitor.status.error or f"no GPU sample within {timeout:g} s"
        await monitor.wait_for_update(min(0.5, max(deadline - loop.time(), 0.01)))
    return None


async def _restart(
    args: argparse.Namespace, host: HostConfig, params: dict[str, str], out: TextIO
) -> int:
    from gpumon.backends.actions import (
        JobError,
        JobRun,
        JobTarget,
        ParamError,
        find_job,
        make_plan,
    )
    from gpumon.backends.runtime import Runtime
    from gpumon.backends.transport import TransportError

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    async with Runtime(sim=partial(sim_settings, args)) as runtime:
        monitor = runtime.monitor(host)
        session = runtime.session
        try:
            job = find_job(monitor.host, args.job)  # the demo's drafter lives on monitor.host
        except JobError as e:
            print(f"gpumon restart: {e}", file=sys.stderr)
            return EXIT_REFUSED
        if job.gpus or host.kind == "demo":
            runtime.start_monitor(monitor)  # watched by the session: its runs' outcomes
            if job.gpus and (why := await _first_sample(monitor, args.timeout)) is not None:
                print(f"gpumon restart: no GPU readings from {host.name}: {why}", file=sys.stderr)
                return EXIT_FAILED
        target = JobTarget.from_monitor(monitor, read_only=args.read_only)
        try:
            plan = await make_plan(target, job.name, "restart", params=params)
        except (JobError, ParamError) as e:
            print(f"gpumon restart: {e}", file=sys.stderr)
            return EXIT_REFUSED
        except TransportError as e:
            print(f"gpumon restart: {host.name}: {e}", file=sys.stderr)
            return EXIT_FAILED
        for blocker in plan.in_the_way if plan.warnings else ():  # before the plan
            pids = f"{blocker.pids}; " if blocker.pids else ""
            say(f"{blocker.text()} — stop it first ({pids}the dashboard's K), or restart anyway")
        for line in plan.lines():
            say(line)
        if args.dry_run:
            say("dry run: nothing changed")
            return EXIT_OK
        if plan.refusal:
            outcome = await JobRun(plan, target).wait()  # audited as "refused"
            print(f"gpumon restart: refused: {outcome.message}", file=sys.stderr)
            return EXIT_REFUSED
        anyway = " anyway" if plan.warnings else ""
        ask = f"Restart {job.name} on {host.name}{anyway}? [y/N] "
        if not args.yes and not await _confirm(ask):
            return EXIT_REFUSED
        plan = plan.anyway()  # confirmed (or --yes) despite what is in the way

        def progress(step: Step, message: str) -> None:
            say(f"[{step.value}] {message}")

        run = session.runs.start(plan, target, progress=progress, free_timeout=args.free_timeout)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, lambda: say(run.cancel().message))
        outcome = await run.wait()
        return _report(outcome)


async def _confirm(prompt: str) -> bool:
    if not sys.stdin.isatty():
        print(
            "gpumon restart: refusing: no terminal to confirm on; pass --yes to restart "
            "without asking (or --dry-run to see the plan)",
            file=sys.stderr,
        )
        return False
    loop = asyncio.get_running_loop()
    try:
        answer = await loop.run_in_executor(None, input, prompt)
    except EOFError:
        answer = ""
    if answer.strip().lower() not in {"y", "yes"}:
        print("gpumon restart: not confirmed; nothing changed", file=sys.stderr)
        return False
    return True


def _report(outcome: Outcome) -> int:
    stream = sys.stdout if outcome.ok else sys.stderr
    print(f"{outcome.status.upper()}: {outcome.message} ({outcome.duration_s:.1f} s)", file=stream)
    if outcome.detail:
        print("--- last lines of the log ---", file=stream)
        print(outcome.detail, file=stream)
    if outcome.ok:
        return EXIT_OK
    return EXIT_CANCELLED if outcome.status == "cancelled" else EXIT_FAILED
