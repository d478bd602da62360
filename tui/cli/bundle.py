"""``gpumon bundle``: an incident's evidence in one scrubbed ``.tar.gz``, for the hand-over.

    gpumon bundle HOST [--incident KEY | --last] [-o FILE] [--time SECONDS]
    gpumon bundle --replay RECORDING [--incident KEY] [-o FILE]

Connects to HOST, observes until every source answered once, picks the incident (the one
holding the alert KEY, else the newest: ``--last``), collects within ``--time`` seconds
and writes FILE (default ``gpumon-bundle-HOST-DATE.tar.gz`` here), mode 0600, never over
an existing file. Prints the path, then one line per part that could not be had. A HOST
that cannot be reached gets a bundle of what this machine has (its incident from the
flight recordings and the outbox, the recording, config, audit log, version). Exit 0
when written, 3 when written without the host (unreachable), 2 for a usage error, no
incident or an unwritable file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.backends.config import Config, HostConfig, resolve_host
from gpumon.tui.cli.options import sim_settings

if TYPE_CHECKING:
    from gpumon.backends.bundle import BundleOptions, BundleResult
    from gpumon.backends.config.notify import NotifySettings

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE = 0, 2, 3


def cmd_bundle(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.bundle import (
        BundleOptions,
        HostUnreachable,
        bundle_recording,
        bundle_unreachable,
        default_name,
    )

    if (args.host is None) == (args.replay is None):
        print("gpumon bundle: give a HOST or --replay RECORDING (one of them)", file=sys.stderr)
        return EXIT_USAGE
    if not args.time > 0:
        print("gpumon bundle: --time must be more than 0 seconds", file=sys.stderr)
        return EXIT_USAGE
    name = args.host or Path(args.replay).name.removesuffix(".jsonl.gz")
    output = Path(args.output) if args.output else Path(default_name(name))
    if output.exists():
        print(f"gpumon bundle: {output} exists; give another -o FILE", file=sys.stderr)
        return EXIT_USAGE
    options = BundleOptions(output, args.incident, args.time)
    notify = config.notify
    try:
        if args.replay is not None:
            result = bundle_recording(Path(args.replay), options, notify)
        else:
            host = resolve_host(config, args.host)
            try:
                result = asyncio.run(_bundle_host(args, host, options, notify))
            except HostUnreachable as e:
                told = _told_incidents(config, host.name)
                result = bundle_unreachable(host, options, notify, str(e), told)
    except OSError as e:  # the recording cannot be read, the bundle cannot be written
        where = e.filename or args.replay or output
        print(f"gpumon bundle: {where}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    _report(result)
    return EXIT_OK if result.unreachable is None else EXIT_UNREACHABLE


async def _bundle_host(
    args: argparse.Namespace,
    host: HostConfig,
    options: BundleOptions,
    notify: NotifySettings | None,
) -> BundleResult:
    """Connect to ``host`` (no reconnecting), observe, bundle, disconnect: the monitor
    writes no incident recording of its own (the bundle writes the window it needs) and,
    on the demo, has its scenario's last ``DEMO_PAST_S`` fed first."""
    from gpumon.backends.bundle import DEMO_PAST_S, bundle_host
    from gpumon.backends.runtime import Runtime

    sim = partial(sim_settings, args)
    async with Runtime(sim=sim, reconnect=False, recordings=False) as runtime:
        monitor = runtime.start_monitor(runtime.monitor(host, past_s=DEMO_PAST_S))
        return await bundle_host(monitor, options, notify)


def _told_incidents(config: Config, host: str) -> list[dict[str, Any]]:
    """The outbox's open incidents of ``host`` (what ``gpumon watch`` told the notifiers),
    as their JSON; none when there is no outbox (it is not created here)."""
    import sqlite3
    from dataclasses import asdict

    from gpumon.backends.notify.hub import default_outbox
    from gpumon.backends.notify.outbox import Outbox

    path = default_outbox(config.notify_settings())
    if not path.exists():
        return []
    try:
        outbox = Outbox(path)
    except sqlite3.Error:  # a damaged outbox: the recordings may still hold the incident
        return []
    try:
        return [asdict(e) for e in outbox.open_incidents() if e.host == host]
    except sqlite3.Error:
        return []
    finally:
        outbox.close()


def _report(result: BundleResult) -> None:
    print(
        f"{result.path}: {result.headline} ({len(result.files)} files, "
        f"{result.size} bytes before compression)"
    )
    for name, why in result.missing:
        print(f"  not in it: {name}: {why}")
