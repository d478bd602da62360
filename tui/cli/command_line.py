"""The ``gpumon`` command line: ``run`` finds the subcommand's row in the table
(``subcommands``; no subcommand word: the dashboard), parses with the parser built from it,
reads the config and runs the row's function; a failure gpumon can name is one line, no
traceback. Here too: the dashboard, ``replay``, ``snapshot``, ``check`` and ``config``.

Kept light at import time (no Textual, no asyncssh): headless commands start fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from gpumon.backends.config import Config, ConfigError, HostConfig, load_config, resolve_host
from gpumon.backends.errors import GpumonError
from gpumon.tui.cli import subcommands, words
from gpumon.tui.cli.options import build_parser, common_options, sim_settings
from gpumon.tui.cli.subcommands import DASHBOARD, FIRST_ROUNDS_S, JUDGE_WINDOWS, Subcommand

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpumon.backends.monitor import HostMonitor

EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_INTERRUPTED = 130
HOW_TO_START = (
    "try `gpumon demo` (a simulated GPU machine) or `gpumon local` (this machine), "
    "or add a [hosts.NAME] table to the config (`gpumon config path` says where)"
)


async def _one_sample(
    host: HostConfig,
    args: argparse.Namespace,
    timeout: float,
    *,
    rates: bool = True,
    window: float = 0.0,
    judged: bool = False,
) -> tuple[HostMonitor, float, list[str], float]:
    """Connect once, wait (``timeout``) for a GPU sample (no longer once the sampler failed
    for good: ``HostMonitor.final_failure``), then up to ``FIRST_ROUNDS_S``
    in all for every other source's first round (``HostMonitor.waiting_for``: the
    process lists, the Proxmox host's included, SGLang discovery and two observations of
    each server, the followed logs) and, with ``rates``, the jobs' throughput; keep
    watching for ``window`` seconds after the first sample (``check``: the alert rules
    see a trend, a silence); with ``judged``, on past it, up to ``JUDGE_WINDOWS`` windows,
    until the time-to-full rule has the samples it needs (a loaded sampler's gaps:
    ``AlertEngine.time_to_full_unjudged``). Returns the monitor, the moment observing
    ended (ages and verdicts are judged then, not after the stop, which may wait for the
    target's processes to exit), the sources that did not answer in time, in words
    (``"host processes: no answer in 10 s"``): never silently left out, and the seconds
    watched after the first sample."""
    import asyncio

    from gpumon.backends.model import ConnState
    from gpumon.backends.runtime import Runtime

    loop = asyncio.get_running_loop()
    first_sample_at: float | None = None
    waited = 0.0
    async with Runtime(sim=partial(sim_settings, args), reconnect=False) as runtime:
        monitor = runtime.start_monitor(runtime.monitor(host, one_shot=True))
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            if monitor.status.state == ConnState.FAILED:
                break
            if monitor.latest is None and monitor.final_failure() is not None:
                break  # no sample can come (no nvidia-smi, the driver's verdict): say it now
            if monitor.latest is not None:
                first_sample_at = first_sample_at or loop.time()
                waited = loop.time() - first_sample_at
                answered = not monitor.waiting_for()
                rated = not rates or not monitor.workloads.rates_pending()
                thin = (
                    judged
                    and waited < JUDGE_WINDOWS * window
                    and monitor.alerts.time_to_full_unjudged() is not None
                )
                done = waited >= FIRST_ROUNDS_S or (answered and rated)
                if done and waited >= window and not thin:
                    break
                until = window if answered and rated else max(window, FIRST_ROUNDS_S)
                if thin and waited >= window:  # the next sample may be the one it needs
                    until = JUDGE_WINDOWS * window
                left = min(left, max(first_sample_at + until - loop.time(), 0.05))
            await monitor.wait_for_update(min(left, 0.5))
        observed_at = time.time()
    incomplete = [] if monitor.latest is None else monitor.waiting_for()
    said = f"{min(waited, FIRST_ROUNDS_S):.0f} s"
    words = [f"{source}: {what} in {said}" for source, what in incomplete]
    return monitor, observed_at, words, waited


def cmd_snapshot(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.monitor import snapshot_json, snapshot_table
    from gpumon.backends.monitor.report import TEXT_WIDTH

    host = resolve_host(config, args.host)
    monitor, now, incomplete = _snapshot(host, args)
    if args.json:
        print(json.dumps(snapshot_json(monitor, now, incomplete), indent=2))
    else:
        print(snapshot_table(monitor, incomplete, width=None if args.wide else TEXT_WIDTH))
    return 0 if monitor.latest is not None else EXIT_UNKNOWN


def _snapshot(host: HostConfig, args: argparse.Namespace) -> tuple[HostMonitor, float, list[str]]:
    """``snapshot``'s monitor, the moment observed and what did not answer: ``local`` in
    gpumon's own process where one round of the agent is the answer (``monitor.oneshot``:
    no agent process, no event loop), else ``_one_sample``."""
    if host.kind == "local":
        from gpumon.backends.monitor.oneshot import local_snapshot

        got = local_snapshot(host)
        if got is not None:
            return got[0], got[1], []
    import asyncio

    monitor, now, incomplete, _ = asyncio.run(_one_sample(host, args, args.timeout))
    return monitor, now, incomplete


def cmd_check(args: argparse.Namespace, config: Config) -> int:
    from dataclasses import replace

    from gpumon.backends.alerts.rules import check_rules
    from gpumon.backends.monitor import check_verdict

    if args.window < 0:
        print("gpumon check: --window must be 0 or more seconds", file=sys.stderr)
        return EXIT_UNKNOWN
    host = resolve_host(config, args.host)
    host = replace(host, alerts=check_rules(host.alerts, args.window, host.interval))
    # The verdict rests on GPUs and alerts, not on the jobs' throughput: no waiting for
    # their rates (the sources' first rounds are waited for: who holds memory is one).
    # A check that could not look is no OK: it watches on while the window is too thin
    # for the time-to-full rule (a loaded host's sampler), then says UNKNOWN and why.
    judged = args.window > 0
    import asyncio

    run = _one_sample(host, args, args.timeout, rates=False, window=args.window, judged=judged)
    monitor, _, incomplete, waited = asyncio.run(run)
    unjudged = monitor.alerts.time_to_full_unjudged() if judged else None
    if unjudged is not None:
        unjudged += f" (watched {waited:.0f} s, at most {JUDGE_WINDOWS:g} windows)"
    code, line = check_verdict(monitor, incomplete, unjudged=unjudged)
    print(line)
    return int(code)


def cmd_config(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.config import config_path, format_hosts

    if args.action == "path":
        path, why = config_path(args.config)
        exists = "" if path.exists() else " (does not exist)"
        print(f"{path}{exists}  [{why}]")
        return 0
    print(format_hosts(config))
    return 0


def _no_terminal(command: str) -> int | None:
    """Refuse a full-screen command when stdout is not a terminal (piped, redirected): exit
    2 with one line saying what to use instead; None when there is a terminal."""
    if sys.stdout.isatty():
        return None
    print(
        f"gpumon: {command} needs a terminal (stdout is not one); "
        "for text use `gpumon snapshot HOST` or `gpumon check HOST`",
        file=sys.stderr,
    )
    return EXIT_USAGE


def cmd_dashboard(args: argparse.Namespace, config: Config) -> int:
    names = list(dict.fromkeys(args.hosts)) or list(config.hosts)
    if not names:
        where = f" in {config.path}" if config.path else ""
        print(f"gpumon: no hosts configured{where}; {HOW_TO_START}", file=sys.stderr)
        return EXIT_USAGE
    meant = words.suggestion(names[0], config.hosts) if args.hosts else None
    if meant is not None:
        print(
            f"gpumon: {names[0]!r} is not a command or a known host; did you mean "
            f"`gpumon {meant}`? (for a host of that name, write it as user@{names[0]} or "
            "configure it)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    refused = _no_terminal("the dashboard")
    if refused is not None:
        return refused
    hosts = [resolve_host(config, name) for name in names]
    from gpumon.tui.app import run_dashboard

    return run_dashboard(
        hosts,
        sim=partial(sim_settings, args),
        theme=args.theme,
        read_only=args.read_only,
        interval=args.interval,
        bell=not args.no_bell,
        notify=config.notify,
        notes=args.notes,
        usage=config.usage,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    """``gpumon replay FILE``: exit 2 with one line when FILE is not a usable recording."""
    from pathlib import Path

    from gpumon.backends.monitor import ReplaySource, replay_monitor
    from gpumon.backends.recording import RecordingError

    try:
        replay = ReplaySource.from_file(Path(args.file))
    except (RecordingError, ValueError) as e:
        print(f"gpumon replay: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"gpumon replay: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    for problem in replay.recording.problems:
        print(f"gpumon replay: {args.file}: {problem}", file=sys.stderr)
    refused = _no_terminal("replay")
    if refused is not None:
        return refused
    replay.set_paused(args.paused)
    from gpumon.tui.app import GpumonApp, run_app

    monitor = replay_monitor(replay)
    return run_app(GpumonApp([monitor], theme=args.theme, read_only=True, bell=False))


def _demo_alone(command: Subcommand, args: Any) -> bool:
    """Whether the command acts on the demo alone (``gpumon demo``, ``snapshot demo``,
    ``check demo``, ``fleet demo``: its row's ``demo_alone`` argument), which needs no
    config."""
    if command.demo_alone is None:
        return False
    named = getattr(args, command.demo_alone)
    if isinstance(named, list):
        return list(dict.fromkeys(named)) == ["demo"]
    return bool(named == "demo")


def _config_for(command: Subcommand, args: Any) -> Config:
    """The config. For the demo alone, a config gpumon refuses is a warning (stderr, and
    on the screen: ``args.notes``) and the demo goes on without it; else ConfigError."""
    args.notes = []
    try:
        return load_config(args.config)
    except ConfigError as e:
        if not _demo_alone(command, args):
            raise
        note = f"{e}; not used: the demo needs no config"
        print(f"gpumon: warning: {note}", file=sys.stderr)
        args.notes.append(note)
        return Config(path=None)


def _fleet_check(command: Subcommand, args: Any) -> bool:
    """``gpumon fleet --check`` is a Nagios plugin too: its failures are UNKNOWN (3)."""
    return command.name == "fleet" and bool(getattr(args, "check", False))


def _parse(argv: list[str]) -> tuple[Subcommand, argparse.Namespace]:
    """The table's row for ``argv``'s first word (the options every command shares may
    come before it; none of the table's words: the dashboard) and its parsed arguments."""
    pre = argparse.ArgumentParser(add_help=False)
    common_options(pre)
    _, rest = pre.parse_known_args(argv)
    command = subcommands.find(rest[0]) if rest else None
    if command is None:
        return DASHBOARD, build_parser(DASHBOARD).parse_args(argv)
    i = argv.index(command.name)
    return command, build_parser(command).parse_args(argv[:i] + argv[i + 1 :])


def runner(command: Subcommand) -> Callable[..., int]:
    """The function the row ``command`` names (``"module:function"`` of this package),
    imported now."""
    import importlib

    module, _, name = command.run.partition(":")
    found = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    return cast("Callable[..., int]", found)


def run(argv: Sequence[str]) -> int:
    """Run the command line ``argv`` (``gpumon``'s words); its exit status. ``launch.main``
    is the entry point (the early agent, a closed pipe)."""
    command, args = _parse(list(argv))
    function = runner(command)
    try:
        if not command.config:
            return function(args)
        config = _config_for(command, args)
        return function(args, config)
    except GpumonError as e:  # a bad config, an unreachable host, ...: one line, no traceback
        if command.name == "check":  # a Nagios plugin: its verdict on stdout, UNKNOWN (3)
            print(f"UNKNOWN: {e}")
            return EXIT_UNKNOWN
        print(f"gpumon: {e}", file=sys.stderr)
        return EXIT_UNKNOWN if _fleet_check(command, args) else EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
