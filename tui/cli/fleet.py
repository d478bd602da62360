"""``gpumon fleet [NAME] [--json | --check]``: the fleet view on Prometheus, or its verdict
without a terminal.

    gpumon fleet [NAME]          the fleet screen (NAME may be left out with one fleet)
    gpumon fleet NAME --json     one refresh, one object per node (keys in docs/fleet.md)
    gpumon fleet NAME --check    Nagios: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
    gpumon fleet demo [...]      a simulated fleet of 50 nodes: no config, no Prometheus

``demo`` is the built-in simulated fleet (``backends/fleet/demo.py``) unless the config
has a ``[fleet.demo]`` of its own (a fleet so named before the demo existed keeps working).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from gpumon.backends.config import Config, ConfigError, FleetConfig

DEMO = "demo"

if TYPE_CHECKING:
    from gpumon.backends.fleet import FleetSnapshot, FleetSource


def pick_fleet(config: Config, name: str | None) -> FleetConfig:
    """The fleet ``name`` names, or the only one; ConfigError listing the fleets otherwise."""
    known = ", ".join(sorted(config.fleets)) or "none configured"
    where = str(config.path) if config.path else "(no config file)"
    if name is None:
        if len(config.fleets) == 1:
            return next(iter(config.fleets.values()))
        raise ConfigError(f"name a fleet: gpumon fleet NAME (fleets in {where}: {known})")
    if name not in config.fleets:
        raise ConfigError(f"no [fleet.{name}] in {where} (fleets: {known})")
    return config.fleets[name]


def is_demo(config: Config, name: str | None) -> bool:
    """Whether ``name`` is the built-in simulated fleet (no ``[fleet.demo]`` configured)."""
    return name == DEMO and DEMO not in config.fleets


def fleet_source(config: Config, name: str | None) -> FleetSource:
    """The source of the fleet ``name`` names: the simulated one for ``demo``, else
    Prometheus as its ``[fleet.NAME]`` says (ConfigError when there is none)."""
    if is_demo(config, name):
        from gpumon.backends.fleet.demo import demo_source

        return demo_source()
    from gpumon.backends.fleet import FleetSource

    return FleetSource(pick_fleet(config, name))


async def _one_refresh(source: FleetSource) -> FleetSnapshot:
    try:
        return await source.refresh()
    finally:
        await source.close()


def cmd_fleet(args: argparse.Namespace, config: Config) -> int:
    source = fleet_source(config, args.name)
    if args.json or args.check:
        from gpumon.backends.fleet import fleet_check, fleet_json

        snap = asyncio.run(_one_refresh(source))
        if args.json:
            print(json.dumps(fleet_json(snap), indent=2))
            return 0 if snap.error is None else 3
        code, line = fleet_check(snap)
        print(line)
        return int(code)
    from gpumon.tui.fleet.app import run_fleet

    # The demo's nodes open their GPUs from the simulated answers, never a configured host.
    shown = Config(path=None) if is_demo(config, args.name) else config
    notes = getattr(args, "notes", ())  # a config the demo did not use (command_line)
    return run_fleet(shown, source, theme=args.theme, read_only=args.read_only, notes=notes)
