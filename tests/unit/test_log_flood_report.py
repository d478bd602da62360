"""What a flooding log costs is said, never silent: the agent's ``dropped`` and
``skipped_bytes`` reach the monitor through the wire, become a note (lines left out) and a
``log_flood`` warning (bytes skipped unread), and are counted in ``snapshot --json``."""

from __future__ import annotations

import json

from gpumon.backends.config import HostConfig
from gpumon.backends.model import Health
from gpumon.backends.monitor import HostMonitor
from gpumon.backends.monitor.report import snapshot_json
from gpumon.backends.monitor.sources import AgentSource
from gpumon.backends.monitor.sources.agent import dispatch, handlers
from gpumon.backends.remote import protocol
from gpumon.backends.transport import LocalTransport


def _send(monitor: HostMonitor, msg: protocol.Log) -> None:
    table = handlers(monitor, on_hello=lambda hello: False)
    dispatch(monitor, table, (json.dumps(msg.to_wire()) + "\n").encode())


def test_dropped_lines_and_skipped_bytes_are_said_and_counted() -> None:
    host = HostConfig(name="box", kind="local", kernel_log=False)
    monitor = HostMonitor(host, AgentSource(LocalTransport(host)), record=False)
    path = "/var/log/train.log"
    _send(monitor, protocol.Log("watch", path, 1.0, False, ["step 1", "step 2"]))
    assert monitor.alerts.notes() == [] and monitor.alerts.active() == []
    _send(monitor, protocol.Log("watch", path, 2.0, False, ["step 50000"], dropped=49_999))
    (note,) = monitor.alerts.notes()
    assert path in note[1] and "dropped" in note[1]
    assert monitor.alerts.active() == []  # lines left out of a flood: no alarm
    _send(
        monitor,
        protocol.Log("watch", path, 3.0, False, ["newest"], dropped=10, skipped_bytes=96 << 20),
    )
    (alert,) = monitor.alerts.active()
    assert (alert.kind, alert.severity) == ("log_flood", Health.WARNING)
    assert "96 MiB skipped unread" in alert.message and path in alert.message
    assert len(monitor.alerts.notes()) == 1  # the flood was said once
    (flow,) = snapshot_json(monitor, 4.0)["logs"]
    assert flow == {
        "path": path,
        "tag": "watch",
        "lines": 4,
        "lines_dropped": 50_009,
        "bytes_skipped": 96 << 20,
    }
