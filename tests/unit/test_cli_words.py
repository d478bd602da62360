"""The command line's first words (issue 11, point 13): a typo of a subcommand is answered
"did you mean", unless the word is a host gpumon knows; the dashboard needs a terminal; a
bare ``gpumon`` opens the configured hosts or says how to start; ``--version``; the
interval's range. In process: ``main`` returns before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.tui.cli import main
from gpumon.tui.cli.subcommands import names
from gpumon.tui.cli.words import ssh_aliases, suggestion


def test_a_close_word_is_answered_with_the_subcommand() -> None:
    assert suggestion("snapshto", {}, aliases=set()) == "snapshot"
    assert suggestion("chekc", {}, aliases=set()) == "check"
    assert suggestion("swap-toch", {}, aliases=set()) == "swap-torch"
    assert suggestion("fleat", {}, aliases=set()) == "fleet"  # listed before it lands
    assert {"watch", "notify", "fleet"} <= set(names())


def test_hosts_are_never_taken_for_typos() -> None:
    assert suggestion("snapshot", {}, aliases=set()) is None  # the word itself
    assert suggestion("ct200", {}, aliases=set()) is None  # close to nothing
    assert suggestion("chekc", {"chekc": object()}, aliases=set()) is None  # configured
    assert suggestion("chekc", {}, aliases={"chekc"}) is None  # an ssh config alias
    for target in ("root@chekc", "chekc:22", "chekc.lab", "[::1]:22"):
        assert suggestion(target, {}, aliases=set()) is None, target
    assert suggestion("demo", {}, aliases=set()) is None


def test_ssh_aliases_reads_literal_host_names(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host chekc gpu-*\n  User root\nHost=box !bad\nMatch all\n")
    assert ssh_aliases(config) == {"chekc", "box"}
    assert ssh_aliases(tmp_path / "missing") == set()


def test_a_mistyped_subcommand_stops_with_did_you_mean(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", str(tmp_path / "none"))
    assert main(["snapshto", "demo"]) == 2
    err = capsys.readouterr().err
    assert "did you mean `gpumon snapshot`?" in err and "'snapshto'" in err


def test_an_ssh_alias_close_to_a_command_is_a_host(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "ssh_config").write_text("Host chekc\n  HostName 127.0.0.1\n")
    monkeypatch.setenv("GPUMON_SSH_CONFIG", str(tmp_path / "ssh_config"))
    assert main(["chekc"]) == 2  # not a terminal here: refused, but as a dashboard
    err = capsys.readouterr().err
    assert "did you mean" not in err and "the dashboard needs a terminal" in err


def test_the_dashboard_refuses_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "needs a terminal (stdout is not one)" in err and "gpumon snapshot HOST" in err


def test_bare_gpumon_says_how_to_start_without_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "no hosts configured" in err and "gpumon demo" in err and "gpumon local" in err
    assert "usage:" not in err  # not argparse's error


def test_bare_gpumon_opens_the_configured_hosts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[hosts.ct200]\nssh = "root@pve1"\n')
    assert main(["--config", str(config)]) == 2  # got as far as wanting a terminal
    assert "the dashboard needs a terminal" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("gpumon ") and out.strip() != "gpumon"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "4000", "fast"])
def test_the_interval_out_of_range_is_refused(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--interval", value])
    assert exit_.value.code == 2
    assert "--interval" in capsys.readouterr().err
