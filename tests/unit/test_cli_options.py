"""The options every command shares: the demo's scenario choices are the simulator's own
list (``options.py`` spells them out so that a headless command does not import the
simulator to build its parser)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpumon.backends.sim.scenario import SCENARIOS
from gpumon.tui.cli.options import common_options, sim_settings
from gpumon.tui.cli.subcommands import value_options


def test_the_scenario_choices_are_the_simulators() -> None:
    parser = argparse.ArgumentParser()
    common_options(parser)
    (scenario,) = [a for a in parser._actions if a.dest == "scenario"]
    assert scenario.choices is not None
    assert tuple(scenario.choices) == SCENARIOS
    assert scenario.default in SCENARIOS


def test_every_shared_option_with_a_value_is_known_to_the_early_agents_guess() -> None:
    """``launch.early_agent_wanted`` must skip an option's value, or ``snapshot
    --demo-hold local demo`` would read as ``snapshot local``."""
    parser = argparse.ArgumentParser()
    common_options(parser)
    valued = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}
    assert "--demo-hold" in valued and valued <= value_options()


def test_demo_hold_holds_the_clock_at_demo_time_on_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    common_options(parser)
    monkeypatch.chdir(tmp_path)
    held = sim_settings(parser.parse_args(["--demo-time", "48", "--demo-hold", "go"]))
    # absolute: the simulator's processes do not run where gpumon was started
    assert (held.hold_file, held.hold_at) == (str(tmp_path / "go"), 48.0)
    plain = sim_settings(parser.parse_args(["--demo-time", "48"]))
    assert (plain.hold_file, plain.hold_at) == (None, None)  # the user's demo runs as before
