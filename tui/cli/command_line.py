"""The ``gpumon`` command.

    gpumon [HOST ...]             the dashboard (``demo`` is the built-in simulated CT200;
                                  no HOST: every configured host)
    gpumon replay FILE            a flight recording in the dashboard (pause, step, speed)
    gpumon snapshot HOST [--json|--wide]  one complete sample, as a table (80 columns;
                                  --wide: whole lines) or JSON
    gpumon check HOST             one summary line; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
    gpumon config check|path      validate the config / say where it is read from
    gpumon restart HOST JOB       stop, wait for free GPUs, start, verify (asks first)
    gpumon doctor HOST [--json]   check the target's torch / CUDA environment
    gpumon swap-torch HOST VARIANT  move torch between CUDA builds, verified, reversible
    gpumon watch [HOST ...]       headless: alerts to the [notify.*] notifiers, /metrics
    gpumon notify test|status     test a notifier, show the outbox
    gpumon fleet [NAME] [--json|--check]  many nodes from Prometheus, sorted by trouble
    gpumon bundle HOST [--incident KEY] [-o FILE]  an incident's evidence, scrubbed, as .tar.gz

Kept light at import time (no Textual, no asyncssh): headless commands start fast. The
subcommand words are listed in ``words`` (a typo of one is answered "did you mean").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpumon.backends.config import Config, ConfigError, HostConfig, load_config, resolve_host
from gpumon.backends.errors import GpumonError
from gpumon.tui.cli import bundle as cli_bundle
from gpumon.tui.cli import fleet as cli_fleet
from gpumon.tui.cli import torch as cli_torch
from gpumon.tui.cli import watch as cli_watch
from gpumon.tui.cli import words
from gpumon.tui.cli.options import common_options, sim_settings, version_text
from gpumon.tui.cli.restart import build_parser as restart_parser
from gpumon.tui.cli.restart import cmd_restart

if TYPE_CHECKING:
    from gpumon.backends.monitor import HostMonitor
    from gpumon.backends.sim import SimSettings

COMMANDS = ("snapshot", "check", "config", "restart", "replay", "fleet", "bundle")
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
# How long snapshot/check wait after the first GPU sample for the other sources' first
# round (the Proxmox host's process list, SGLang discovery and two observations of each
# server, the followed logs) and for job rates: the monitor's FIRST_ROUNDS_S, said here
# for --help without importing the monitor at start-up (a test holds them equal).
FIRST_ROUNDS_S = 10.0
CHECK_WINDOW_S = 5.0  # how long check watches: trends and silences need more than one sample
INTERVAL_RANGE = (0.1, 3600.0)  # seconds, as the config's `interval`
HOW_TO_START = (
    "try `gpumon demo` (a simulated GPU machine) or `gpumon local` (this machine), "
    "or add a [hosts.NAME] table to the config (`gpumon config path` says where)"
)


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked (importlib.metadata costs every other
    command ~12 ms of start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(version_text())
        parser.exit()


def _interval(text: str) -> float:
    """``--interval``: seconds between samples, 0.1 to 3600 (what the config allows)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    low, high = INTERVAL_RANGE
    if not low <= value <= high:  # also NaN
        raise argparse.ArgumentTypeError(f"{text} s is out of range: {low:g} to {high:g} s")
    return value


