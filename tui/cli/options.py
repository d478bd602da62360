"""The parsers, built from the subcommand table's rows (``subcommands``), and the
simulator's settings read from the options every command shares. Light at import time,
like the command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpumon.tui.cli.subcommands import COMMON, VERSION, Arg, Subcommand

if TYPE_CHECKING:
    from gpumon.backends.sim import SimSettings

__all__ = ["add_args", "build_parser", "common_options", "sim_settings", "version_text"]


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked (importlib.metadata costs every other
    command ~12 ms of start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
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


def add_args(parser: argparse.ArgumentParser, args: Sequence[Arg]) -> None:
    """Add the rows ``args`` to ``parser`` in their order, each in its group."""
    groups: dict[str, Any] = {}
    for row in args:
        target: Any = parser
        if row.group is not None:
            if row.group not in groups:
                groups[row.group] = parser.add_argument_group(row.group)
            target = groups[row.group]
        if row.exclusive is not None:
            key = f"exclusive: {row.exclusive}"
            if key not in groups:
                groups[key] = target.add_mutually_exclusive_group()
            target = groups[key]
        options = dict(row.options)
        if options.get("action") == VERSION:
            options["action"] = _VersionAction
        if row.hidden:
            options["help"] = argparse.SUPPRESS
        target.add_argument(*row.flags, **options)


def common_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every command takes (``subcommands.COMMON``): ``--read-only``,
    ``--config`` and the demo machine's (``--scenario``, ``--demo-speed``, ...)."""
    add_args(parser, COMMON)


def build_parser(command: Subcommand) -> argparse.ArgumentParser:
    """``command``'s parser (``subcommands.DASHBOARD``: the main one), from its rows."""
    parser = argparse.ArgumentParser(prog=command.prog, description=command.help_text())
    add_args(parser, (*command.args, *(COMMON if command.common else ())))
    return parser


def sim_settings(args: argparse.Namespace) -> SimSettings:
    """The simulator's settings from the demo options ``common_options`` added (imports
    the monitor: call it only for the demo host)."""
    from gpumon.backends.monitor import demo_settings

    return demo_settings(
        args.scenario,
        seed=args.demo_seed,
        speed=args.demo_speed,
        demo_time=args.demo_time,
        frozen=args.demo_frozen,
        hold=args.demo_hold,
    )


def version_text() -> str:
    """``gpumon X.Y.Z`` (``--version``, a bundle's version.txt), looked up when asked."""
    from gpumon.backends.bundle.version import gpumon_version

    return gpumon_version()
