"""The headless ``gpumon doctor`` and ``gpumon swap-torch`` commands.

    gpumon doctor HOST [--json] [--gpus]
        exit 0 nothing is a problem, 1 a problem, 3 the host cannot be reached
        (--gpus: only the GPU verification after a reset or reboot; 0 pass, 1 fail)
    gpumon swap-torch HOST VARIANT [--version V] [--yes] [--dry-run] [--force]
        exit 0 swapped (or dry run of a plan that would run, or nothing to do),
        1 failed and rolled back / nothing changed, 2 refused or not confirmed,
        3 the host cannot be reached, 4 rollback failed (venv state unknown)

Light at import time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from gpumon.backends.config import HostConfig, resolve_host
from gpumon.tui.cli.options import sim_settings

if TYPE_CHECKING:
    from gpumon.backends.config import Config
    from gpumon.backends.torchenv import SwapEvent

EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _host_and_transport(args: argparse.Namespace, config: Config) -> tuple[HostConfig, Any]:
    from gpumon.backends.runtime import Runtime

    transport = Runtime(sim=partial(sim_settings, args)).transport(resolve_host(config, args.host))
    return transport.host, transport  # the demo's is gpumon's own Python


def cmd_doctor(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.torchenv import format_report, host_python, run_doctor
    from gpumon.backends.torchenv.doctor import DoctorReport
    from gpumon.backends.torchenv.gpu_checks import verify_gpus
    from gpumon.backends.transport import TransportError

    host, transport = _host_and_transport(args, config)

    async def go() -> Any:
        try:
            await transport.connect()
            if args.gpus:
                checks = await verify_gpus(transport, host)
                return DoctorReport(host.name, host_python(host), tuple(checks))
            return await run_doctor(transport, host)
        finally:
            await transport.dispose()

    try:
        report = asyncio.run(go())
    except TransportError as e:
        if args.json:
            error = {"host": host.name, "python": host_python(host), "checks": [], "error": str(e)}
            print(json.dumps(error, indent=2))
        else:
            print(f"UNKNOWN {host.name}: {e}")
        return EXIT_UNREACHABLE
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.gpus:
        print(_gpus_report(report, transport.label))
    else:
        print(format_report(report, transport.label))
    return int(report.exit_code)


def _gpus_report(report: Any, label: str) -> str:
    """``doctor --gpus``'s text: a header, the checks, PASS or FAIL."""
    from gpumon.backends.torchenv import format_checks

    lines = [f"GPU verification {report.host}" + (f" ({label})" if label else "")]
    lines += format_checks(list(report.checks))
    failed = [c.name for c in report.problems]
    lines.append(f"FAIL: {', '.join(failed)}" if failed else "PASS: the GPUs are fit to run jobs")
    return "\n".join(lines)


def _printer(out: Callable[[str], None]) -> Callable[[SwapEvent], None]:
    def on_event(event: SwapEvent) -> None:
        if event.kind == "line":
            out(f"    | {event.text}")
        else:
            out(f"[{event.step}] {event.state}: {event.text}")

    return on_event


def audited(record: Callable[..., None], *args: Any) -> None:
    """Write an audit entry; a log that cannot be written is reported, not fatal here
    (nothing was changed)."""
    try:
        record(*args)
    except OSError as e:
        print(f"gpumon: audit log not written: {e}", file=sys.stderr)


def _ask(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def cmd_swap_torch(
    args: argparse.Namespace, config: Config, *, confirm: Callable[[str], bool] | None = None
) -> int:
    """Plan, confirm, run (refused with ``--read-only``, before or after the command).
    ``confirm`` asks the user (default: a terminal prompt; without a terminal and without
    --yes the swap is refused)."""
    from gpumon.backends.torchenv import (
        ProbeError,
        execute_swap,
        format_checks,
        plan_swap,
        record_refusal,
    )
    from gpumon.backends.transport import TransportError

    host, transport = _host_and_transport(args, config)

    def say(text: str) -> None:
        print(text, flush=True)

    async def go() -> int:
        try:
            plan = await plan_swap(
                transport,
                host,
                args.variant,
                version=args.version,
                force=args.force,
                read_only=args.read_only,
            )
        except (TransportError, ProbeError) as e:
            say(f"UNKNOWN {host.name}: {e}")
            return EXIT_UNREACHABLE
        say(plan.describe())
        if args.dry_run:
            say("dry run: nothing changed")
            return 0 if plan.ok or plan.noop else EXIT_USAGE
        if plan.noop:
            say(f"nothing to do: {plan.current} is installed")
            return 0
        if plan.refusals:
            audited(record_refusal, plan)
            print(f"gpumon: swap refused: {plan.refusals[0].reason}", file=sys.stderr)
            return EXIT_USAGE
        if not args.yes:
            if confirm is None and not sys.stdin.isatty():
                audited(record_refusal, plan, "not confirmed: no terminal and no --yes")
                print("gpumon: not confirmed: no terminal to ask on; pass --yes", file=sys.stderr)
                return EXIT_USAGE
            ask = confirm or _ask
            question = f"Swap {plan.current or 'no torch'} -> {plan.target} on {host.name}? [y/N] "
            if not await asyncio.to_thread(ask, question):
                audited(record_refusal, plan, "not confirmed: declined")
                print("gpumon: not confirmed; nothing changed", file=sys.stderr)
                return EXIT_USAGE
        outcome = await execute_swap(plan, transport, host, on_event=_printer(say))
        if outcome.verification:
            say("torch checks after the swap:")
            say("\n".join(format_checks(outcome.verification)))
        say(outcome.message)
        if outcome.audit_error:
            print(f"gpumon: audit log not written: {outcome.audit_error}", file=sys.stderr)
        return outcome.exit_code

    async def run() -> int:
        try:
            return await go()
        finally:
            await transport.dispose()

    return asyncio.run(run())
