"""``NotifyHub``: from the monitors' alerts to the notifiers, through the outbox.

    hub = NotifyHub(settings, Outbox(path))
    hub.attach(monitor)            # before or after monitor.start()
    hub.attach_session(session)    # who restarted a job, and whether it worked
    await hub.start()              # one delivery task per notifier
    ...
    await hub.close()

After every change of a monitor (from its third sample, or ``SETTLE_S`` after it was
attached, whichever comes first) the hub asks the ``IncidentTracker`` what changed; each
open / update / resolve is stored in the outbox for every notifier that wants it (its
``min_severity``, ``hosts`` and ``kinds``) and the notifier's task delivers it (see
``outbox`` for the order, the grouping and the retries). A host's first alert in a
notifier's ``group_s`` window goes out at once; the ones after it wait for the window's
end and go out together. A new incident's first message to a notifier waits its
``settle_window`` (a few seconds for a pager, a phone, a chat), and the incident's events
in that time join it: the memory warning and the CUDA OOM 2 s later are one message, which
the notifier says as the OOM's (``notifiers``). The wait is a row's ``not_before`` in the
outbox, so a restarted watch keeps it. ``max_per_minute`` holds messages back (it never
drops one). Alertmanager notifiers also get every open incident again every ``resend_s``.

``clock`` (the wall clock) dates the events and the outbox's rows. Every wait is timed on
``ticks`` (monotonic), so a wall-clock step changes none of them: a host's first alerts
(its third sample or ``SETTLE_S``, on the monitor's own ``watch_clock``), the group and
settle windows, the retries, the rate limit, the re-sends, and how long an incident has
been open and its alerts over (``min_open_s``, ``resolve_after_s``: the tracker's
``tick``). The waits the outbox keeps across a restart (a row's ``not_before``, a
notifier's ``retry_at``) are on both clocks: on the monotonic one here, as wall times in
the file. Read back by a later watch, a wall time is taken as a time from now, at most
its window ahead (the notifier's settle or group window, ``retry_max_s``): a clock that
was stepped in between holds no page back by the step's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.backends.backoff import backoff_s
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.listeners import Listeners
from gpumon.backends.model import Health
from gpumon.backends.monitor.report import active_incidents
from gpumon.backends.monitor.state import ticks_for
from gpumon.backends.notify.event import IncidentEvent, incident_key, incident_link, this_host
from gpumon.backends.notify.incidents import IncidentTracker
from gpumon.backends.notify.notifiers import (
    DeliveryError,
    HttpRequest,
    command_input,
    render,
    terminal_bytes,
)
from gpumon.backends.notify.outbox import Outbox, OutboxRow

if TYPE_CHECKING:
    from gpumon.backends.actions.run import JobRun
    from gpumon.backends.actions.session import Session
    from gpumon.backends.monitor.state import HostMonitor

__all__ = ["NotifyHub", "deliver", "test_event"]

log = logging.getLogger(__name__)

# Answers that refuse the message itself: it is set aside (kept, counted, said) so the
# messages behind it still go out. 401/403/404 (a wrong key or URL) fail every message
# alike: those are retried until the config is fixed and reloaded.
REJECTED = frozenset({400, 413, 422})
SETTLE_SAMPLES = 3  # a host's alerts count from its third sample (its logs' backlog read),
SETTLE_S = 10.0  # or this long after it was attached, whatever it sent: a host that is
# down, or whose nvidia-smi hangs, from the start never sends a third sample
TICK_S = 1.0
STANDBY_POLL_S = 5.0


def _post(req: HttpRequest, timeout: float) -> None:
    request = urllib.request.Request(req.url, data=req.body, headers=dict(req.headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        body = e.read(300).decode("utf-8", "replace").strip()
        retry_after = None
        if e.code == 429 or e.code >= 500:
            with contextlib.suppress(TypeError, ValueError):
                retry_after = float(e.headers.get("Retry-After", ""))
            if e.code == 429 and retry_after is None:
                retry_after = 30.0  # PagerDuty: back off on 429 even without a hint
        raise DeliveryError(
            f"HTTP {e.code} from {req.url}: {body[:200]}", retry_after, rejected=e.code in REJECTED
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DeliveryError(f"cannot reach {req.url}: {reason}") from None


async def deliver(
    config: NotifierConfig,
    events: Sequence[IncidentEvent],
    now: float,
    env: Mapping[str, str],
    terminal: Callable[[bytes], None] | None = None,
) -> None:
    """Send one message (``events`` of one host) the way ``config.kind`` does; raises
    DeliveryError when the receiver did not take it. ``terminal``: where the ``terminal``
    kind writes instead of its ``tty`` (the dashboard: between its own frames)."""
    if config.kind == "command":
        await _run_command(config, command_input(events, now))
    elif config.kind == "terminal":
        data = terminal_bytes(events, tmux=bool(env.get("TMUX")))
        if terminal is not None:
            terminal(data)
            return
        try:
            await asyncio.to_thread(_write_tty, config.tty, data)
        except OSError as e:
            raise DeliveryError(f"cannot write to {config.tty}: {e.strerror or e}") from None
    else:
        for req in render(config, events, now, env):
            await asyncio.to_thread(_post, req, config.timeout_s)


def _write_tty(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


async def _run_command(config: NotifierConfig, data: bytes) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *config.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        raise DeliveryError(f"cannot run {config.command[0]}: {e.strerror or e}") from None
    try:
        async with asyncio.timeout(config.timeout_s):
            _, err = await proc.communicate(data)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise DeliveryError(
            f"{config.command[0]} did not finish in {config.timeout_s:g} s"
        ) from None
    except asyncio.CancelledError:  # the hub closing: the command does not outlive it
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()  # reaped while the loop runs (its transport closes with it)
        raise
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip()[-200:]
        raise DeliveryError(f"{config.command[0]} exited {proc.returncode}: {tail}")


def test_event(name: str, now: float) -> IncidentEvent:
    """The event ``gpumon notify test NAME`` sends."""
    host = this_host()
    return IncidentEvent(
        event="test",
        key=incident_key(host, None, None, f"test-{name}"),
        host=host,
        gpu=None,
        job=None,
        kind="test",
        severity=Health.WARNING,
        cause=f"notifier {name} reaches you (sent by gpumon notify test)",
        action=None,
        resolved_by=None,
        opened_at=now,
        time=now,
        recording=None,
        gpumon_host=host,
    )


class NotifyHub:
    def __init__(
        self,
        settings: NotifySettings,
        outbox: Outbox,
        *,
        clock: Callable[[], float] = time.time,
        ticks: Callable[[], float] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.outbox = outbox
        self.clock = clock
        self.ticks = ticks if ticks is not None else ticks_for(clock)
        self.env = os.environ if env is None else env
        self.tracker = IncidentTracker(
            settings.min_open_s, this_host(), resolve_after_s=settings.resolve_after_s
        )
        self.tracker.restore(outbox.open_incidents(), clock(), self.ticks())
        self.changes: Listeners[[IncidentEvent]] = Listeners("incident listener")
        self.delivered: Listeners[[str, list[IncidentEvent]]] = Listeners("delivery listener")
        self.monitors: list[HostMonitor] = []
        # not yet settled -> attached at (the monitor's ``watch_clock``)
        self._settling: dict[HostMonitor, float] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None
        # On ``ticks``: (notifier, host) -> group window start; when each notifier sent;
        # outbox row id -> when it falls due (``_row_due``); notifier -> when it may try
        # again after a failure (``_retry_due``).
        self._window: dict[tuple[str, str], float] = {}
        self._due: dict[int, float] = {}
        self._retry_until: dict[str, float] = {}
        # (notifier, incident key) -> when its first message, waiting to settle, goes out
        # (``ticks``); read back from the outbox too (a watch restarted while one waited).
        self._settling_until = self._waiting_firsts()
        self._sent: dict[str, deque[float]] = {}
        self._singly: set[str] = set()  # notifiers sending one event a message for now
        self._resent: dict[str, float] = {}
        # Open incidents each notifier was told of (``_route``); those restored from the
        # outbox were told before this hub (or filtered out then: no telling which).
        self._told: dict[str, set[str]] = {}
        self._told_before = set(self.tracker.open)
        self.terminal: Callable[[bytes], None] | None = None  # see ``deliver``
        # The dashboard's "auto" delivery: while this says True (a `gpumon watch` runs and
        # pages for the same alerts) nothing is queued or sent here; the watch delivers.
        self.standby: Callable[[], bool] | None = None
        self._bundles: set[asyncio.Task[None]] = set()  # bundles being written
        self.bundles_folder: Path | None = None  # None: $XDG_STATE_HOME/gpumon/bundles

    # --- wiring -------------------------------------------------------------------------
    def attach(self, monitor: HostMonitor) -> None:
        self.monitors.append(monitor)
        self._settling[monitor] = monitor.watch_clock()
        monitor.add_listener(self._on_monitor)

    def detach(self, monitor: HostMonitor) -> None:
        monitor.listeners.remove(self._on_monitor)
        self._settling.pop(monitor, None)
        if monitor in self.monitors:
            self.monitors.remove(monitor)

    def attach_session(self, session: Session) -> None:
        session.runs.finished.add(self._on_run)
        self.tracker.restarting = session.restarting

    def _on_run(self, run: JobRun) -> None:
        """A restart ended: what gpumon did is said now, with its outcome."""
        outcome = run.outcome
        if outcome is None or run.plan.action == "stop":
            return
        events = self.tracker.note_restart(
            run.plan.host,
            run.plan.job.name,
            automatic=run.automatic is not None,
            ok=outcome.ok,
            at=self.clock(),
            pid=outcome.pid,
            took_s=outcome.duration_s,
            why=None if outcome.ok else outcome.message,
        )
        self.publish(events)

    def _settled(self, monitor: HostMonitor) -> bool:
        """Whether ``monitor``'s alerts count yet: from its third sample once every source
        answered once (``first_rounds_done``: who holds a GPU's memory is the Proxmox
        host's list, not the container's view), or ``SETTLE_S`` after it was attached,
        whatever it sent (a host broken from its start is paged too)."""
        since = self._settling.get(monitor)
        if since is None:
            return True
        early = monitor.samples < SETTLE_SAMPLES or not monitor.first_rounds_done()
        if early and monitor.watch_clock() - since < SETTLE_S:
            return False
        del self._settling[monitor]
        return True

    def observe_settled(self) -> None:
        """Observe the monitors that settled by time since the last tick: a silent host
        does not change, so nothing else would look at its alerts."""
        for monitor in list(self._settling):
            if self._settled(monitor):
                self._on_monitor(monitor)

    def _on_monitor(self, monitor: HostMonitor) -> None:
        if not self._settled(monitor):
            return
        windows = ((t0, t1, str(path)) for t0, t1, path in monitor.recorder.recordings())
        self.tracker.note_recordings(monitor.name, windows)
        found = active_incidents(monitor)
        alerts = monitor.alerts.active()
        events = self.tracker.observe(monitor.name, alerts, self.clock(), found, tick=self.ticks())
        if self.settings.bundle_on_critical:
            events = [self._bundled(monitor, ev) for ev in events]
        self.publish(events)

    def _bundled(self, monitor: HostMonitor, ev: IncidentEvent) -> IncidentEvent:
        """An incident that becomes critical (opens critical, or a warning that an OOM
        made critical) gets its bundle (``[watch] bundle_on_critical``): written in the
        background, its path in the event at once and in the incident's later events
        (the message goes out now; the file follows within the bundle's minute)."""
        if ev.severity is not Health.CRITICAL or ev.bundle is not None:
            return ev
        if ev.event != "open" and (ev.event != "update" or _was_critical(ev)):
            return ev
        ev = self._bundle(monitor, ev)
        self.tracker.note_bundle(ev.key, ev.bundle)
        return ev

    def _bundle(self, monitor: HostMonitor, ev: IncidentEvent) -> IncidentEvent:
        from gpumon.backends.bundle.build import BundleOptions, bundle_monitor, default_name
        from gpumon.backends.paths import bundles_dir

        folder = self.bundles_folder or bundles_dir()
        path = folder / default_name(f"{ev.host}-{ev.kind}", ev.opened_at)
        if path.exists():
            return dataclasses.replace(
                ev, bundle=str(path), attachments=(*ev.attachments, str(path))
            )
        key = next(
            (
                a.key
                for a in monitor.alerts.active()
                if a.kind == ev.kind and a.gpu == ev.gpu and a.job == ev.job
            ),
            None,
        )

        async def write() -> None:
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                await bundle_monitor(monitor, BundleOptions(path, key), self.settings)
            except Exception as e:  # noqa: BLE001 - a bundle that fails must not stop the paging
                log.warning("%s: bundle %s not written: %s", ev.host, path, e)

        try:
            task = asyncio.get_running_loop().create_task(write(), name=f"bundle {path.name}")
        except RuntimeError:  # no loop (a test driving the hub by hand): no bundle
            return ev
        self._bundles.add(task)
        task.add_done_callback(self._bundles.discard)
        return dataclasses.replace(ev, bundle=str(path), attachments=(*ev.attachments, str(path)))

    # --- queueing -----------------------------------------------------------------------
    def publish(self, events: Sequence[IncidentEvent]) -> None:
        """Store each event for every notifier that wants it (``_route``) and wake their
        tasks."""
        now, t = self.clock(), self.ticks()
        standby = bool(events) and self._standing_by()
        for ev in events:
            ev = self.linked(ev)
            self.outbox.save_incident(ev)
            self.changes.emit(ev)
            if standby:  # the watch tells the notifiers (or filters it): as if told before
                if ev.event != "resolve":
                    self._told_before.add(ev.key)
            else:
                for cfg in self.settings.notifiers.values():
                    routed = self._route(cfg, ev)
                    if routed is None:
                        continue
                    due = self._not_before(cfg, routed, t)  # kept as a wall time in the file
                    row = self.outbox.add(cfg.name, routed, now, now + (due - t))
                    self._due[row] = due
                    wake = self._wake.get(cfg.name)
                    if wake is not None:
                        wake.set()
            if ev.event == "resolve":  # ended: the key may open again, a new incident then
                self._told_before.discard(ev.key)
                for told in self._told.values():
                    told.discard(ev.key)
                for name in self.settings.notifiers:
                    self._settling_until.pop((name, ev.key), None)

    def linked(self, ev: IncidentEvent, *, sending: bool = False) -> IncidentEvent:
        """``ev`` with its incident page's link (``[watch] public_url``; None without it).
        ``sending``: the link as a message carries it, with the page's token where
        ``[watch] link_token`` says so (read now: it is never stored)."""
        settings = self.settings
        if settings.public_url is None:
            return dataclasses.replace(ev, url=None) if ev.url else ev
        token = None
        if sending and settings.link_token and settings.token_env:
            token = self.env.get(settings.token_env) or None
        return dataclasses.replace(ev, url=incident_link(settings.public_url, ev.key, token))

    def _route(self, cfg: NotifierConfig, ev: IncidentEvent) -> IncidentEvent | None:
        """``ev`` as ``cfg`` is told it, None when it is not. The first event of an
        incident a notifier hears opens it there (a notifier of critical incidents hears
        the memory warning's escalation to the OOM as ``[CRITICAL]``, not as an update of
        a warning it never heard); a notifier told of an incident hears its resolve
        whatever the filter says of the resolve (the cause's kind may have changed), and
        one never told does not."""
        told = self._told.setdefault(cfg.name, set())
        wanted = cfg.wants(ev.host, ev.kind, ev.severity)
        if ev.event == "resolve":  # ``publish`` forgets the key after it
            return ev if ev.key in told or (ev.key in self._told_before and wanted) else None
        if not wanted:
            return None
        if ev.event == "update" and ev.key not in told and ev.key not in self._told_before:
            ev = dataclasses.replace(ev, event="open", previous=None)
        if ev.event != "test":
            told.add(ev.key)
        return ev

    def _standing_by(self) -> bool:
        return self.standby is not None and self.standby()

    def _not_before(self, cfg: NotifierConfig, ev: IncidentEvent, t: float) -> float:
        """When ``ev`` (as ``cfg`` is told it) may go out, on ``ticks`` (``t``: now): with
        the incident's first message while that waits to settle; else at once, or at the
        end of the host's ``group_s`` window; an incident's first message no sooner than
        its settle window (so the cause that follows is in it, and it is late by that
        window at most)."""
        settling = self._settling_until.get((cfg.name, ev.key))
        if settling is not None and settling > t:
            return settling
        start = self._window.get((cfg.name, ev.host))
        window = cfg.group_window
        if start is None or t - start >= window:
            self._window[(cfg.name, ev.host)] = at = t
        else:
            at = start + window
        if ev.event == "open" and cfg.settle_window > 0:
            at = max(at, t + cfg.settle_window)
            self._settling_until[(cfg.name, ev.key)] = at
        return at

    def _row_due(self, row: OutboxRow) -> float:
        """When ``row`` falls due, on ``ticks``: as this hub queued it; a row an earlier
        watch queued at its ``not_before`` taken as a time from now, never more than its
        notifier's window (settle or group) ahead (one already due stays as long past:
        the rows of one message are due together)."""
        due = self._due.get(row.id)
        if due is None:
            cfg = self.settings.notifiers.get(row.notifier)
            window = max(cfg.settle_window, cfg.group_window) if cfg is not None else 0.0
            ahead = min(row.not_before - self.clock(), window)
            due = self._due[row.id] = self.ticks() + ahead
        return due

    def _retry_due(self, name: str) -> float:
        """When notifier ``name`` may try again after failures, on ``ticks``: as this hub
        backed it off; one an earlier watch backed off at its ``retry_at`` taken as a
        time from now, never more than ``retry_max_s`` ahead."""
        due = self._retry_until.get(name)
        if due is None:
            ahead = min(self.outbox.retry_at(name) - self.clock(), self.settings.retry_max_s)
            due = self._retry_until[name] = self.ticks() + ahead
        return due

    def _waiting_firsts(self) -> dict[tuple[str, str], float]:
        """The first messages in the outbox still waiting to settle, by (notifier, key),
        when each goes out (``_row_due``)."""
        t = self.ticks()
        out = {}
        for row in self.outbox.pending():
            if row.event.event == "open" and (due := self._row_due(row)) > t:
                out[(row.notifier, row.event.key)] = due
        return out

    # --- delivery -----------------------------------------------------------------------
    async def start(self) -> None:
        for cfg in self.settings.notifiers.values():
            self._start_notifier(cfg)
        self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="notify-tick")

    def _start_notifier(self, cfg: NotifierConfig) -> None:
        self._wake[cfg.name] = asyncio.Event()
        self._tasks[cfg.name] = asyncio.get_running_loop().create_task(
            self._deliver_loop(cfg.name), name=f"notify-{cfg.name}"
        )

    async def reconfigure(self, settings: NotifySettings) -> None:
        """New notifier settings (SIGHUP): changed and removed notifiers restart, new ones
        start; undelivered rows of a removed notifier stay in the outbox."""
        old = self.settings.notifiers
        self.settings = settings
        self.tracker.min_open_s = settings.min_open_s
        self.tracker.resolve_after_s = settings.resolve_after_s
        for name in list(self._tasks):
            if old.get(name) != settings.notifiers.get(name):
                await self._stop_notifier(name)
        for cfg in settings.notifiers.values():
            if cfg.name not in self._tasks:
                self._start_notifier(cfg)

    async def _stop_notifier(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        self._wake.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        for task in list(self._bundles):  # a bundle being written is cut short, not awaited
            task.cancel()
        for name in list(self._tasks):
            await self._stop_notifier(name)
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for monitor in list(self.monitors):
            self.detach(monitor)

    async def _wait(self, name: str, timeout: float | None) -> None:
        wake = self._wake.get(name)
        if wake is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()

    async def _deliver_loop(self, name: str) -> None:
        while True:
            try:
                await self._deliver_some(name)
            except asyncio.CancelledError:
                raise
            except Exception:  # a locked or broken outbox file: log it, keep trying
                log.exception("notify.%s: delivery loop failed; retrying in 5 s", name)
                await asyncio.sleep(5.0)

    async def _deliver_some(self, name: str) -> None:
        sent = self._sent.setdefault(name, deque())
        while True:
            cfg = self.settings.notifiers[name]
            if self._standing_by():
                await asyncio.sleep(STANDBY_POLL_S)
                continue
            self._wake[name].clear()
            retry = self.retry_in(name)
            if retry > 0:
                await self._wait(name, retry)
                if self.retry_in(name) > 0:
                    continue  # woken early by a new event: still backing off
            now, t = self.clock(), self.ticks()
            while sent and sent[0] <= t - 60.0:
                sent.popleft()
            if len(sent) >= cfg.max_per_minute:
                await asyncio.sleep(sent[0] + 60.0 - t)
                continue
            rows, wait = self.next_message(name)
            if rows and name in self._singly:
                rows = rows[:1]  # a grouped message was refused: find the one it was
            if not rows:
                self._singly.discard(name)
                await self._wait(name, wait)
                continue
            events = [r.event for r in rows]
            ids = [r.id for r in rows]
            try:
                sending = [self.linked(ev, sending=True) for ev in events]
                await deliver(cfg, sending, now, self.env, self.terminal)
            except DeliveryError as e:
                if e.rejected and len(rows) > 1:
                    self._singly.add(name)
                    log.warning("notify.%s: %s; sending that message's events one by one", name, e)
                    continue
                if e.rejected:
                    self._singly.discard(name)  # found: the rest may be grouped again
                    self.outbox.mark_rejected(name, ids, str(e), self.clock())
                    self._forget_rows(ids)
                    log.error(
                        "notify.%s: %s; the receiver refused this message, set aside: %s",
                        name, e, ", ".join(f"{ev.event} {ev.key}" for ev in events),
                    )  # fmt: skip
                    continue
                failures = self.outbox.failures(name)
                delay = e.retry_after
                if delay is None:
                    delay = backoff_s(
                        failures, first=self.settings.retry_first_s, cap=self.settings.retry_max_s
                    )
                self.back_off(name, ids, str(e), delay)
                log.warning("notify.%s: %s; retrying in %.3g s", name, e, delay)
                continue
            sent.append(t)
            self.mark_sent(name, ids)
            self.delivered.emit(name, events)

    def next_message(self, name: str) -> tuple[list[OutboxRow], float | None]:
        """The rows of notifier ``name``'s next message, due now by ``ticks``
        (``Outbox.due_batch``; ``_row_due``); else ([], seconds until one falls due),
        ([], None) when nothing waits."""
        t = self.ticks()
        rows, due = self.outbox.due_batch(name, t, self._row_due)
        return rows, None if due is None else max(due - t, 0.0)

    def retry_in(self, name: str) -> float:
        """Seconds until notifier ``name`` may try again after failures (0: now)."""
        return max(self._retry_due(name) - self.ticks(), 0.0)

    def back_off(self, name: str, ids: Sequence[int], error: str, delay: float) -> None:
        """A delivery of rows ``ids`` failed: the notifier waits ``delay`` seconds (on
        ``ticks``; the file keeps its wall time, for a later watch and ``notify
        status``)."""
        at = self.clock()
        self.outbox.mark_failed(name, list(ids), error, at, at + delay)
        self._retry_until[name] = self.ticks() + delay

    def mark_sent(self, name: str, ids: Sequence[int]) -> None:
        """Rows ``ids`` were delivered: the notifier is backed off no longer."""
        self.outbox.mark_sent(name, list(ids), self.clock())
        self._retry_until.pop(name, None)  # the file's says 0 now
        self._forget_rows(ids)

    def _forget_rows(self, ids: Sequence[int]) -> None:
        """Rows that left the queue (sent, or set aside) need no due time any more."""
        for i in ids:
            self._due.pop(i, None)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = self.clock()
            try:
                self.observe_settled()
                self.publish(self.tracker.due(now, self.ticks()))
                for cfg in list(self.settings.notifiers.values()):
                    if cfg.kind == "alertmanager" and not self._standing_by():
                        await self._resend(cfg, now)
            except Exception:
                log.exception("notify: periodic resolve / re-send failed")

    async def _resend(self, cfg: NotifierConfig, now: float) -> None:
        """Alertmanager forgets an alert nobody re-sends: every open incident again."""
        t = self.ticks()
        last = self._resent.get(cfg.name)
        if (last is not None and t - last < cfg.resend_s) or self.outbox.pending(cfg.name):
            return
        self._resent[cfg.name] = t
        events = [  # the labels now only: the alert of old ones was ended when they changed
            self.linked(dataclasses.replace(inc.event, previous=None), sending=True)
            for inc in self.tracker.open.values()
            if cfg.wants(inc.event.host, inc.event.kind, inc.event.severity)
        ]
        if events:
            try:
                await deliver(cfg, events, now, self.env)
            except DeliveryError as e:
                log.info("notify.%s: re-send: %s", cfg.name, e)


def _was_critical(ev: IncidentEvent) -> bool:
    """Whether the incident of update ``ev`` was critical before it."""
    return ev.previous is None or ev.previous[1] is Health.CRITICAL


def default_outbox(settings: NotifySettings) -> Path:
    from gpumon.backends.paths import outbox_file

    return Path(settings.outbox).expanduser() if settings.outbox else outbox_file()
