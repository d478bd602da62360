"""``[watch] bundle_on_critical``: the hub that pages for the demo's OOM names the bundle
in the incident's event (and so in every notifier's message) and writes it, 0600."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from gpumon.backends.config import Config, resolve_host
from gpumon.backends.config.notify import NotifySettings
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox

from waiting import until

pytestmark = pytest.mark.system


@pytest.mark.parametrize("on", [True, False])
async def test_a_critical_incident_opens_with_its_bundle(tmp_path: Path, on: bool) -> None:
    settings = NotifySettings(bundle_on_critical=on)
    hub = NotifyHub(settings, Outbox(tmp_path / "outbox.sqlite3"))
    hub.bundles_folder = tmp_path / "bundles"
    events: list[IncidentEvent] = []
    hub.changes.add(events.append)
    host = resolve_host(Config(path=None), "demo")
    monitor = make_monitor(host, demo_settings(demo_time=70), reconnect=False, record=False)
    hub.attach(monitor)
    monitor.start()
    try:
        # The incident becomes critical: it opens so, or the OOM updates the memory
        # warning that opened it (the tracker keeps the bundle for its later events).
        await until(
            lambda: any(e.severity == "critical" for e in events),
            60,
            lambda: f"a critical incident ({events})",
            step=0.2,
        )
        opened = next(e for e in events if e.severity == "critical")
        if not on:
            assert opened.bundle is None and "bundle:" not in opened.details()
            return
        assert opened.bundle is not None
        path = Path(opened.bundle)
        assert path.parent == tmp_path / "bundles"
        assert f"bundle: {path}" in opened.details()
        assert opened.to_json()["bundle"] == str(path)
        await until(lambda: path.exists(), 90, lambda: f"{path} written", step=0.5)
    finally:
        await hub.close()
        await monitor.stop()
    assert os.stat(path).st_mode & 0o777 == 0o600
    with tarfile.open(path) as tar:
        names = {m.name.split("/", 1)[1]: m for m in tar.getmembers()}
        data = json.loads(tar.extractfile(names["incident.json"]).read())  # type: ignore[union-attr]
    assert data["headline"].startswith("drafter: CUDA OOM on GPU 6")
