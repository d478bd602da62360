"""The options every gpumon command shares, and the simulator's settings read from them.

Here, not in ``command_line``, so that the subcommands' modules (``restart``, ``torch``,
``watch``) add them without importing the command line that imports them. Light at import
time, like the command line.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumon.backends.sim import SimSettings

__all__ = ["common_options", "sim_settings", "version_text"]


def common_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every command takes: ``--read-only``, ``--config`` and the demo
    machine's (``--scenario``, ``--demo-speed``, ``--demo-time``, ``--demo-hold``,
    ``--demo-seed``)."""
    parser.add_argument(
        "--read-only", action="store_true", help="refuse every action that changes a machine"
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file (else $GPUMON_CONFIG, else $XDG_CONFIG_HOME/gpumon/config.toml)",
    )
    demo = parser.add_argument_group("demo machine (host name 'demo')")
    demo.add_argument(
        "--scenario",
        default="training-oom",
        choices=(
            "training-oom",
            "sglang",
            "idle",
            "stall",
            "slow",
            "hang",
        ),
        help="what the simulated CT200 runs (default: training-oom)",
    )
    demo.add_argument(
        "--demo-speed",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="scenario clock speed (default 1)",
    )
    demo.add_argument(
        "--demo-time",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start the scenario clock at SECONDS (e.g. 45: just before the OOM)",
    )
    demo.add_argument(
        "--demo-hold",
        metavar="FILE",
        help="hold the scenario clock at --demo-time until FILE exists, then run on from there",
    )
    demo.add_argument("--demo-seed", type=int, default=0, metavar="N", help="noise seed")
    demo.add_argument("--demo-frozen", action="store_true", help=argparse.SUPPRESS)


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
