"""The ``gpumon`` command line's one table: every subcommand, its arguments and the function
that runs it, as rows. The parsers (``options.build_parser``), the dispatch
(``command_line.run``), the "did you mean" of a mistyped word (``words``), the main
help's list of commands and the early agent's guess (``launch``: the commands that start
it and which words are an option's value, ``value_options``) are derived from it. A new
subcommand is one ``Subcommand`` row here and the function that runs it.

Plain data, light at import (no argparse, no backends): ``launch`` reads it before the
early agent of ``check local`` starts. An argument is an ``Arg``: what argparse's
``add_argument`` takes, and its group. The function that runs a command is named
``"module:function"`` in ``gpumon.tui.cli``, imported when the command runs.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "COMMANDS_SLOT",
    "COMMON",
    "DASHBOARD",
    "SUBCOMMANDS",
    "Arg",
    "Subcommand",
    "early_agent",
    "find",
    "names",
    "value_flags",
    "value_options",
]

# How long snapshot/check wait after the first GPU sample for the other sources' first
# round (the Proxmox host's process list, SGLang discovery and two observations of each
# server, the followed logs) and for job rates: the monitor's FIRST_ROUNDS_S, said here
# for --help without importing the monitor at start-up (a test holds them equal).
FIRST_ROUNDS_S = 10.0
# ``check`` watches on past its window, up to this many windows in all, while the window
# holds too few samples for the time-to-full rule (a loaded host's sampler)
JUDGE_WINDOWS = 3.0
CHECK_WINDOW_S = 5.0  # how long check watches: trends and silences need more than one sample
INTERVAL_RANGE = (0.1, 3600.0)  # seconds, as the config's `interval`
VARIANTS = ("cu126", "cu128", "cu129", "cu130", "cu132", "cpu")  # swap-torch's examples
# The simulator's scenarios, spelled out so that a parser does not import the simulator
# (a test holds them equal to ``sim.scenario.SCENARIOS``).
SCENARIOS = ("training-oom", "sglang", "idle", "stall", "slow", "hang", "vllm", "mig")
COMMANDS_SLOT = "{commands}"  # in a description: the table's words, in its order
VERSION = "gpumon-version"  # ``--version``'s action: the version looked up when asked
# The actions whose option takes no value (the next word is not its value).
FLAG_ACTIONS = frozenset(
    ("store_true", "store_false", "store_const", "append_const", "count", "help", VERSION)
)


# Plain classes, not NamedTuples or dataclasses: ``launch`` imports this module before the
# early agent starts, and those cost a millisecond there.
class Arg:
    """One argument: ``add_argument``'s words (``flags``) and keywords (``options``), and
    where it goes (an argument group by title, a mutually exclusive group by name;
    ``hidden``: not in --help)."""

    __slots__ = ("exclusive", "flags", "group", "hidden", "options")

    def __init__(
        self,
        *flags: str,
        group: str | None = None,
        exclusive: str | None = None,
        hidden: bool = False,
        **options: Any,
    ) -> None:
        self.flags = flags
        self.options = options
        self.group = group
        self.exclusive = exclusive
        self.hidden = hidden

    def takes_value(self) -> bool:
        """An option whose next word is its value (``--timeout 5``)."""
        return (
            self.flags[0].startswith("-")
            and self.options.get("action") not in FLAG_ACTIONS
            and self.options.get("nargs") != 0
        )


class Subcommand:
    """A subcommand: its word, its --help description, its own arguments, the function that
    runs it (``"module:function"``: ``(args, config) -> exit status``; ``(args)`` when
    ``config`` is False), whether it takes the options every command shares (``common``),
    whether ``WORD local`` starts the agent before gpumon's imports (``early_agent``:
    ``launch``), and the argument that, naming ``demo`` alone, lets it run on a config
    gpumon refuses (``demo_alone``: the demo needs none)."""

    __slots__ = (
        "args",
        "common",
        "config",
        "demo_alone",
        "description",
        "early_agent",
        "name",
        "run",
    )

    def __init__(
        self,
        name: str,
        description: str,
        args: tuple[Arg, ...],
        run: str,
        *,
        common: bool = True,
        config: bool = True,
        early_agent: bool = False,
        demo_alone: str | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.args = args
        self.run = run
        self.common = common
        self.config = config
        self.early_agent = early_agent
        self.demo_alone = demo_alone

    def __repr__(self) -> str:
        return f"Subcommand({self.name!r})"

    @property
    def prog(self) -> str:
        return f"gpumon {self.name}".rstrip()

    def help_text(self) -> str:
        """The --help description, the table's words in place of ``COMMANDS_SLOT``."""
        return self.description.replace(COMMANDS_SLOT, ", ".join(names()))


