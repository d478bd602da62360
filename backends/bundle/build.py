"""Writing a bundle: of a live host (``bundle_host``: connect, observe, collect), of a
monitor already running (``bundle_monitor``: the dashboard's ``b``), or of a flight
recording (``bundle_recording``: ``gpumon bundle --replay FILE``, nothing to collect
from a machine).

The whole collection runs within ``BundleOptions.time_s`` (default 60 s); the archive is
bounded by ``total_bytes`` and ``file_bytes``; every file is scrubbed of the config's and
the environment's secrets (``scrub``). The file is created mode 0600 and never replaces
an existing one.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.backends.actions import audit
from gpumon.backends.bundle.archive import FILE_CAP, TOTAL_CAP, BundleArchive
from gpumon.backends.bundle.collect import (
    Budget,
    add_environment,
    add_incident,
    add_monitor_state,
    add_recording,
    add_remote,
    recorded_alerts,
    sample_snapshot,
    who,
)
from gpumon.backends.bundle.scrub import Scrubber, config_secrets, env_secrets
from gpumon.backends.bundle.timeline import pick_incident
from gpumon.backends.bundle.version import gpumon_version
from gpumon.backends.config import HostConfig
from gpumon.backends.model import iso_time
from gpumon.backends.monitor import HostMonitor, make_monitor, snapshot_json
from gpumon.backends.paths import bundles_dir
from gpumon.backends.recording import load_recording

if TYPE_CHECKING:
    from gpumon.backends.config.notify import NotifySettings
    from gpumon.backends.sim import SimSettings

__all__ = [
    "BundleOptions",
    "BundleResult",
    "bundle_host",
    "bundle_monitor",
    "bundle_recording",
    "default_name",
]

TIME_S = 60.0
DEMO_PAST_S = 600.0  # the demo's past fed to a late-started monitor (its recorder's window)
OBSERVE_S = 10.0  # at most this much of the budget waits for the sources' first rounds


@dataclass(frozen=True, slots=True)
class BundleOptions:
    output: Path
    incident: str | None = None  # an alert key of the incident; None: the newest
    time_s: float = TIME_S
    total_bytes: int = TOTAL_CAP
    file_bytes: int = FILE_CAP
    version: str = field(default_factory=gpumon_version)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


@dataclass(frozen=True, slots=True)
class BundleResult:
    path: Path
    files: tuple[str, ...]
    missing: tuple[tuple[str, str], ...]
    size: int  # bytes of the files before compression
    headline: str


def default_name(host: str, now: float | None = None) -> str:
    """``gpumon-bundle-HOST-YYYYmmdd-HHMMSS.tar.gz``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in host)[:60] or "host"
    return f"gpumon-bundle-{safe}-{stamp}.tar.gz"


def _scrubber(notify: NotifySettings | None, env: Mapping[str, str]) -> Scrubber:
    notifiers = [] if notify is None else list(notify.notifiers.values())
    return Scrubber.of(env_secrets(env), config_secrets(notifiers, env))


def _archive(title: str, notify: NotifySettings | None, options: BundleOptions) -> BundleArchive:
    return BundleArchive(
        _scrubber(notify, options.env),
        title,
        total_cap=options.total_bytes,
        file_cap=options.file_bytes,
    )


def _finish(archive: BundleArchive, options: BundleOptions, headline: str) -> BundleResult:
    root = options.output.name.removesuffix(".tar.gz").removesuffix(".tgz")
    path = archive.write(options.output, root=root)
    return BundleResult(
        path, tuple(archive.names()), tuple(archive.missing_files), archive.size, headline
    )


async def bundle_monitor(
    monitor: HostMonitor,
    options: BundleOptions,
    notify: NotifySettings | None,
    *,
    budget: Budget | None = None,
) -> BundleResult:
    """A bundle of ``monitor``'s incident (``options.incident``, else its newest), with
    what the target answers within the budget. Raises NoIncident, OSError (writing)."""
    budget = budget or Budget.of(options.time_s)
    incident = pick_incident(monitor.alerts.history(), options.incident)
    archive = _archive(
        f"gpumon bundle of {monitor.name}, {iso_time(time.time())}: {incident.headline}",
        notify,
        options,
    )
    add_incident(archive, incident, audit.read_entries(options.env), who(incident.acknowledged))
    add_monitor_state(archive, monitor, snapshot_json(monitor, time.time()))
    add_recording(archive, incident, None, monitor)
    add_environment(archive, monitor.host, notify, options.version)
    if monitor.source.capabilities.actions:
        from gpumon.backends.torchenv.doctor import run_doctor

        async def doctor() -> dict[str, Any]:
            return (await run_doctor(monitor.transport, monitor.host)).to_json()

        await add_remote(archive, monitor, incident, budget, doctor)
    else:
        archive.missing(
            "target", f"{monitor.source.label} reaches no machine: nothing read from it"
        )
    return _finish(archive, options, incident.headline)


