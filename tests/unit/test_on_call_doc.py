"""docs/on-call.md names every notifier and [watch] key, every webhook event key and every
metric the exporter serves (docs that cannot drift silently)."""

from __future__ import annotations

from pathlib import Path

from gpumon.backends.config.notify import NOTIFIER_KEYS, NOTIFIER_KINDS, WATCH_KEYS
from gpumon.backends.exporter.metrics import METRIC_NAMES
from gpumon.backends.notify.event import EVENT_KEYS

ON_CALL = Path(__file__).resolve().parents[2] / "docs" / "on-call.md"


def test_the_on_call_doc_documents_every_key_and_metric() -> None:
    doc = ON_CALL.read_text(encoding="utf-8")
    missing = [
        name
        for name in (
            *(f"`{k.name}`" for k in (*NOTIFIER_KEYS, *WATCH_KEYS) if not k.name.endswith("_env")),
            *(f"`{k}`" for k in NOTIFIER_KINDS),
            *(f"`{k}`" for k in EVENT_KEYS),
            *(f"`{m}`" for m in METRIC_NAMES),
        )
        if name not in doc
    ]
    assert not missing, f"not in docs/on-call.md: {missing}"