def _build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    main = argparse.ArgumentParser(
        prog="gpumon",
        description="Watch GPU machines over SSH: memory, OOM warnings, workloads. "
        "Commands: snapshot, check, config, restart, doctor, swap-torch, replay, "
        "watch, notify, fleet, bundle "
        "(see `gpumon COMMAND --help`).",
    )
    main.add_argument(
        "hosts",
        nargs="*",
        metavar="HOST",
        help="configured host name, user@host[:port], ssh alias, 'local' or 'demo' "
        "(none: every configured host)",
    )
    main.add_argument("--version", action=_VersionAction)
    main.add_argument("--theme", help="colour theme (remembered)")
    main.add_argument(
        "--interval",
        type=_interval,
        metavar="SECONDS",
        help="sampling interval, 0.1 to 3600 s (overrides the config)",
    )
    main.add_argument(
        "--no-bell", action="store_true", help="no terminal bell on a new critical alert"
    )
    common_options(main)
    subs: dict[str, argparse.ArgumentParser] = {}
    snap = subs["snapshot"] = argparse.ArgumentParser(
        prog="gpumon snapshot", description="Print one complete sample of HOST."
    )
    snap.add_argument("host", metavar="HOST")
    snap.add_argument("--json", action="store_true", help="JSON (keys in docs/json.md)")
    snap.add_argument(
        "--wide",
        action="store_true",
        help="the text without the 80-column limit: whole commands and messages on one "
        "line each (--json has every value too)",
    )
    snap.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="give up after SECONDS without a GPU sample (default 20; sooner when no "
        "retry can help: no nvidia-smi, the driver's error); after it, the other "
        f"sources (host-side processes, SGLang servers, logs) get {FIRST_ROUNDS_S:g} s in all "
        "to answer once, and any that did not are named (`incomplete`)",
    )
    check = subs["check"] = argparse.ArgumentParser(
        prog="gpumon check",
        description="One summary line; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
    )
    check.add_argument("host", metavar="HOST")
    check.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="give up after SECONDS without a GPU sample (default 20; sooner when no "
        "retry can help: no nvidia-smi, the driver's error); the other sources "
        f"get {FIRST_ROUNDS_S:g} s in all after it to answer once (those that did not are "
        "named on the line)",
    )
    check.add_argument(
        "--window",
        type=float,
        default=CHECK_WINDOW_S,
        metavar="SECONDS",
        help="watch this long after the first sample, so time-to-full and stale-data "
        f"rules can fire (default {CHECK_WINDOW_S:g}; 0: one sample)",
    )
    cfg = subs["config"] = argparse.ArgumentParser(
        prog="gpumon config", description="Validate the config, or show where it is read."
    )
    cfg.add_argument("action", choices=("check", "path"))
    subs["restart"] = restart_parser()
    subs["fleet"] = cli_fleet.build_parser()
    subs["bundle"] = cli_bundle.build_parser()
    for p in subs.values():
        common_options(p)
    replay = subs["replay"] = argparse.ArgumentParser(
        prog="gpumon replay",
        description="Play a flight recording (written around a critical alert, see "
        "$XDG_STATE_HOME/gpumon/recordings/) in the dashboard: p pauses, . steps one "
        "sample while paused, ] and [ change the speed.",
    )
    replay.add_argument("file", metavar="FILE", help="a recording (.jsonl.gz)")
    replay.add_argument("--theme", help="colour theme (remembered)")
    replay.add_argument(
        "--paused", action="store_true", help="start paused, before the first sample"
    )
    return main, subs


def _demo_only(args: argparse.Namespace, host: HostConfig) -> SimSettings | None:
    """The simulator's settings for the demo host, None for any other (its import is
    start-up time a one-shot command on a real host does not spend)."""
    return sim_settings(args) if host.kind == "demo" else None


async def _one_sample(
    host: HostConfig,
    sim: SimSettings | None,
    timeout: float,
    *,
    rates: bool = True,
    window: float = 0.0,
) -> tuple[HostMonitor, float, list[str]]:
    """Connect once, wait (``timeout``) for a GPU sample (no longer once the sampler failed
    for good: ``HostMonitor.final_failure``), then up to ``FIRST_ROUNDS_S``
    in all for every other source's first round (``HostMonitor.waiting_for``: the
    process lists, the Proxmox host's included, SGLang discovery and two observations of
    each server, the followed logs) and, with ``rates``, the jobs' throughput; keep
    watching for ``window`` seconds after the first sample (``check``: the alert rules
    see a trend, a silence). Returns the monitor, the moment observing ended (ages and
    verdicts are judged then, not after the stop, which may wait for the target's
    processes to exit) and the sources that did not answer in time, in words
    (``"host processes: no answer in 10 s"``): never silently left out."""
    from gpumon.backends.model import ConnState
    from gpumon.backends.monitor import make_monitor

    monitor = make_monitor(host, sim, reconnect=False)
    monitor.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    first_sample_at: float | None = None
    waited = 0.0
    try:
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
                if (waited >= FIRST_ROUNDS_S or (answered and rated)) and waited >= window:
                    break
                until = window if answered and rated else max(window, FIRST_ROUNDS_S)
                left = min(left, max(first_sample_at + until - loop.time(), 0.05))
            await monitor.wait_for_update(min(left, 0.5))
        observed_at = time.time()
    finally:
        await monitor.stop()
    incomplete = [] if monitor.latest is None else monitor.waiting_for()
    said = f"{min(waited, FIRST_ROUNDS_S):.0f} s"
    return monitor, observed_at, [f"{source}: {what} in {said}" for source, what in incomplete]


