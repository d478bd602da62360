"""The exporter's page against its golden file: prometheus_client's own exposition of
gpumon's collector for one fixed scene (tests/support/exporter_scene.py), made by
``scripts/capture-upstream exporter`` and checked there with ``promtool check metrics``.
A change to the exporter's names, labels, help texts or value formats shows here as a
diff; rerun the capture when the change is meant."""

from __future__ import annotations

from importlib.metadata import version

from exporter_scene import exporter_page
from upstream_captures import UPSTREAM


def test_the_exporter_writes_its_golden_page() -> None:
    golden = UPSTREAM / f"prometheus_client-{version('prometheus_client')}" / "exporter.prom"
    assert golden.is_file(), f"no golden page for this prometheus_client: {golden}"
    assert exporter_page().decode() == golden.read_text(encoding="utf-8")
