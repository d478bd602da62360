"""The incident the notifier tests render: the drafter's CUDA OOM on GPU 6 of ct200, just
opened with its automatic restart due (``OOM_OPEN``), and a notifier of a kind around it
(``notifier``: its URL a closed port, since rendering sends nothing)."""

from __future__ import annotations

from typing import Any

from gpumon.backends.config.notify import NotifierConfig
from gpumon.backends.model import Health, iso_time
from gpumon.backends.notify.event import IncidentEvent

__all__ = ["OOM_OPEN", "notifier"]

OOM_OPEN = IncidentEvent(
    event="open",
    key="ct200/gpu6/drafter/cuda_oom",
    host="ct200",
    gpu=6,
    job="drafter",
    kind="cuda_oom",
    severity=Health.CRITICAL,
    cause="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    action=f"auto-restart 1/3 due {iso_time(1010.0)}",
    resolved_by=None,
    opened_at=1000.0,
    time=1000.0,
    recording="/state/recordings/ct200-oom.jsonl.gz",
    headline="drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)",
    fix="gpumon restart ct200 drafter",
    attachments=("/state/recordings/ct200-oom.jsonl.gz",),
)


def notifier(kind: str, **values: Any) -> NotifierConfig:
    """A notifier ``n`` of ``kind`` with the config's ``values``."""
    return NotifierConfig(name="n", kind=kind, url="http://127.0.0.1:9/x", **values)
