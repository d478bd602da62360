"""The options every command shares: the demo's scenario choices are the simulator's own
list (``options.py`` spells them out so that a headless command does not import the
simulator to build its parser)."""

from __future__ import annotations

import argparse

from gpumon.backends.sim.scenario import SCENARIOS
from gpumon.tui.cli.options import common_options


def test_the_scenario_choices_are_the_simulators() -> None:
    parser = argparse.ArgumentParser()
    common_options(parser)
    (scenario,) = [a for a in parser._actions if a.dest == "scenario"]
    assert scenario.choices is not None
    assert tuple(scenario.choices) == SCENARIOS
    assert scenario.default in SCENARIOS
