"""The README's "On call" section names every notifier and [watch] key, every webhook
event key and every metric the exporter serves (docs that cannot drift silently)."""

from __future__ import annotations

from pathlib import Path

from gpumon.backends.config.notify import NOTIFIER_KEYS, NOTIFIER_KINDS, WATCH_KEYS
from gpumon.backends.exporter.metrics import METRIC_NAMES
from gpumon.backends.notify.event import EVENT_KEYS

README = Path(__file__).resolve().parents[2] / "README.md"


def section() -> str:
    text = README.read_text()
    start = text.index("## On call: `gpumon watch`")
    return text[start : text.index("\n## ", start + 1)]


def test_the_readme_documents_every_key_and_metric() -> None:
    doc = section()
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
    assert not missing, f"not in the README's On call section: {missing}"
