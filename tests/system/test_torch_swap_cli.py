"""`gpumon swap-torch` as the command line runs it on this machine (the doctor's probe on this
interpreter first): a mistyped command, and the global --read-only (before the command)
refusing and auditing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpumon.backends.actions import audit
from gpumon.tui.cli import main

pytestmark = pytest.mark.system


def test_cli_routes_and_honours_the_global_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["swap-toch", "local", "cpu"]) == 2
    assert "did you mean `gpumon swap-torch`?" in capsys.readouterr().err
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[defaults]\npython = "{sys.executable}"\nnvidia_smi = "/nonexistent"\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["--read-only", "--config", str(cfg), "swap-torch", "local", "cpu"]
    assert main([*argv, "--version", "2.11.0", "--yes"]) == 2
    captured = capsys.readouterr()
    assert "  refused: local is read-only (read_only in the config or --read-only)" in captured.out
    assert "swap refused: local is read-only" in captured.err
    assert [e["outcome"] for e in audit.read_entries()] == ["refused"]
