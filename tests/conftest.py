"""Every test gets its own XDG config and state directories: nothing a test runs (the
flight recorder, the audit log, the remembered theme) writes into the real home."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_xdg_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        path = root / var.lower()
        path.mkdir()
        monkeypatch.setenv(var, str(path))
    monkeypatch.delenv("GPUMON_CONFIG", raising=False)
