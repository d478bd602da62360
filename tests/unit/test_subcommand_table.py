"""The command line's one table (``tui/cli/subcommands.py``, issue 35 point 4): every row is
a parser, a word the dispatch routes, a word "did you mean" suggests, a name in the main
help; the early agent's guess reads the value-taking options from it; a row added to the
table is all of these at once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from gpumon.tui.cli import command_line, subcommands
from gpumon.tui.cli.launch import early_agent_wanted
from gpumon.tui.cli.options import build_parser
from gpumon.tui.cli.subcommands import DASHBOARD, SUBCOMMANDS, Arg, Subcommand
from gpumon.tui.cli.words import suggestion


def typo(word: str) -> str:
    """``word`` with its 2nd and 3rd letters swapped ("snapshot" -> "snpashot")."""
    return word[0] + word[2] + word[1] + word[3:]


def positionals(command: Subcommand) -> list[str]:
    """A value for each required positional argument of ``command``."""
    out = []
    for a in command.args:
        if a.flags[0].startswith("-") or a.options.get("nargs") in ("?", "*"):
            continue
        choices = a.options.get("choices")
        out.append(choices[0] if choices else "cpu")  # "cpu": a host, and a torch variant
    return out


def argparse_value_flags(parser: argparse.ArgumentParser) -> set[str]:
    """What argparse itself says takes a value: an option whose action consumes words."""
    return {
        o for a in parser._actions if a.option_strings and a.nargs != 0 for o in a.option_strings
    }


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=lambda c: c.name)
def test_every_row_is_a_parser_a_route_a_suggestion_and_a_name_in_the_help(
    command: Subcommand, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    parser = build_parser(command)
    assert parser.prog == f"gpumon {command.name}"
    # routed to its row, the shared options before the word as the user may type them
    shared = ["--read-only"] if command.common else []
    row, args = command_line._parse([*shared, command.name, *positionals(command)])
    assert row is command and getattr(args, "read_only", False) is bool(shared)
    assert callable(command_line.runner(command))
    monkeypatch.setenv("GPUMON_SSH_CONFIG", str(tmp_path / "none"))
    assert suggestion(typo(command.name), {}) == command.name
    assert command.name in build_parser(DASHBOARD).format_help()
    # the value-taking options the early agent's guess skips are the ones argparse reads
    assert subcommands.value_flags(command) == argparse_value_flags(parser)


def test_the_early_agents_options_are_those_of_its_commands() -> None:
    # snapshot local runs the agent's round in gpumon's own process (monitor.oneshot)
    assert subcommands.early_agent() == ("check",)
    assert subcommands.value_options() == {
        "--config",
        "--timeout",
        "--window",
        "--scenario",
        "--demo-speed",
        "--demo-time",
        "--demo-hold",
        "--demo-seed",
    }


def test_a_row_added_to_the_table_is_parsed_routed_suggested_and_guessed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[Any] = []

    def cmd_frobnicate(args: argparse.Namespace, config: object) -> int:
        ran.append(args)
        return 7

    monkeypatch.setattr(command_line, "cmd_frobnicate", cmd_frobnicate, raising=False)
    row = Subcommand(
        "frobnicate",
        "Frobnicate HOST.",
        (Arg("host", metavar="HOST"), Arg("--level", type=int, metavar="N")),
        "command_line:cmd_frobnicate",
        early_agent=True,
    )
    monkeypatch.setattr(subcommands, "SUBCOMMANDS", (*SUBCOMMANDS, row))
    monkeypatch.setenv("GPUMON_SSH_CONFIG", str(tmp_path / "none"))

    assert command_line.run(["frobnicate", "--level", "3", "box"]) == 7
    assert (ran[0].host, ran[0].level) == ("box", 3)
    assert "frobnicate" in build_parser(DASHBOARD).format_help()
    assert command_line.run(["frobnicat", "box"]) == 2  # not a host: "did you mean"
    assert "did you mean `gpumon frobnicate`?" in capsys.readouterr().err
    # its value option is skipped by the early agent's guess: "local" is the host here...
    assert early_agent_wanted(["frobnicate", "--level", "3", "local"])
    # ...and the option's value there
    assert not early_agent_wanted(["frobnicate", "--level", "local", "box"])


def test_each_commands_yes_says_what_it_lets_go_by() -> None:
    """``--yes`` and ``--dry-run`` come from one helper; only restart's --yes speaks of
    restarting beside the incident's cause (swap-torch's once said it too, copied)."""
    for name in ("restart", "swap-torch"):
        command = subcommands.find(name)
        assert command is not None
        [yes] = [a for a in command.args if "--yes" in a.flags]
        assert ("restart" in yes.options["help"]) is (name == "restart"), name
        assert any("--dry-run" in a.flags for a in command.args), name
