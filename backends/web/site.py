"""``IncidentSite``: the incident page's routes, answered on ``gpumon watch``'s listener
(the exporter's ``MetricsServer.pages``; ``/metrics`` stays the exporter's).

    /                    the hosts, their GPUs, the active incidents (most urgent first)
    /incident/KEY        one incident in full, its plots, its bundle's link
    /bundle/KEY          its bundle, written now (the same scrubbing as ``gpumon bundle``)
    /api/state           JSON: ``snapshot --json``'s object per host, and the incidents
    /api/incident/KEY    JSON: the incident as ``snapshot --json`` says it, its alerts

KEY is the notifiers' incident key (``incident_key``: ``HOST/gpuN/JOB/KIND``, named
when it opened), the one in every message's link. An incident that is open in the notify
hub is found by its alerts; one that ended (or one the hub never heard of) by its key's
host, GPU, job and kind among the host's alert history. Every route but ``/metrics``
asks ``access.allowed`` first (401 otherwise). Nothing here changes a machine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumon.backends.alerts.incident import Incident, by_urgency
from gpumon.backends.exporter.metrics import Request, Response
from gpumon.backends.monitor.report import (
    active_incidents,
    incident_json,
    known_incidents,
    snapshot_json,
)
from gpumon.backends.notify.event import (
    BUNDLE_PATH,
    INCIDENT_PATH,
    incident_key,
)
from gpumon.backends.web.access import allowed
from gpumon.backends.web.pages import Links, Listed, escaped, incident_page, index_page, page

if TYPE_CHECKING:
    from gpumon.backends.config.notify import NotifySettings
    from gpumon.backends.monitor.state import HostMonitor
    from gpumon.backends.notify.hub import NotifyHub

__all__ = ["CSP", "IncidentSite"]

log = logging.getLogger(__name__)

# Nothing loads from anywhere: no script, no image, no font, no frame; inline styles only.
CSP = (
    "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HTML = "text/html; charset=utf-8"
JSON = "application/json"
API_PATH = "/api"


def _headers(**more: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        **more,
    }


def _html(text: str, status: str = "200 OK") -> Response:
    return Response(status, HTML, text.encode(), _headers())


def _json(data: Any) -> Response:
    return Response("200 OK", JSON, json.dumps(data, indent=1).encode(), _headers())


def _not_found(what: str) -> Response:
    return _html(
        page("not found · gpumon", f"<h1>not found</h1><p>{escaped(what)}</p>", refresh=False),
        "404 Not Found",
    )


class IncidentSite:
    """The routes above over ``monitors()`` (a callable: a reload's new hosts count) and
    the hub's open incidents. ``settings()``: the ``[watch]`` settings now (a reload's);
    ``env``: where the token's variable is read."""

    def __init__(
        self,
        monitors: Callable[[], Sequence[HostMonitor]],
        hub: NotifyHub | None,
        settings: Callable[[], NotifySettings],
        listen: str,
        *,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        bundles_folder: Path | None = None,
    ) -> None:
        self.monitors = monitors
        self.hub = hub
        self.settings = settings
        self.listen = listen
        self.env = os.environ if env is None else env
        self.clock = clock
        self.bundles_folder = bundles_folder  # None: $XDG_STATE_HOME/gpumon/bundles
        self._bundling = asyncio.Lock()  # one bundle at a time: each reads the target

    def token(self) -> str | None:
        name = self.settings().token_env
        return (self.env.get(name) or None) if name else None

    async def __call__(self, request: Request) -> Response | None:
        if not allowed(self.listen, self.token(), request):
            why = "this page needs its token: Authorization: Bearer TOKEN, or ?token=TOKEN"
            if self.token() is None:
                why = "set [watch] token_env: beyond loopback the page is served with a token only"
            return Response(
                "401 Unauthorized",
                "text/plain; charset=utf-8",
                (why + "\n").encode(),
                _headers(**{"WWW-Authenticate": 'Bearer realm="gpumon"'}),
            )
        path = request.path
        links = Links("../" * (path.count("/") - 1) or "./", self._token_query(request))
        if path in ("/", "/index.html"):
            return _html(index_page(self.monitors(), self.listed(), self.clock(), links))
        if path == API_PATH + "/state":
            return _json(self.state_json())
        for prefix, answer in (
            (INCIDENT_PATH, self._incident_page),
            (API_PATH + INCIDENT_PATH, self._incident_json),
            (BUNDLE_PATH, self._bundle),
        ):
            if path.startswith(prefix) and len(path) > len(prefix):
                return await answer(path[len(prefix) :], links)
        return None

    @staticmethod
    def _token_query(request: Request) -> str:
        """``?token=...`` for the page's own links when the request came with it (a
        phone's browser sends no header: the link's token must follow it)."""
        token = request.query.get("token")
        return "" if not token else "?token=" + urllib.parse.quote(token, safe="")

    # --- finding incidents ------------------------------------------------------------
    def _monitor(self, host: str) -> HostMonitor | None:
        return next((m for m in self.monitors() if m.name == host), None)

    def key_of(self, incident: Incident) -> str:
        """The notify key of ``incident``: the hub's open incident holding its alerts,
        else the key it would be named by (its host, GPU, job, cause's kind)."""
        if self.hub is not None:
            keys = set(incident.keys)
            for key, open_ in self.hub.tracker.open.items():
                if open_.event.host == incident.host and open_.alert_keys & keys:
                    return key
        return incident_key(incident.host, incident.gpu, incident.job, incident.cause.kind)

    def listed(self) -> list[Listed]:
        """The active incidents of every host, the most urgent first."""
        found = [i for m in self.monitors() for i in active_incidents(m)]
        out = []
        for incident in by_urgency(found):
            key = self.key_of(incident)
            out.append(Listed(incident, key, INCIDENT_PATH + urllib.parse.quote(key, safe="/")))
        return out

    def find(self, key: str) -> tuple[HostMonitor, Incident] | None:
        """The incident named ``key`` (see the module docstring), the newest that fits."""
        host, _, rest = key.partition("/")
        monitor = self._monitor(host)
        if monitor is None:
            return None
        found = known_incidents(monitor)
        open_ = None if self.hub is None else self.hub.tracker.open.get(key)
        if open_ is not None:
            fits = [i for i in found if open_.alert_keys & set(i.keys)]
        else:
            gpu_word, _, rest = rest.partition("/")
            job_word, _, kind = rest.partition("/")
            gpu = None if gpu_word in ("gpu-", "") else gpu_word.removeprefix("gpu")
            job = None if job_word == "-" else job_word
            fits = [
                i
                for i in found
                if any(a.kind == kind for a in i.alerts)
                and (i.job == job if job else str(i.gpu) == str(gpu))
            ]
        return (monitor, max(fits, key=lambda i: i.time)) if fits else None

    # --- answers ----------------------------------------------------------------------
    def state_json(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "hosts": [snapshot_json(m, now) for m in self.monitors()],
            "incidents": [
                {**incident_json(i.incident), "incident": i.key, "path": i.href}
                for i in self.listed()
            ],
        }

    async def _incident_page(self, key: str, links: Links) -> Response:
        hit = self.find(key)
        if hit is None:
            return _not_found(f"no incident {key!r} on this gpumon watch")
        monitor, incident = hit
        sources = {a.key: monitor.alerts.source_lines(a.key) for a in incident.alerts}
        recording = None
        for alert in sorted(incident.alerts, key=lambda a: a.time):
            found = monitor.recorder.recording_of(alert.time)
            if found is not None:
                recording = str(found[0])
                break
        quoted = urllib.parse.quote(key, safe="/")
        listed = Listed(incident, key, INCIDENT_PATH + quoted)
        text = incident_page(
            monitor, listed, sources, self.clock(), links, BUNDLE_PATH + quoted, recording
        )
        return _html(text)

    async def _incident_json(self, key: str, links: Links) -> Response:
        hit = self.find(key)
        if hit is None:
            return Response("404 Not Found", JSON, b'{"error": "no such incident"}\n', _headers())
        monitor, incident = hit
        return _json(
            {
                **incident_json(incident),
                "incident": key,
                "host": monitor.name,
                "active": incident.active,
                "alerts": [
                    {**a.to_json(), "lines": list(monitor.alerts.source_lines(a.key))}
                    for a in incident.alerts
                ],
            }
        )

    async def _bundle(self, key: str, links: Links) -> Response:
        from gpumon.backends.bundle.build import bundle_incident

        hit = self.find(key)
        if hit is None:
            return _not_found(f"no incident {key!r} on this gpumon watch")
        monitor, incident = hit
        async with self._bundling:
            try:
                result = await bundle_incident(
                    monitor, incident.cause.key, self.settings(), folder=self.bundles_folder
                )
                data = await asyncio.to_thread(result.path.read_bytes)
            except Exception as e:  # noqa: BLE001 - a bundle that fails is said, the page stays
                log.warning("%s: bundle of %s not written: %s", monitor.name, key, e)
                return _html(
                    page(
                        "bundle · gpumon",
                        f"<h1>bundle not written</h1><p>{escaped(e)}</p>",
                        refresh=False,
                    ),
                    "500 Internal Server Error",
                )
        name = result.path.name
        return Response(
            "200 OK",
            "application/gzip",
            data,
            _headers(**{"Content-Disposition": f'attachment; filename="{name}"'}),
        )
