"""gpumon's files on this machine: the XDG directories, and nobody else looking them up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpumon.backends import paths

from source_trees import parsed

ROOT = Path(__file__).parents[2]


def test_defaults_are_under_home() -> None:
    env = {"HOME": "/home/u"}
    assert paths.config_dir(env) == Path("/home/u/.config/gpumon")
    assert paths.state_dir(env) == Path("/home/u/.local/state/gpumon")
    assert paths.default_config_file(env) == Path("/home/u/.config/gpumon/config.toml")
    assert paths.audit_log(env) == Path("/home/u/.local/state/gpumon/audit.jsonl")
    assert paths.recordings_dir(env) == Path("/home/u/.local/state/gpumon/recordings")
    assert paths.ui_state_file(env) == Path("/home/u/.local/state/gpumon/state.json")


def test_absolute_xdg_homes_win_and_relative_or_empty_ones_are_ignored() -> None:
    env = {"HOME": "/home/u", "XDG_CONFIG_HOME": "/cfg", "XDG_STATE_HOME": "/st"}
    assert paths.default_config_file(env) == Path("/cfg/gpumon/config.toml")
    assert paths.audit_log(env) == Path("/st/gpumon/audit.jsonl")
    for ignored in ("relative/dir", ""):
        env = {"HOME": "/home/u", "XDG_CONFIG_HOME": ignored, "XDG_STATE_HOME": ignored}
        assert paths.config_dir(env) == Path("/home/u/.config/gpumon")
        assert paths.state_dir(env) == Path("/home/u/.local/state/gpumon")


def test_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    assert paths.recordings_dir() == tmp_path / "st" / "gpumon" / "recordings"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert paths.config_dir() == tmp_path / ".config" / "gpumon"
    assert paths.state_dir({}) == Path.home() / ".local" / "state" / "gpumon"


def test_only_the_paths_module_reads_the_xdg_variables() -> None:
    readers = []
    for path in [*(ROOT / "backends").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]:
        if path == ROOT / "backends" / "paths.py":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and node.value in (
                "XDG_CONFIG_HOME",
                "XDG_STATE_HOME",
            ):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
