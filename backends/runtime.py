"""``Runtime``: the parts one gpumon run shares, built and owned in one place, for every
front end: the dashboard (``tui.app``), the fleet view's node dashboards
(``tui.fleet.app``), ``gpumon watch`` and the one-shot commands (``snapshot``, ``check``,
``restart``, ``bundle``; ``doctor`` and ``swap-torch`` take a transport from it).

The parts: the monitors (``make_monitor``: the agent over its transport, the alert engine,
the flight recorder), the action ``Session`` that watches their jobs (auto-restart), the
``NotifyHub`` with its outbox, and the exporter (``/metrics`` and the OOM counter). A front
end asks for the parts it uses; each is built on the first ask and from then on wired to
every monitor the runtime starts, once (asked before or after the monitor started). A
one-shot that asks for a monitor alone imports no actions, notifiers or exporter, and the
simulator only when its host is ``demo``.

    runtime = Runtime(sim=sim)
    runtime.deliver(settings)               # watch: the hub (dashboard_delivery: the dashboard's)
    runtime.export(port, host)              # watch: /metrics
    runtime.serve_pages()                   # watch: the incident page on that listener
    monitor = runtime.monitor(host)         # built, not started
    await runtime.start()                   # the exporter listens, delivery, every monitor
    await runtime.reload(hosts, settings)   # watch's SIGHUP (``serve``)
    await runtime.stop()                    # session, monitors, delivery, exporter, outbox
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

    from gpumon.backends.actions.session import Session
    from gpumon.backends.config.load import HostConfig
    from gpumon.backends.config.notify import NotifySettings
    from gpumon.backends.config.usage import UsageSettings
    from gpumon.backends.exporter.metrics import MetricsServer, OomCounter, UsageCounts
    from gpumon.backends.monitor.state import HostMonitor
    from gpumon.backends.notify.hub import NotifyHub
    from gpumon.backends.sim.scenario import SimSettings
    from gpumon.backends.transport.base import Transport
    from gpumon.backends.usage.recorder import UsageRecorder
    from gpumon.backends.usage.store import UsageWriter

    # The simulator's settings, or what makes them (called for the first demo host only).
    DemoSettings = SimSettings | Callable[[], SimSettings] | None

__all__ = ["Runtime", "dashboard_hub"]

log = logging.getLogger(__name__)


class Runtime:
    """The monitors, the session, the hub and the exporter of one gpumon run.

    ``sim``: the demo host's simulator (its settings, or a function making them on the
    first demo host). ``read_only``: every host read-only (``watch --read-only``).
    ``interval``: every host's sampling interval (``--interval``). ``reconnect=False``: a
    one-shot's monitors give up on the first failed session. ``recordings=False``: the
    flight recorder keeps the alerts and writes no incident recording (a bundle writes the
    window it needs). ``prepare``: changes a monitor before it is wired (the demo's
    ``--demo-auto-restart``, tests). ``session``, ``hub``: parts made elsewhere, adopted.
    """

    def __init__(
        self,
        *,
        sim: DemoSettings = None,
        read_only: bool = False,
        interval: float | None = None,
        reconnect: bool = True,
        recordings: bool = True,
        prepare: Callable[[HostMonitor], None] | None = None,
        session: Session | None = None,
        hub: NotifyHub | None = None,
    ) -> None:
        self._sim = sim
        self.read_only = read_only
        self.interval = interval
        self.reconnect = reconnect
        self.recordings = recordings
        self.prepare = prepare
        self.monitors: list[HostMonitor] = []
        self._configured: dict[HostMonitor, HostConfig] = {}  # as asked for, for reload
        self._started: set[HostMonitor] = set()
        self._session = session
        self.hub: NotifyHub | None = None
        self._forget_unwatched = False  # the watch: the outbox's one deliverer
        self.metrics: MetricsServer | None = None
        self._ooms: OomCounter | None = None
        self._counted: set[HostMonitor] = set()
        self.usage: UsageWriter | None = None
        self._usage_standby: Callable[[], bool] | None = None
        self._usage_settings: UsageSettings | None = None
        self._accounts: dict[HostMonitor, UsageRecorder] = {}
        self._stopped = False
        if hub is not None:
            self._use_hub(hub)

    # --- the front ends' runtimes ---------------------------------------------------------
    @classmethod
    def for_dashboard(
        cls,
        hosts: Sequence[HostConfig],
        *,
        sim: DemoSettings = None,
        interval: float | None = None,
        notify: NotifySettings | None = None,
        usage: UsageSettings | None = None,
    ) -> Runtime:
        """The dashboard's: a monitor per host, the hub where ``dashboard_hub`` says
        the dashboard delivers (the app asks for the session: its keys' runs), and the
        accounting while no watch runs (``usage``: the config's ``[usage]``)."""
        runtime = cls(sim=sim, interval=interval)
        runtime.dashboard_delivery(notify)
        from gpumon.backends.notify.watch import watch_running

        runtime.account(standby=watch_running, settings=usage)  # a watch records instead
        for host in hosts:
            runtime.monitor(host)
        return runtime

    @classmethod
    def for_watch(
        cls,
        hosts: Sequence[HostConfig],
        settings: NotifySettings,
        *,
        sim: DemoSettings = None,
        read_only: bool = False,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        outbox: Path | None = None,
        prepare: Callable[[HostMonitor], None] | None = None,
        usage: UsageSettings | None = None,
    ) -> Runtime:
        """``gpumon watch``'s: the dashboard's monitoring without the dashboard, the hub as
        the outbox's one deliverer, the accounting (``usage``: the config's ``[usage]``),
        and the exporter when a metrics port is set (the argument, else ``[watch]
        metrics_port``; 0: none)."""
        runtime = cls(sim=sim, read_only=read_only, prepare=prepare)
        runtime.session  # noqa: B018 (built now: automatic restarts)
        runtime.deliver(settings, outbox=outbox)
        runtime.account(settings=usage)
        port = settings.metrics_port if metrics_port is None else metrics_port
        if port:
            runtime.export(port, metrics_host or settings.listen)
            runtime.serve_pages()
        for host in hosts:
            runtime.monitor(host)
        return runtime

    # --- monitors -------------------------------------------------------------------------
    def host(self, host: HostConfig) -> HostConfig:
        """``host`` as this runtime watches it (read-only, its interval)."""
        if self.read_only and not host.read_only:
            host = replace(host, read_only=True)
        if self.interval is not None:
            host = replace(host, interval=self.interval)
        return host

    def sim_for(self, host: HostConfig) -> SimSettings | None:
        """The simulator's settings for the ``demo`` host (made once), None for any other."""
        if host.kind != "demo" or self._sim is None:
            return None
        if callable(self._sim):
            self._sim = self._sim()
        return self._sim

    def monitor(
        self, host: HostConfig, *, past_s: float | None = None, one_shot: bool = False
    ) -> HostMonitor:
        """A monitor for ``host``, owned here (not started: ``start_monitor``, ``start``).
        ``past_s``: for the demo, its scenario's last seconds fed first (a bundle);
        ``one_shot``: ``snapshot``'s and ``check``'s, which record an incident once across
        their runs (a check every minute is not a recording a minute)."""
        from gpumon.backends.monitor.compose import make_monitor

        configured = self.host(host)
        monitor = make_monitor(
            configured,
            self.sim_for(configured),
            reconnect=self.reconnect,
            record=self.recordings,
            past_s=past_s,
            one_shot=one_shot,
        )
        if not self.recordings:  # the recorder still keeps the alerts (a bundle's history)
            monitor.alerts.add_listener(monitor.recorder.keep_alert)
        if self.prepare is not None:
            self.prepare(monitor)
        self._configured[monitor] = configured
        return self.adopt(monitor)

    def adopt(self, monitor: HostMonitor) -> HostMonitor:
        """Own a monitor built elsewhere (a test's, a replay's): started, wired and stopped
        with the others."""
        if monitor not in self.monitors:
            self.monitors.append(monitor)
        return monitor

    def named(self, name: str) -> HostMonitor:
        """The monitor of the host ``name`` (KeyError when there is none)."""
        for monitor in self.monitors:
            if monitor.name == name:
                return monitor
        raise KeyError(name)

    def transport(self, host: HostConfig) -> Transport:
        """A transport to ``host`` alone, no monitor (``doctor``, ``swap-torch``); its
        ``host`` is the host as reached (the demo's is gpumon's own Python)."""
        from gpumon.backends.monitor.compose import make_transport

        return make_transport(host, self.sim_for(host))

    def start_monitor(self, monitor: HostMonitor) -> HostMonitor:
        """Wire ``monitor`` to every part asked for so far and start it (once)."""
        self.adopt(monitor)
        if monitor not in self._started:
            self._wire(monitor)
            self._started.add(monitor)
            monitor.start()
        return monitor

    def start_monitors(self) -> None:
        """``start_monitor`` for every monitor not started yet."""
        for monitor in list(self.monitors):
            self.start_monitor(monitor)

    def _wire(self, monitor: HostMonitor) -> None:
        """Each part that exists listens to ``monitor``, once however often this is asked."""
        if self._ooms is not None and monitor not in self._counted:
            self._ooms.attach(monitor)
            self._counted.add(monitor)
        if self.hub is not None and monitor not in self.hub.monitors:
            self.hub.attach(monitor)
        session = self._session
        if session is not None and all(w.monitor is not monitor for w in session.watches):
            session.watch(monitor)
        if self.usage is not None and monitor not in self._accounts:
            from gpumon.backends.usage.recorder import HostLease, UsageRecorder

            lease = None
            if self._usage_standby is not None:  # a dashboard: one of them counts a host
                lease = HostLease(self.usage.path.parent, monitor.name)
            recorder = UsageRecorder(monitor, self.usage, self._usage_standby, lease)
            self._accounts[monitor] = recorder
            monitor.add_listener(recorder)
            price = self._usage_settings
            if price is not None and price.price_per_kwh is not None:
                monitor.alerts.energy_price = (price.price_per_kwh, price.currency)

    def _wire_started(self) -> None:
        """A part asked for after monitors started listens to them from now on."""
        for monitor in self.monitors:
            if monitor in self._started:
                self._wire(monitor)

    async def close_monitor(self, monitor: HostMonitor) -> None:
        """Unwire ``monitor`` from every part, stop it and forget it (a host a reload
        dropped, the fleet's node left)."""
        if self.hub is not None:
            self.hub.detach(monitor)
        if self._session is not None:
            await self._session.unwatch(monitor)
        if self._ooms is not None and monitor in self._counted:
            monitor.alerts.remove_listener(self._ooms.listener)
            self._counted.discard(monitor)
        recorder = self._accounts.pop(monitor, None)
        if recorder is not None:
            monitor.listeners.remove(recorder)
            recorder.close()
        await monitor.stop()
        self._started.discard(monitor)
        self._configured.pop(monitor, None)
        if monitor in self.monitors:
            self.monitors.remove(monitor)

    # --- the parts ------------------------------------------------------------------------
    @property
    def session(self) -> Session:
        """The action session (the run registry every restart goes through; a job watch
        per started monitor: auto-restart), built on the first ask."""
        if self._session is None:
            from gpumon.backends.actions.session import Session

            self._session = Session()
            if self.hub is not None:
                self.hub.attach_session(self._session)
            self._wire_started()
        if self._session.runs.evidence is None:  # one adopted from the app, too
            from gpumon.backends.bundle.evidence import keep_evidence

            self._session.runs.evidence = keep_evidence
        return self._session

    def deliver(self, settings: NotifySettings, *, outbox: Path | None = None) -> NotifyHub:
        """The hub as ``gpumon watch`` delivers: the outbox's one deliverer (it holds the
        watch lock), so the outbox's incidents of hosts it does not watch are resolved at
        the start and at each reload (nothing else would ever clear them)."""
        from gpumon.backends.notify.hub import NotifyHub, default_outbox
        from gpumon.backends.notify.outbox import Outbox

        self._forget_unwatched = True
        return self._use_hub(NotifyHub(settings, Outbox(outbox or default_outbox(settings))))

    def dashboard_delivery(self, settings: NotifySettings | None) -> NotifyHub | None:
        """The hub where the dashboard delivers (``dashboard_hub``), else None."""
        hub = dashboard_hub(settings)
        return None if hub is None else self._use_hub(hub)

    def _use_hub(self, hub: NotifyHub) -> NotifyHub:
        self.hub = hub
        if self._session is not None:
            hub.attach_session(self._session)
        self._wire_started()
        return hub

    def export(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """The Prometheus exporter on ``host:port`` (listening from ``start``): every
        monitor of this runtime read at each scrape, and the OOM counter."""
        from gpumon.backends.exporter.metrics import GpumonCollector, MetricsServer, OomCounter

        self._ooms = OomCounter()
        collector = GpumonCollector(lambda: list(self.monitors), self._ooms, self._usage_counts)
        self.metrics = MetricsServer(collector, port, host)
        self._wire_started()
        return self.metrics

    def account(
        self,
        path: Path | None = None,
        standby: Callable[[], bool] | None = None,
        settings: UsageSettings | None = None,
    ) -> None:
        """Accounting (``backends/usage``): every monitor's samples into the usage
        database (``paths.usage_db``, else ``path``), written on a thread of its own;
        ``standby``: while it says True, nothing is written (the dashboard beside a
        ``gpumon watch``); ``settings``: the config's ``[usage]``, whose price a
        ``gpu_idle_held`` names its cost in."""
        from gpumon.backends.paths import usage_db
        from gpumon.backends.usage.store import UsageWriter

        if self.usage is None:
            self.usage = UsageWriter(path or usage_db())
            self._usage_standby = standby
            self._usage_settings = settings
            self._wire_started()

    def _usage_counts(self) -> list[UsageCounts]:
        """The accounting's counters of each monitor, for the exporter."""
        from gpumon.backends.exporter.metrics import UsageCounts

        out = []
        for monitor, recorder in list(self._accounts.items()):
            tally = recorder.tally
            owners = {(o.container, o.user, o.job): s for o, s in tally.owner_s.items()}
            out.append(UsageCounts(monitor.name, tally.joules, owners))
        return out

    def serve_pages(self) -> None:
        """The incident page (``backends/web``) on the exporter's listener, over this
        runtime's monitors and the hub's incidents (``export`` and ``deliver`` first)."""
        from gpumon.backends.web import IncidentSite

        hub, metrics = self.hub, self.metrics
        assert hub is not None and metrics is not None, "export and deliver first"
        metrics.pages = IncidentSite(
            lambda: list(self.monitors), hub, lambda: hub.settings, metrics.host
        )

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """The exporter listens (OSError when its port is taken: nothing else started
        then), delivery starts, every monitor not started yet starts. After ``stop``:
        nothing (a start that comes late must not outlive the run)."""
        if self._stopped:
            return
        if self.metrics is not None:
            await self.metrics.start()
        if self.hub is not None:
            await self.hub.start()
        self.start_monitors()
        self._forget()

    def _forget(self) -> None:
        hub = self.hub
        if hub is not None and self._forget_unwatched:
            watched = {m.name for m in self.monitors}
            hub.publish(hub.tracker.forget_hosts(watched, hub.clock()))

    async def reload(self, hosts: Sequence[HostConfig], settings: NotifySettings) -> list[str]:
        """A new config (``gpumon watch``'s SIGHUP): hosts that are new start, gone ones
        stop, changed ones restart, the others keep running untouched; the notifiers are
        reconfigured. One line per change."""
        changes: list[str] = []
        wanted = {h.name: self.host(h) for h in hosts}
        for monitor in list(self.monitors):
            name = monitor.name
            if name not in wanted:
                await self.close_monitor(monitor)
                changes.append(f"stopped watching {name}")
            elif wanted[name] != self._configured.get(monitor):
                await self.close_monitor(monitor)
                self.start_monitor(self.monitor(wanted[name]))
                changes.append(f"{name}: settings changed, reconnected")
        watched = {m.name for m in self.monitors}
        for name, host in wanted.items():
            if name not in watched:
                self.start_monitor(self.monitor(host))
                changes.append(f"now watching {name}")
        self._forget()
        if self.hub is not None:
            old = dict(self.hub.settings.notifiers)
            await self.hub.reconfigure(settings)
            for name in sorted(set(old) | set(settings.notifiers)):
                if name not in settings.notifiers:
                    changes.append(f"notifier {name} removed")
                elif name not in old:
                    changes.append(f"notifier {name} added")
                elif old[name] != settings.notifiers[name]:
                    changes.append(f"notifier {name} changed")
        return changes

    async def serve(
        self,
        reload: Callable[[], Coroutine[None, None, None]],
        ready: Callable[[], None] | None = None,
    ) -> str:
        """Run until SIGTERM or SIGINT, then ``stop``; returns the signal's name. SIGHUP
        runs ``reload`` (a reload still running at the stop is awaited first). ``ready``
        is called once the signals are handled (a line saying so may be acted on)."""
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        stopped_by: list[str] = []
        reloads: list[asyncio.Task[None]] = []

        def stop(sig: signal.Signals) -> None:
            stopped_by.append(sig.name)
            done.set()

        loop.add_signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGINT, stop, signal.SIGINT)
        loop.add_signal_handler(signal.SIGHUP, lambda: reloads.append(loop.create_task(reload())))
        try:
            if ready is not None:
                ready()
            await done.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            for task in reloads:
                with contextlib.suppress(Exception):
                    await task
            await self.stop()
        return stopped_by[0] if stopped_by else "the event loop ended"

    async def stop(self) -> None:
        """Stop everything: the session first (no automatic restart starts), then the
        monitors, unhooked from delivery first (pending flight recordings are written),
        delivery, the exporter, the outbox. A monitor that fails to stop is logged; the
        rest still stops. Once: a second stop does nothing."""
        if self._stopped:
            return
        self._stopped = True
        if self._session is not None:
            await self._session.close()
        monitors = list(self.monitors)
        if self.hub is not None:
            for monitor in monitors:
                self.hub.detach(monitor)
        results = await asyncio.gather(*(m.stop() for m in monitors), return_exceptions=True)
        for monitor, result in zip(monitors, results, strict=True):
            if isinstance(result, BaseException):
                log.error("%s: the monitor did not stop cleanly: %r", monitor.name, result)
        for recorder in self._accounts.values():
            recorder.close()
        if self.usage is not None:
            await asyncio.to_thread(self.usage.close)
        if self.hub is not None:
            await self.hub.close()
        if self.metrics is not None:
            await self.metrics.close()
        if self.hub is not None:
            self.hub.outbox.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


def dashboard_hub(settings: NotifySettings | None) -> NotifyHub | None:
    """The dashboard's delivery, or None: no notifiers, ``dashboard_delivery = "never"``,
    or "auto" while a ``gpumon watch`` runs (it delivers; the dashboard would page twice).
    In "auto" a watch started later takes over (the hub stands by while it runs)."""
    if settings is None or not settings.notifiers or settings.dashboard_delivery == "never":
        return None
    from gpumon.backends.notify.hub import NotifyHub, default_outbox
    from gpumon.backends.notify.outbox import Outbox
    from gpumon.backends.notify.watch import watch_running

    if settings.dashboard_delivery == "auto" and watch_running():
        return None
    hub = NotifyHub(settings, Outbox(default_outbox(settings)))
    if settings.dashboard_delivery == "auto":
        hub.standby = watch_running
    return hub
