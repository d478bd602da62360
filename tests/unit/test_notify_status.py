"""``gpumon notify status`` says each open incident as the notifiers do: its headline,
its fix and what gpumon did, not the alert's raw line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gpumon.backends.config import load_config
from gpumon.backends.model import Health, iso_time
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.outbox import Outbox
from gpumon.tui.cli.watch import cmd_notify_status


def test_open_incidents_are_said_by_their_headline_fix_and_action(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "outbox.sqlite3"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[watch]\noutbox = "{box}"\n')
    outbox = Outbox(box)
    outbox.save_incident(
        IncidentEvent(
            "update", "demo/gpu6/drafter/cuda_oom", "demo", 6, "drafter", "cuda_oom",
            Health.CRITICAL,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "auto-restart failed: verify: drafter exited with code 1 right after starting",
            None, 1000.0, 1020.0, None,
            headline="drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)",
            fix="gpumon restart demo drafter", action_at=1020.0, took_s=4.0,
        )
    )  # fmt: skip
    outbox.close()
    assert cmd_notify_status(argparse.Namespace(json=False), load_config(cfg)) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("open incidents: 1")
    assert out[at + 1].endswith(": drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)")
    assert out[at + 2].strip() == "fix: gpumon restart demo drafter"
    assert out[at + 3].strip() == (
        f"gpumon: auto-restart failed at {iso_time(1020.0)}: took 4.0 s; "
        "verify: drafter exited with code 1 right after starting"
    )
