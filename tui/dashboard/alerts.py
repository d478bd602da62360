"""The dashboard's side of alerts: notifications and the bell for new incidents, the
strip, the history screen, and the flight recorder's "incident recorded" notice.

``AlertPresenter`` is the dashboard screen's: it notifies through the screen and owns the
strip. The alert engines call ``_on_alert`` once per new alert and once per escalation
(never for the backlog read at start), on the event loop, from inside the monitor: it
only notifies, rings and marks the strip for redrawing.
Alerts are shown as incidents (``backends.alerts.incident``): the toast, the strip and the
history say the incident's headline, and the bell rings once per incident.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.screen import Screen

from gpumon.backends.alerts.incident import Fix, Incident, IncidentBell, by_urgency, incidents
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.untrusted import printable
from gpumon.tui.dashboard.actions import alert_job
from gpumon.tui.screens import AlertHistoryScreen, DetailScreen
from gpumon.tui.views.alert_cells import (
    incident_notice,
    incident_title,
    strip_incident,
    toast_text_width,
)
from gpumon.tui.widgets import AlertStrip, StripView

if TYPE_CHECKING:
    from gpumon.backends.config import JobConfig
    from gpumon.backends.monitor import HostMonitor, ReplaySource
    from gpumon.tui.views import Palette

CRITICAL_TIMEOUT_S = 10.0  # the strip keeps showing it after the toast is gone
WARNING_TIMEOUT_S = 6.0
NOTICE_LINES = 3  # a toast's lines of text: never more over the GPU rows (a dialog: its most)
# The fixes' keys that act on the host under the cursor, by the action each one runs
_HOST_KEYS = {"d": "doctor", "w": "swap_torch"}


class AlertPresenter:
    """The alerts of ``monitors`` on the dashboard ``screen``.

    ``palette_of()``: the theme's colours; ``refresh()``: redraw the dashboard;
    ``mounted()``: whether the screen can show anything yet; ``fixable()``: the job ``r``
    would restart now, when it can (the strip offers it); ``killable(host)``: whether
    ``K`` may act on that host now (the strip offers "K stop jupyter-lab"); ``on_restart``: ``r``
    in the history. ``replay``: the recording on show (no bell, nothing announced while seeking).
    """

    def __init__(
        self,
        screen: Screen[None],
        monitors: list[HostMonitor],
        *,
        bell: bool,
        replay: ReplaySource | None,
        palette_of: Callable[[], Palette],
        refresh: Callable[[], None],
        mounted: Callable[[], bool],
        fixable: Callable[[], tuple[HostMonitor, JobConfig] | None],
        on_restart: Callable[[HostMonitor, Alert], None],
        killable: Callable[[str], bool] = lambda host: False,
        acts_on_host: Callable[[str, str], bool] = lambda name, host: False,
        stoppable: Callable[[str, str], bool] = lambda host, job: False,
    ) -> None:
        self.screen = screen
        self.monitors = monitors
        self.bell_enabled = bell and replay is None  # a replay does not ring
        self.replay = replay
        self.palette_of = palette_of
        self.refresh_dashboard = refresh
        self.mounted = mounted
        self.fixable = fixable
        self.killable = killable
        self.acts_on_host = acts_on_host
        self.stoppable = stoppable
        self.on_restart = on_restart
        self.strip = AlertStrip(id="alert-strip")
        self._early_alerts: list[Alert] = []
        self._pending_notices: list[Alert] = []
        self._bell = IncidentBell()
        self.bells = 0  # rung so far (tests read it)
        for m in self.monitors:  # before the monitors start: no alert is missed
            m.alerts.add_listener(self._on_alert)
            m.recorder.written_listeners.add(self._on_recording_written)

    def announce_early_alerts(self) -> None:
        """Alerts raised while the screen was being set up (call once mounted)."""
        early, self._early_alerts = self._early_alerts, []
        for alert in early:
            self.announce(alert)

    def _on_alert(self, alert: Alert) -> None:
        if self.replay is not None and self.replay.seeking:
            return  # a replay playing ahead to a jump's target: the strip shows where it is
        if not self.mounted():
            self._early_alerts.append(alert)
            return
        self.announce(alert)

    def announce(self, alert: Alert) -> None:
        """A new (or escalated) alert: the bell when it starts a critical incident (once
        per incident, not per alert), and a notification with its incident's headline
        (none for a note: the alert list and the history show it).

        Alerts that arrive together (an OOM brings its log line, the memory drop and the
        crash at once) share one notification, so toasts never bury the GPU rows."""
        monitor = next((m for m in self.monitors if m.name == alert.host), None)
        active = monitor.alerts.active() if monitor is not None else [alert]
        if self._bell.rings(alert, active):
            self.ring_bell(alert)
        if not self._pending_notices:
            self.screen.call_later(self._notify_pending)
        self._pending_notices.append(alert)
        self.screen.call_later(self.refresh_dashboard)  # the strip, the header's count

    def _notify_pending(self) -> None:
        pending, self._pending_notices = self._pending_notices, []
        alerts = [a for a in pending if a.severity.alarming]  # a note is no news: no toast
        if not alerts:
            return
        worst = max(alerts, key=lambda a: a.severity.rank)
        found = self.incidents_now()
        incident = next((i for i in found if worst.key in i.keys), None)
        if incident is None:  # ended already (an escalation that cleared at once)
            incident = next(iter(incidents([worst])))
        critical = incident.severity is Health.CRITICAL
        prefix = f"{printable(incident.host)}: " if len(self.monitors) > 1 else ""
        # cut to the toast's size before its fixes: the strip and the history have all of it
        # (the detail view's toasts have one line of text, over its title)
        app = self.screen.app
        lines = 1 if isinstance(app.screen, DetailScreen) else NOTICE_LINES
        text = incident_notice(incident, toast_text_width(app.size.width), lines, prefix)
        title = incident_title(incident)
        others = {i.cause.key for a in alerts for i in found if a.key in i.keys}
        others.discard(incident.cause.key)
        if others:
            title = f"{title} (+{len(others)} more: a)"
        # One alert toast at a time: a newer one replaces the last (the strip and the
        # history screen keep every alert), so toasts never stack over the GPU rows.
        self.screen.app.clear_notifications()
        self.screen.notify(
            text,
            title=title,
            severity="error" if critical else "warning",
            timeout=CRITICAL_TIMEOUT_S if critical else WARNING_TIMEOUT_S,
        )

    def ring_bell(self, alert: Alert) -> None:
        """The terminal bell for a new critical ``alert``: the one place gpumon rings
        (off with ``--no-bell``, and in a replay)."""
        if self.bell_enabled:
            self.bells += 1
            self.screen.app.bell()

    def _on_recording_written(self, path: Path) -> None:
        if self.mounted():
            self.screen.notify(
                f"incident recorded: {printable(str(path))}",
                title="Flight recorder",
                timeout=12,
            )

    # --- incidents and the strip -------------------------------------------------------
    def incidents_now(self) -> list[Incident]:
        """Every host's active alerts as incidents, the most urgent first; an incident's
        ``fix`` is set only for a job its host's config can restart."""
        restartable = {(m.name, j.name) for m in self.monitors for j in m.host.jobs if j.start}
        out: list[Incident] = []
        for m in self.monitors:
            names = {job for host, job in restartable if host == m.name}
            out += incidents(m.alerts.active(), restartable=names)
        return by_urgency(out)

    def strip_incident(self) -> Incident | None:
        """The incident the strip shows (None: hidden)."""
        return strip_incident(self.incidents_now())[0]

    def strip_view(self) -> StripView | None:
        """The strip's incident over every host, or None (hidden), with the fixes the
        screen can offer for it now (``strip_fixes``)."""
        incident, more = strip_incident(self.incidents_now())
        if incident is None:
            return None
        return StripView(incident, more, self.palette_of(), fixes=self.strip_fixes(incident))

    def strip_fixes(self, incident: Incident) -> tuple[Fix, ...]:
        """``incident``'s fixes that can act now: ``r restart drafter`` when ``r`` would
        restart the job it is about, ``K stop jupyter-lab`` when ``K`` may act on its host,
        ``s stop drafter (frees GPUs 5-7)`` when ``s`` would stop that job, ``d`` and ``w``
        when the host under the cursor is its host; advice ("reboot the node") always."""
        return tuple(f for f in incident.fixes if self._offered(f, incident))

    def _offered(self, fix: Fix, incident: Incident) -> bool:
        if fix.key is None:
            return True
        if fix.key == "K":
            return self.killable(incident.host)
        if fix.key in _HOST_KEYS:
            return self.acts_on_host(_HOST_KEYS[fix.key], incident.host)
        if fix.key == "s":
            return incident.job is not None and self.stoppable(incident.host, incident.job)
        target = self.fixable()
        if fix.key != "r" or target is None:
            return False
        monitor, job = target
        return monitor.name == incident.host and alert_job(monitor, incident.cause) == job

    def refresh_strip(self) -> bool:
        """Show the alert that matters most now; returns whether the strip changed."""
        if not self.mounted():
            return False
        return self.strip.show(self.strip_view())

    # --- the history --------------------------------------------------------------------
    def open_history(self) -> None:
        if isinstance(self.screen.app.screen, AlertHistoryScreen):
            return
        self.screen.app.push_screen(
            AlertHistoryScreen(
                self.monitors,
                palette_of=self.palette_of,
                on_change=self._acknowledged,
                on_restart=self.on_restart,
            )
        )

    def _acknowledged(self) -> None:
        self.refresh_strip()
        self.refresh_dashboard()