async def bundle_incident(
    monitor: HostMonitor,
    incident_key: str,
    notify: NotifySettings | None,
    *,
    folder: Path | None = None,
) -> BundleResult:
    """The dashboard's ``b``: a bundle of the incident holding ``incident_key`` of a
    running ``monitor``, written to ``folder`` (default ``$XDG_STATE_HOME/gpumon/bundles``,
    created 0700). Raises NoIncident, OSError (FileExistsError: one of this second)."""
    folder = folder or bundles_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    options = BundleOptions(folder / default_name(monitor.name), incident_key)
    return await bundle_monitor(monitor, options, notify)


async def bundle_host(
    host: HostConfig,
    sim: SimSettings | None,
    options: BundleOptions,
    notify: NotifySettings | None,
) -> BundleResult:
    """Connect to ``host``, observe until every source answered once (at most
    ``OBSERVE_S``), bundle, disconnect. Raises GpumonError (unreachable, no incident)."""
    budget = Budget.of(options.time_s)
    # No incident recording of its own in the recordings folder: the bundle writes the
    # window it needs, so the recorder only keeps the alerts.
    monitor = make_monitor(host, sim, reconnect=False, record=False, past_s=DEMO_PAST_S)
    monitor.alerts.add_listener(monitor.recorder.keep_alert)
    monitor.start()
    try:
        await _observe(monitor, budget, min(OBSERVE_S, options.time_s / 2))
        return await bundle_monitor(monitor, options, notify, budget=budget)
    finally:
        await monitor.stop()


async def _observe(monitor: HostMonitor, budget: Budget, most: float) -> None:
    from gpumon.backends.model import ConnState

    loop = asyncio.get_running_loop()
    first: float | None = None
    while budget.left() > 0:
        if monitor.status.state == ConnState.FAILED:
            from gpumon.backends.errors import GpumonError

            raise GpumonError(f"{monitor.name}: {monitor.status.error or 'cannot connect'}")
        if monitor.latest is not None:
            first = first or loop.time()
            if not monitor.waiting_for() or loop.time() - first >= most:
                return
        await monitor.wait_for_update(min(budget.left(), 0.5) or 0.01)


def bundle_recording(
    path: Path, options: BundleOptions, notify: NotifySettings | None
) -> BundleResult:
    """A bundle of a flight recording's incident: its timeline, snapshots and the file;
    nothing is read from a machine. Raises RecordingError / OSError / NoIncident."""
    recording = load_recording(path)
    alerts = recorded_alerts(recording)
    header_alert = recording.header.get("alert")
    if isinstance(header_alert, dict):
        from gpumon.backends.bundle.collect import alert_from_json

        first = alert_from_json(header_alert)
        if first is not None and all(a.key != first.key for a in alerts):
            alerts.append(first)
    incident = pick_incident(alerts, options.incident)
    host = str(recording.header.get("host") or incident.host)
    archive = _archive(
        f"gpumon bundle of the recording {path.name} ({host}): {incident.headline}",
        notify,
        options,
    )
    add_incident(archive, incident, audit.read_entries(options.env), None)
    add_recording(archive, incident, path, None)
    if recording.samples:
        last = recording.samples[-1]
        why = "the recording's last sample (a replay has no live machine)"
        archive.add("snapshot.json", json.dumps(sample_snapshot(last, why), indent=2), why)
    add_environment_replay(archive, options)
    archive.missing(
        "target",
        "a recording reaches no machine: nvidia-smi, kernel log, logs, "
        "SGLang pages, doctor and pct config were not read",
    )
    return _finish(archive, options, incident.headline)


def add_environment_replay(archive: BundleArchive, options: BundleOptions) -> None:
    import platform

    archive.add(
        "version.txt",
        f"{options.version}\nPython {platform.python_version()} on {platform.platform()}\n",
        "gpumon's version and the machine that wrote the bundle",
    )
