"""Writing a bundle: of a live host (``bundle_host``: connect, observe, collect), of a
monitor already running (``bundle_monitor``: the dashboard's ``b``), or of a flight
recording (``bundle_recording``: ``gpumon bundle --replay FILE``, nothing to collect
from a machine).

A host that cannot be reached (``bundle_host`` raises ``HostUnreachable``) still gets a
bundle of what this machine has (``bundle_unreachable``): the incident from its flight
recordings and the notifiers' outbox, the recording, the config, the audit log, the
version, and in the index why nothing came from the host.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.backends.actions import audit
from gpumon.backends.alerts.incident import Incident
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
from gpumon.backends.bundle.timeline import NoIncident, pick_incident
from gpumon.backends.bundle.version import gpumon_version
from gpumon.backends.config import HostConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import ConnState, iso_time
from gpumon.backends.monitor import HostMonitor, snapshot_json
from gpumon.backends.paths import bundles_dir, recordings_dir
from gpumon.backends.recording import (
    Recording,
    RecordingError,
    host_recordings,
    load_recording,
)
from gpumon.backends.transport.base import Transport

if TYPE_CHECKING:
    from gpumon.backends.config.notify import NotifySettings

__all__ = [
    "BundleOptions",
    "BundleResult",
    "HostUnreachable",
    "bundle_host",
    "bundle_monitor",
    "bundle_recording",
    "bundle_unreachable",
    "default_name",
]

TIME_S = 60.0
DEMO_PAST_S = 600.0  # the demo's past fed to a late-started monitor (its recorder's window)
OBSERVE_S = 10.0  # at most this much of the budget waits for the sources' first rounds
# The steps end this long before the time asked for: a step cut short by the budget is
# killed, and its SSH channel waited for (ssh.CLOSE_WAIT_S), then the file is written.
FINISH_S = 5.0


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
    unreachable: str | None = None  # why the host could not be reached: local parts only


class HostUnreachable(GpumonError):
    """The host did not answer (refused, timed out, failed): its bundle is written from
    what this machine has (``bundle_unreachable``)."""


def _budget(options: BundleOptions) -> Budget:
    """The steps' budget: ``time_s``, less the time to end the last step and write."""
    return Budget.of(options.time_s - min(FINISH_S, options.time_s / 4))