def _cmd_snapshot(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.monitor import snapshot_json, snapshot_table
    from gpumon.backends.monitor.report import TEXT_WIDTH

    host = resolve_host(config, args.host)
    run = _one_sample(host, _demo_only(args, host), args.timeout)
    monitor, now, incomplete = asyncio.run(run)
    if args.json:
        print(json.dumps(snapshot_json(monitor, now, incomplete), indent=2))
    else:
        print(snapshot_table(monitor, incomplete, width=None if args.wide else TEXT_WIDTH))
    return 0 if monitor.latest is not None else EXIT_UNKNOWN


def _cmd_check(args: argparse.Namespace, config: Config) -> int:
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
    run = _one_sample(host, _demo_only(args, host), args.timeout, rates=False, window=args.window)
    monitor, _, incomplete = asyncio.run(run)
    code, line = check_verdict(monitor, incomplete)
    print(line)
    return int(code)


def _cmd_config(args: argparse.Namespace, config: Config) -> int:
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


def _cmd_dashboard(args: argparse.Namespace, config: Config) -> int:
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
        sim=sim_settings(args),
        theme=args.theme,
        read_only=args.read_only,
        interval=args.interval,
        bell=not args.no_bell,
        notify=config.notify,
        notes=args.notes,
    )


def _cmd_replay(args: argparse.Namespace) -> int:
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


def _demo_alone(command: str | None, args: Any) -> bool:
    """Whether the command acts on the demo alone (``gpumon demo``, ``snapshot demo``,
    ``check demo``, ``fleet demo``), which needs no config."""
    if command is None:
        return list(dict.fromkeys(args.hosts)) == ["demo"]
    if command in ("snapshot", "check"):
        return bool(args.host == "demo")
    return command == "fleet" and args.name == "demo"


def _config_for(command: str | None, args: Any) -> Config:
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


def _fleet_check(command: str | None, args: Any) -> bool:
    """``gpumon fleet --check`` is a Nagios plugin too: its failures are UNKNOWN (3)."""
    return command == "fleet" and bool(getattr(args, "check", False))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    main_parser, subs = _build_parsers()
    pre = argparse.ArgumentParser(add_help=False)
    common_options(pre)
    known, rest = pre.parse_known_args(argv)
    if rest and rest[0] in cli_torch.COMMANDS:
        return cli_torch.main(argv, read_only=known.read_only)
    if rest and rest[0] in cli_watch.COMMANDS:
        return cli_watch.main(argv)
    command = rest[0] if rest and rest[0] in COMMANDS else None
    args: Any
    if command is not None:
        i = argv.index(command)
        args = subs[command].parse_args(argv[:i] + argv[i + 1 :])
    else:
        args = main_parser.parse_args(argv)
    if command == "replay":  # a recording needs no config
        try:
            return _cmd_replay(args)
        except KeyboardInterrupt:
            return 130
    try:
        config = _config_for(command, args)
        handler = {
            "snapshot": _cmd_snapshot,
            "check": _cmd_check,
            "config": _cmd_config,
            "restart": cmd_restart,
            "fleet": cli_fleet.cmd_fleet,
            "bundle": cli_bundle.cmd_bundle,
            None: _cmd_dashboard,
        }[command]
        return handler(args, config)
    except GpumonError as e:  # a bad config, an unreachable host, ...: one line, no traceback
        if command == "check":  # a Nagios plugin: its verdict on stdout, UNKNOWN (3)
            print(f"UNKNOWN: {e}")
            return EXIT_UNKNOWN
        print(f"gpumon: {e}", file=sys.stderr)
        return EXIT_UNKNOWN if _fleet_check(command, args) else EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
