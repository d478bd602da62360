"""`gpumon swap-torch` as the command line runs it on this machine (the doctor's probe on this
interpreter first): unknown commands, and the global --read-only refusing and auditing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpumon.backends.actions import audit
from gpumon.tui.cli import torch as cli_torch

pytestmark = pytest.mark.system


def test_cli_routes_and_honours_the_global_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli_torch.main(["frobnicate"]) == 2
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[defaults]\npython = "{sys.executable}"\nnvidia_smi = "/nonexistent"\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["--config", str(cfg), "swap-torch", "local", "cpu", "--version", "2.11.0", "--yes"]
    assert cli_torch.main(argv, read_only=True) == 2
    captured = capsys.readouterr()
    assert "  refused: local is read-only (read_only in the config or --read-only)" in captured.out
    assert "swap refused: local is read-only" in captured.err
    assert [e["outcome"] for e in audit.read_entries()] == ["refused"]