def default_name(host: str, now: float | None = None) -> str:
    """``gpumon-bundle-HOST-YYYYmmdd-HHMMSS.tar.gz``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in host)[:60] or "host"
    return f"gpumon-bundle-{safe}-{stamp}.tar.gz"


def _scrubber(notify: NotifySettings | None, env: Mapping[str, str]) -> Scrubber:
    # The [watch] table's own (the incident page's token_env) with the notifiers'.
    named = [] if notify is None else [*notify.notifiers.values(), notify]
    return Scrubber.of(env_secrets(env), config_secrets(named, env))


def _archive(title: str, notify: NotifySettings | None, options: BundleOptions) -> BundleArchive:
    return BundleArchive(
        _scrubber(notify, options.env),
        title,
        total_cap=options.total_bytes,
        file_cap=options.file_bytes,
    )


def _finish(
    archive: BundleArchive, options: BundleOptions, headline: str, unreachable: str | None = None
) -> BundleResult:
    root = options.output.name.removesuffix(".tar.gz").removesuffix(".tgz")
    path = archive.write(options.output, root=root)
    return BundleResult(
        path,
        tuple(archive.names()),
        tuple(archive.missing_files),
        archive.size,
        headline,
        unreachable,
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
    budget = budget or _budget(options)
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

        async def doctor(transport: Transport) -> dict[str, Any]:
            return (await run_doctor(transport, monitor.host)).to_json()

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
    monitor: HostMonitor, options: BundleOptions, notify: NotifySettings | None
) -> BundleResult:
    """Observe ``monitor`` (started, as ``gpumon bundle`` asks the runtime for it: no
    reconnecting, no incident recording of its own in the recordings folder, since the
    bundle writes the window it needs, and the demo's last ``DEMO_PAST_S`` fed first)
    until every source answered once (at most ``OBSERVE_S``), and bundle; its caller stops
    it. Raises HostUnreachable (then ``bundle_unreachable``), GpumonError (no incident)."""
    budget = _budget(options)
    await _observe(monitor, budget, min(OBSERVE_S, options.time_s / 2))
    return await bundle_monitor(monitor, options, notify, budget=budget)


async def _observe(monitor: HostMonitor, budget: Budget, most: float) -> None:
    """Until every source answered once (at most ``most`` seconds after the first data).
    Raises HostUnreachable when the session failed, or nothing answered in the budget."""
    loop = asyncio.get_running_loop()
    first: float | None = None
    while budget.left() > 0:
        if monitor.status.state == ConnState.FAILED:
            raise HostUnreachable(monitor.status.error or "cannot connect")
        if monitor.latest is not None:
            first = first or loop.time()
            if not monitor.waiting_for() or loop.time() - first >= most:
                return
        await monitor.wait_for_update(min(budget.left(), 0.5) or 0.01)
    if monitor.latest is None and monitor.status.state != ConnState.CONNECTED:
        said = f": {monitor.status.error}" if monitor.status.error else ""
        raise HostUnreachable(f"no answer within the bundle's time budget{said}")


def bundle_recording(
    path: Path, options: BundleOptions, notify: NotifySettings | None
) -> BundleResult:
    """A bundle of a flight recording's incident: its timeline, snapshots and the file;
    nothing is read from a machine. Raises RecordingError / OSError / NoIncident."""
    recording = load_recording(path)
    incident = _recorded_incident(recording, options.incident)
    host = str(recording.header.get("host") or incident.host)
    archive = _archive(
        f"gpumon bundle of the recording {path.name} ({host}): {incident.headline}",
        notify,
        options,
    )
    add_incident(archive, incident, audit.read_entries(options.env), None)
    add_recording(archive, incident, path, None)
    _add_last_sample(archive, recording, "a replay has no live machine")
    add_environment_replay(archive, options)
    archive.missing(
        "target",
        "a recording reaches no machine: nvidia-smi, kernel log, logs, "
        "SGLang pages, doctor and pct config were not read",
    )
    return _finish(archive, options, incident.headline)


def _recorded_incident(recording: Recording, key: str | None) -> Incident:
    """The recording's incident holding the alert ``key``, else its newest (the alert
    that had it written counts, from its header). Raises NoIncident."""
    alerts = recorded_alerts(recording)
    header_alert = recording.header.get("alert")
    if isinstance(header_alert, dict):
        from gpumon.backends.bundle.collect import alert_from_json

        first = alert_from_json(header_alert)
        if first is not None and all(a.key != first.key for a in alerts):
            alerts.append(first)
    return pick_incident(alerts, key)


def _add_last_sample(archive: BundleArchive, recording: Recording, why: str) -> None:
    if recording.samples:
        last = recording.samples[-1]
        about = f"the recording's last sample ({why})"
        archive.add("snapshot.json", json.dumps(sample_snapshot(last, about), indent=2), about)


def bundle_unreachable(
    host: HostConfig,
    options: BundleOptions,
    notify: NotifySettings | None,
    reason: str,
    told: Sequence[Mapping[str, Any]] = (),
) -> BundleResult:
    """The bundle of a host that cannot be reached (``reason``), from this machine: the
    incident from the flight recorder's recordings of the host (``gpumon watch``, the
    dashboard): the one holding the alert ``options.incident``; else the newest incident
    the notifiers were ``told`` of (the outbox's open incidents of the host, as their
    JSON), from the recording of it where there is one, as it was told where not; else
    the newest recording's. Then the recording, the config, the audit log, the version;
    ``host unreachable: REASON`` in the index. Raises NoIncident when nothing here holds
    an incident of the host."""
    told = sorted(told, key=lambda e: float(e.get("time") or 0.0), reverse=True)
    event = told[0] if told and options.incident is None else None
    found = _local_recording(host.name, options, event)
    if found is not None:
        path, recording = found
        incident = _recorded_incident(recording, options.incident)
        headline = incident.headline
    elif event is not None:
        headline = str(event.get("headline") or event.get("cause") or event.get("key"))
    else:
        where = recordings_dir(options.env)
        raise NoIncident(
            f"{host.name} is unreachable ({reason}), and no incident of it is recorded "
            f"here: no flight recording of it in {where}"
            + ("" if options.incident else ", no open incident of it in the outbox")
        )
    archive = _archive(
        f"gpumon bundle of {host.name} (unreachable: what this machine has), "
        f"{iso_time(time.time())}: {headline}",
        notify,
        options,
    )
    if found is not None:
        add_incident(archive, incident, audit.read_entries(options.env), None)
        add_recording(archive, incident, path, None)
        _add_last_sample(archive, recording, "the host could not be reached")
    if event is not None:
        archive.add(
            "incident-event.json",
            json.dumps(dict(event), indent=2, default=str),
            "the host's newest open incident as gpumon told the notifiers (the outbox)",
        )
    add_environment(archive, host, notify, options.version)
    archive.missing("target", f"host unreachable: {reason}")
    return _finish(archive, options, headline, reason)


def _local_recording(
    host: str, options: BundleOptions, event: Mapping[str, Any] | None
) -> tuple[Path, Recording] | None:
    """The recording of ``host`` that holds the incident asked for: the one with the
    alert ``options.incident``; else the one ``event`` names or whose window holds it
    (none: the event is all there is of it); else the newest."""
    named = [Path(str(event["recording"]))] if event and event.get("recording") else []
    for path in [*named, *host_recordings(host, recordings_dir(options.env))]:
        try:
            recording = load_recording(path)
        except (OSError, RecordingError):
            continue
        if recording.header.get("host") != host:
            continue
        if options.incident is not None:
            try:
                _recorded_incident(recording, options.incident)
            except NoIncident:
                continue
        elif event is not None and path not in named and not _holds(recording, event):
            continue
        return path, recording
    return None


def _holds(recording: Recording, event: Mapping[str, Any]) -> bool:
    """Whether the recording's window holds the incident's opening or its last event."""
    window = recording.header.get("window")
    if not isinstance(window, list) or len(window) != 2:
        return False
    start, end = window
    moments = (event.get("opened_at"), event.get("time"))
    return any(isinstance(t, (int, float)) and start <= t <= end for t in moments)


def add_environment_replay(archive: BundleArchive, options: BundleOptions) -> None:
    import platform

    archive.add(
        "version.txt",
        f"{options.version}\nPython {platform.python_version()} on {platform.platform()}\n",
        "gpumon's version and the machine that wrote the bundle",
    )
