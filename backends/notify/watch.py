"""``WatchService``: the dashboard's monitoring without the dashboard (``gpumon watch``).

The same parts the dashboard composes: one ``HostMonitor`` per host (``make_monitor``:
the agent, the alert engine, the flight recorder), one ``Session`` that watches their jobs
(auto-restart), plus the ``NotifyHub`` and, when a metrics port is set, the exporter.

    service = WatchService(hosts, settings, sim=sim)
    await service.start()         # raises OSError when the metrics port is taken
    await service.reload(hosts, settings)   # SIGHUP: new / changed / gone hosts, notifiers
    await service.stop()

``hold_watch_lock()`` takes ``$XDG_STATE_HOME/gpumon/watch.lock``: while a watch holds
it, the dashboard leaves delivery to the watch (``dashboard_delivery = "auto"``).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gpumon.backends.actions.session import Session
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.notify import NotifySettings
from gpumon.backends.errors import GpumonError
from gpumon.backends.exporter.metrics import GpumonCollector, MetricsServer, OomCounter
from gpumon.backends.monitor.compose import make_monitor
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.notify.hub import NotifyHub, default_outbox
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.paths import watch_lock

if TYPE_CHECKING:
    from gpumon.backends.sim.scenario import SimSettings

__all__ = ["WatchLocked", "WatchService", "hold_watch_lock", "watch_running"]


class WatchLocked(GpumonError):
    """Another ``gpumon watch`` holds the lock (it would deliver every alert twice)."""


def hold_watch_lock(path: Path | None = None) -> IO[str]:
    """Take the watch lock (kept while the returned file stays open); raises WatchLocked
    naming the pid of the watch that has it."""
    path = path or watch_lock()
    path.parent.mkdir(parents=True, exist_ok=True)
    f = path.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise WatchLocked(f"another gpumon watch is running (pid {pid}, lock {path})") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def watch_running(path: Path | None = None) -> bool:
    """Whether a ``gpumon watch`` holds the lock now."""
    path = path or watch_lock()
    try:
        with path.open("a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return path.exists()
    return False


class WatchService:
    def __init__(
        self,
        hosts: Sequence[HostConfig],
        settings: NotifySettings,
        *,
        sim: SimSettings | None = None,
        read_only: bool = False,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        outbox: Path | None = None,
        prepare: Callable[[HostMonitor], None] | None = None,
    ) -> None:
        self.settings = settings
        self.sim = sim
        self.read_only = read_only
        self.prepare = prepare  # tests: change a monitor before it starts
        self.session = Session()
        self.outbox = Outbox(outbox or default_outbox(settings))
        self.hub = NotifyHub(settings, self.outbox)
        self.hub.attach_session(self.session)
        self.ooms = OomCounter()
        self.monitors: dict[str, HostMonitor] = {}
        self._hosts = {h.name: self._host(h) for h in hosts}
        port = settings.metrics_port if metrics_port is None else metrics_port
        self.metrics: MetricsServer | None = None
        if port:
            collector = GpumonCollector(lambda: list(self.monitors.values()), self.ooms)
            self.metrics = MetricsServer(collector, port, metrics_host or settings.metrics_host)

    def _host(self, host: HostConfig) -> HostConfig:
        return replace(host, read_only=True) if self.read_only else host

    async def start(self) -> None:
        if self.metrics is not None:
            await self.metrics.start()
        await self.hub.start()
        for host in self._hosts.values():
            self._start_monitor(host)

    def _start_monitor(self, host: HostConfig) -> HostMonitor:
        monitor = make_monitor(host, self.sim)
        if self.prepare is not None:
            self.prepare(monitor)
        self.ooms.attach(monitor)
        self.hub.attach(monitor)
        self.session.watch(monitor)
        monitor.start()
        self.monitors[host.name] = monitor
        return monitor

    async def _stop_monitor(self, name: str) -> None:
        monitor = self.monitors.pop(name)
        self.hub.detach(monitor)
        for watch in [w for w in self.session.watches if w.monitor is monitor]:
            self.session.watches.remove(watch)
            await watch.detach()
        await monitor.stop()

    async def reload(self, hosts: Sequence[HostConfig], settings: NotifySettings) -> list[str]:
        """Apply a new config: hosts that are new start, gone ones stop, changed ones
        restart, the others keep running untouched; notifiers are reconfigured. Returns
        one line per change."""
        changes: list[str] = []
        wanted = {h.name: self._host(h) for h in hosts}
        for name in list(self.monitors):
            if name not in wanted:
                await self._stop_monitor(name)
                changes.append(f"stopped watching {name}")
            elif wanted[name] != self._hosts.get(name):
                await self._stop_monitor(name)
                self._start_monitor(wanted[name])
                changes.append(f"{name}: settings changed, reconnected")
        for name, host in wanted.items():
            if name not in self.monitors:
                self._start_monitor(host)
                changes.append(f"now watching {name}")
        self._hosts = wanted
        old = dict(self.settings.notifiers)
        self.settings = settings
        await self.hub.reconfigure(settings)
        for name in sorted(set(old) | set(settings.notifiers)):
            if name not in settings.notifiers:
                changes.append(f"notifier {name} removed")
            elif name not in old:
                changes.append(f"notifier {name} added")
            elif old[name] != settings.notifiers[name]:
                changes.append(f"notifier {name} changed")
        return changes

    async def stop(self) -> None:
        """Stop everything: the session first (no automatic restart starts), then the
        monitors (pending flight recordings are written), delivery, the exporter."""
        await self.session.close()
        for name in list(self.monitors):
            monitor = self.monitors.pop(name)
            self.hub.detach(monitor)
            await monitor.stop()
        await self.hub.close()
        if self.metrics is not None:
            await self.metrics.close()
        self.outbox.close()