def _interval(text: str) -> float:
    """``--interval``: seconds between samples, 0.1 to 3600 (what the config allows)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    low, high = INTERVAL_RANGE
    if not low <= value <= high:  # also NaN
        raise argparse.ArgumentTypeError(f"{text} s is out of range: {low:g} to {high:g} s")
    return value


def _variant(text: str) -> str:
    """A variant name the index may serve (the plan asks the index which exist)."""
    import argparse
    import re

    if re.fullmatch(r"cu[0-9]{3}|cpu", text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not cuNNN or cpu")
    return text


DEMO = "demo machine (host name 'demo')"
COMMON: tuple[Arg, ...] = (
    Arg("--read-only", action="store_true", help="refuse every action that changes a machine"),
    Arg(
        "--config",
        metavar="FILE",
        help="config file (else $GPUMON_CONFIG, else $XDG_CONFIG_HOME/gpumon/config.toml)",
    ),
    Arg(
        "--scenario",
        group=DEMO,
        default="training-oom",
        choices=SCENARIOS,
        help="what the simulated CT200 runs (default: training-oom)",
    ),
    Arg(
        "--demo-speed",
        group=DEMO,
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="scenario clock speed (default 1)",
    ),
    Arg(
        "--demo-time",
        group=DEMO,
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start the scenario clock at SECONDS (e.g. 45: just before the OOM)",
    ),
    Arg(
        "--demo-hold",
        group=DEMO,
        metavar="FILE",
        help="hold the scenario clock at --demo-time until FILE exists, then run on from there",
    ),
    Arg("--demo-seed", group=DEMO, type=int, default=0, metavar="N", help="noise seed"),
    Arg("--demo-frozen", group=DEMO, action="store_true", hidden=True),
)

THEME = Arg("--theme", help="colour theme (remembered)")
HOST = Arg("host", metavar="HOST")


def _json(what: str, **more: Any) -> Arg:
    """``--json``: print ``what`` as JSON instead of text."""
    return Arg("--json", action="store_true", help=what, **more)


def _plan(*yes: str, yes_help: str = "do not ask for confirmation") -> tuple[Arg, Arg]:
    """The options of a command that shows its plan and asks before it changes a machine:
    ``--yes`` (``yes``: its flags) and ``--dry-run``."""
    return (
        Arg(*yes, action="store_true", help=yes_help),
        Arg("--dry-run", action="store_true", help="print the plan, change nothing"),
    )


def _gpu_wait(after: str) -> Arg:
    """snapshot's and check's ``--timeout``: the wait for the first GPU sample, then the
    other sources' ``FIRST_ROUNDS_S``."""
    return Arg(
        "--timeout",
        type=float,
        default=20.0,
        help="give up after SECONDS without a GPU sample (default 20; sooner when no "
        f"retry can help: no nvidia-smi, the driver's error){after}",
    )


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "snapshot",
        "Print one complete sample of HOST.",
        (
            HOST,
            _json("JSON (keys in docs/json.md)"),
            Arg(
                "--wide",
                action="store_true",
                help="the text without the 80-column limit: whole commands and messages on "
                "one line each (--json has every value too)",
            ),
            _gpu_wait(
                "; after it, the other sources (host-side processes, SGLang servers, logs) "
                f"get {FIRST_ROUNDS_S:g} s in all to answer once, and any that did not are "
                "named (`incomplete`)"
            ),
        ),
        "command_line:cmd_snapshot",
        # ``snapshot local`` runs the agent's round in gpumon's own process
        # (``monitor.oneshot``): an early agent would be an interpreter for nothing
        demo_alone="host",
    ),
    Subcommand(
        "check",
        "One summary line; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
        (
            HOST,
            _gpu_wait(
                f"; the other sources get {FIRST_ROUNDS_S:g} s in all after it to answer once "
                "(those that did not are named on the line)"
            ),
            Arg(
                "--window",
                type=float,
                default=CHECK_WINDOW_S,
                metavar="SECONDS",
                help="watch this long after the first sample, so time-to-full and stale-data "
                f"rules can fire (default {CHECK_WINDOW_S:g}; 0: one sample)",
            ),
        ),
        "command_line:cmd_check",
        early_agent=True,
        demo_alone="host",
    ),
    Subcommand(
        "config",
        "Validate the config, or show where it is read.",
        (Arg("action", choices=("check", "path")),),
        "command_line:cmd_config",
    ),
    Subcommand(
        "restart",
        "Restart a configured job: stop it, wait for its GPUs to free their memory, start it "
        "detached, and check that it runs.",
        (
            HOST,
            Arg("job", metavar="JOB"),
            Arg(
                "--param",
                action="append",
                default=[],
                metavar="NAME=VALUE",
                help="override one of the job's params for this start (repeatable)",
            ),
            *_plan(
                "--yes",
                "-y",
                yes_help="do not ask for confirmation, not even to restart beside the "
                "incident's cause",
            ),
            Arg(
                "--free-timeout",
                type=float,
                default=120.0,
                metavar="SECONDS",
                help="how long to wait for the GPUs to have room for the job (default 120)",
            ),
            Arg(
                "--timeout",
                type=float,
                default=30.0,
                metavar="SECONDS",
                help="how long to wait for the host's first GPU sample (default 30)",
            ),
        ),
        "restart:cmd_restart",
    ),
    Subcommand(
        "doctor",
        "Check HOST's torch / CUDA stack without changing anything. "
        "Exit 0 no problem, 1 a problem, 3 host unreachable.",
        (
            HOST,
            _json("JSON: host, python, checks"),
            Arg(
                "--gpus",
                action="store_true",
                help="only verify the GPUs (after a reset or reboot): every GPU listed, ECC "
                "clean, nothing pending, links at full width, dcgmi diag -r 1 where dcgmi "
                "exists; changes nothing; exit 0 pass, 1 fail",
            ),
        ),
        "torch:cmd_doctor",
    ),
    Subcommand(
        "swap-torch",
        "Move HOST's venv to another torch CUDA variant (index: the host's "
        "torch_index + /VARIANT), verify it, roll back on failure. Exit 0 swapped, "
        "1 rolled back / unchanged, 2 refused, 3 unreachable, 4 rollback failed.",
        (
            HOST,
            Arg(
                "variant",
                metavar="VARIANT",
                type=_variant,
                help=f"cuNNN or cpu, as the index serves them (e.g. {', '.join(VARIANTS)})",
            ),
            Arg("--version", metavar="V", help="torch release (default: the installed)"),
            *_plan("--yes"),
            Arg(
                "--force",
                action="store_true",
                help="override refusals: running users, GPU/driver rules, no GPU, not a venv",
            ),
        ),
        "torch:cmd_swap_torch",
    ),
    Subcommand(
        "replay",
        "Play a flight recording (written around a critical alert, see "
        "$XDG_STATE_HOME/gpumon/recordings/) in the dashboard: p pauses, . steps one "
        "sample while paused, ] and [ change the speed.",
        (
            Arg("file", metavar="FILE", help="a recording (.jsonl.gz)"),
            THEME,
            Arg("--paused", action="store_true", help="start paused, before the first sample"),
        ),
        "command_line:cmd_replay",
        common=False,
        config=False,  # a recording needs no config
    ),
    Subcommand(
        "watch",
        "Watch hosts without a dashboard: the same alerts, auto-restarts and "
        "flight recordings; alerts go to the [notify.*] notifiers (docs/on-call.md).",
        (
            Arg("hosts", nargs="*", metavar="HOST", help="default: every configured host"),
            Arg("--log-format", choices=("text", "json"), default="text"),
            Arg(
                "--metrics-port",
                type=int,
                metavar="PORT",
                help="serve Prometheus /metrics here (default: [watch] metrics_port, 9947; 0: off)",
            ),
            Arg("--metrics-host", metavar="ADDR", help="listen address (127.0.0.1)"),
            Arg(
                "--demo-auto-restart",
                action="store_true",
                help="the demo's drafter restarts by itself after its OOM (auto_restart = true)",
            ),
        ),
        "watch:cmd_watch",
    ),
    Subcommand(
        "notify",
        "Test a notifier, or show the outbox.",
        (
            Arg("action", choices=("test", "status")),
            Arg("name", nargs="?", metavar="NAME", help="the notifier (test)"),
            _json("status as JSON"),
        ),
        "watch:cmd_notify",
    ),
    Subcommand(
        "fleet",
        "Many GPU nodes from Prometheus (dcgm-exporter, gpumon watch), sorted by "
        "trouble; Enter opens a node's live dashboard. Configure [fleet.NAME] in the config.",
        (
            Arg(
                "name",
                nargs="?",
                metavar="NAME",
                help="a [fleet.NAME] of the config, or 'demo' (a simulated fleet, no Prometheus)",
            ),
            _json("print one refresh as JSON and exit", exclusive="mode"),
            Arg(
                "--check",
                exclusive="mode",
                action="store_true",
                help="one line; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN",
            ),
            THEME,
        ),
        "fleet:cmd_fleet",
        demo_alone="name",
    ),
    Subcommand(
        "usage",
        "GPU-hours used and held idle (gpu_idle_held's test), energy in kWh and its cost "
        "([usage] price_per_kwh, currency) of HOST, per container, user, job or GPU, and "
        "who held GPUs idle most; from what `gpumon watch` and the dashboard recorded "
        "(docs/usage.md).",
        (
            Arg("host", metavar="HOST"),
            Arg(
                "--since",
                default="24h",
                metavar="SPAN|DATE",
                help="from this long ago (30m, 24h, 7d) or this local date or time "
                "(2026-12-01, 2026-12-01T08:00); default 24h",
            ),
            Arg(
                "--by",
                choices=("container", "user", "job", "gpu"),
                default="container",
                help="one line per container (the default), user, job or GPU",
            ),
            Arg("--json", exclusive="format", action="store_true", help="JSON (docs/usage.md)"),
            Arg("--csv", exclusive="format", action="store_true", help="CSV, a header line first"),
        ),
        "usage:cmd_usage",
        demo_alone="host",
    ),
    Subcommand(
        "bundle",
        "Write one incident's evidence (timeline, snapshots, flight recording, "
        "nvidia-smi -q, kernel log lines, log tails, SGLang pages, doctor, config, audit "
        "log) to a scrubbed .tar.gz (mode 0600) for the hand-over; index.txt inside lists "
        "every file.",
        (
            Arg("host", metavar="HOST", nargs="?", help="the host (not with --replay)"),
            Arg(
                "--incident",
                exclusive="which",
                metavar="KEY",
                help="the incident holding this alert key (snapshot --json, the alert history)",
            ),
            Arg(
                "--last",
                exclusive="which",
                action="store_true",
                help="the newest incident (the default)",
            ),
            Arg(
                "--replay",
                metavar="RECORDING",
                help="bundle a flight recording (.jsonl.gz) instead of a host",
            ),
            Arg(
                "-o",
                "--output",
                metavar="FILE",
                help="where to write (default: gpumon-bundle-HOST-DATE.tar.gz here)",
            ),
            Arg(
                "--time",
                type=float,
                default=60.0,
                metavar="SECONDS",
                help="the time budget for collecting (default 60); what did not arrive is "
                "listed in index.txt",
            ),
        ),
        "bundle:cmd_bundle",
    ),
)
# No word: the dashboard on HOST ... (every configured host without one).
DASHBOARD = Subcommand(
    "",
    "Watch GPU machines over SSH: memory, OOM warnings, workloads. "
    f"Commands: {COMMANDS_SLOT} (see `gpumon COMMAND --help`).",
    (
        Arg(
            "hosts",
            nargs="*",
            metavar="HOST",
            help="configured host name, user@host[:port], ssh alias, 'local' or 'demo' "
            "(none: every configured host)",
        ),
        Arg("--version", action=VERSION, help="show the version and exit"),
        THEME,
        Arg(
            "--interval",
            type=_interval,
            metavar="SECONDS",
            help="sampling interval, 0.1 to 3600 s (overrides the config)",
        ),
        Arg("--no-bell", action="store_true", help="no terminal bell on a new critical alert"),
    ),
    "command_line:cmd_dashboard",
    demo_alone="hosts",
)


# The table's views below read it when called, so that nothing derived from it can lag
# behind a row (the tests add one).
def names() -> tuple[str, ...]:
    """The subcommands' words, in the table's order."""
    return tuple(s.name for s in SUBCOMMANDS)


def find(word: str | None) -> Subcommand | None:
    """The subcommand ``word`` names, else None."""
    return next((s for s in SUBCOMMANDS if s.name == word), None)


def value_flags(command: Subcommand) -> frozenset[str]:
    """The options of ``command`` (the shared ones included) whose next word is a value."""
    args = (*command.args, *(COMMON if command.common else ()))
    return frozenset(flag for a in args if a.takes_value() for flag in a.flags)


def early_agent() -> tuple[str, ...]:
    """The words whose ``WORD local`` starts the agent before gpumon's imports."""
    return tuple(s.name for s in SUBCOMMANDS if s.early_agent)


def value_options() -> frozenset[str]:
    """The options of those commands whose next word is their value, not the host
    (``launch.early_agent_wanted``)."""
    return frozenset(flag for s in SUBCOMMANDS if s.early_agent for flag in value_flags(s))
