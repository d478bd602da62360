"""The incident page's HTML: pure functions from the monitors' state to a document.

Every text that comes from the target (host and job names, process names, alert messages,
log lines) goes through ``_t``: made printable (``untrusted.printable``) and escaped for
HTML, so a process named ``<script>`` is shown as those characters. No script; a meta
refresh re-reads the page; the style is inline (the Content-Security-Policy allows inline
styles and nothing else); ``prefers-color-scheme`` picks the dark colours.

The words are the dashboard's and the notifiers': the incident's ``headline``, its fixes
(``Fix.words`` and ``Fix.command``) and ``command_fix``, the alert's kind by
``kind_title``, its first / peak / current messages, the lines that raised it.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpumon.backends.alerts.incident import Incident, command_fix
from gpumon.backends.alerts.kinds import kind_title
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import ConnState, GpuSample, iso_time
from gpumon.backends.monitor.state import HostMonitor
from gpumon.backends.untrusted import printable
from gpumon.backends.web.plots import svg_plot

__all__ = ["Links", "Listed", "escaped", "host_state", "incident_page", "index_page", "page"]

REFRESH_S = 10  # the page re-reads itself this often (a meta refresh: no script)
PLOT_S = 30 * 60.0  # the plots' window: the flight recorder's

STYLE = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1b1b;--muted:#666;--line:#ddd;
--crit:#b00020;--warn:#9a6700;--ok:#1a7f37;--bar:#3b82f6;--card:#f6f8fa}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--fg:#e6e6e6;--muted:#9aa4ae;
--line:#2c333a;--crit:#ff6b6b;--warn:#e3b341;--ok:#56d364;--bar:#58a6ff;--card:#1a1f25}}
*{box-sizing:border-box}
body{margin:0;padding:8px;background:var(--bg);color:var(--fg);
font:15px/1.4 system-ui,sans-serif;overflow-wrap:anywhere}
main{max-width:1100px;margin:0 auto}
h1{font-size:1.15em;margin:.2em 0}h2{font-size:1.05em;margin:1em 0 .3em}
a{color:var(--bar)}
.muted{color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;
padding:8px;margin:6px 0}
.sev{font-weight:600;text-transform:uppercase;font-size:.8em}
.critical{color:var(--crit)}.warning{color:var(--warn)}.ok,.info{color:var(--ok)}
.headline{font-weight:600}
code,pre{font:13px/1.35 ui-monospace,monospace}
pre{white-space:pre-wrap;margin:.3em 0;padding:6px;border:1px solid var(--line);
border-radius:4px;max-width:100%}
.fix code{background:var(--bg);padding:1px 4px;border-radius:3px}
.gpu{display:grid;grid-template-columns:2.2em minmax(0,1fr) auto;gap:2px 8px;
padding:4px 0;border-top:1px solid var(--line);align-items:center}
.bar{height:8px;background:var(--line);border-radius:4px;overflow:hidden}
.bar>span{display:block;height:100%;background:var(--bar)}
.bar.hot>span{background:var(--crit)}
.nums{font-size:.85em;white-space:nowrap}
.who{grid-column:2/4;font-size:.85em;color:var(--muted)}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(280px,1fr));gap:8px}
svg.plot{width:100%;height:auto;display:block}
svg .frame{fill:none;stroke:var(--line)}
svg .line{fill:none;stroke:var(--bar);stroke-width:1.5}
svg .dot{fill:var(--bar)}
svg text{fill:var(--muted);font:9px system-ui,sans-serif}
svg text.t{fill:var(--fg)}
dl{display:grid;grid-template-columns:auto minmax(0,1fr);gap:2px 8px;margin:.3em 0}
dt{color:var(--muted)}dd{margin:0}
"""


def escaped(text: object) -> str:
    """Target-made text as HTML: printable, then escaped (quotes too: attributes)."""
    return html.escape(printable(str(text)))


@dataclass(frozen=True, slots=True)
class Listed:
    """An incident as the page links it: its notify key (``incident_key``) and link."""

    incident: Incident
    key: str
    href: str


def page(title: str, body: str, *, refresh: bool = True) -> str:
    """A whole document around ``body``."""
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="referrer" content="no-referrer">{meta}'
        # No icon: else a browser asks for /favicon.ico on every refresh and its console
        # says the 404 each time.
        '<link rel="icon" href="data:,">'
        f"<title>{escaped(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def host_state(monitor: HostMonitor) -> tuple[str, str]:
    """(css class, words): "connected", "stale 42 s" or "unreachable: why"."""
    state = monitor.status.state
    if state in (ConnState.FAILED, ConnState.RECONNECTING) or (
        state == ConnState.CONNECTING and monitor.status.error
    ):
        why = monitor.status.error or state.value
        return "critical", f"unreachable: {why}"
    if monitor.latest is None:
        return "muted", "waiting for the first sample"
    if monitor.is_stale():
        age = monitor.stale_s()
        return "warning", "stale" + ("" if age is None else f" {age:.0f} s")
    return "ok", state.value


def _ago(then: float, now: float) -> str:
    s = max(now - then, 0.0)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    return f"{s / 3600:.1f} h ago"


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _since(incident: Incident, now: float) -> str:
    at = incident.time
    return f'<time datetime="{iso_time(at)}">{_clock(at)}</time> ({_ago(at, now)})'


@dataclass(frozen=True, slots=True)
class Links:
    """How the page links its own paths: relative to the page (``root``: "../" to the
    site's top), so that a reverse proxy may serve it under a path of its own, with the
    ``?token=`` the page came with (``query``)."""

    root: str = "./"
    query: str = ""

    def to(self, path: str) -> str:
        return html.escape(self.root + path.lstrip("/") + self.query)


def _fixes(incident: Incident) -> str:
    """The fixes in words and as the command to run, the best first."""
    if not incident.fixes:
        return '<p class="fix muted">fix: none that gpumon knows</p>'
    said = command_fix(incident)
    items = []
    for fix in incident.fixes:
        command = f" <code>{escaped(fix.command)}</code>" if fix.command else ""
        key = f" <span class='muted'>(the dashboard's {escaped(fix.key)})</span>" if fix.key else ""
        items.append(f"<li>{escaped(fix.words)}{key}{command}</li>")
    best = "" if said is None else f"<div>{escaped(said)}</div>"
    return f'<div class="fix">{best}<ul>{"".join(items)}</ul></div>'


def _incident_card(listed: Listed, now: float, links: Links) -> str:
    incident = listed.incident
    sev = incident.severity.value
    where = [escaped(incident.host)]
    if incident.gpu is not None:
        where.append(f"GPU {incident.gpu}")
    if incident.job:
        where.append(escaped(incident.job))
    state = "active" if incident.active else "ended"
    return (
        f'<div class="card incident"><span class="sev {sev}">{sev}</span> '
        f'<a class="headline" href="{links.to(listed.href)}">'
        f"{escaped(incident.headline)}</a>"
        f'<div class="muted">{" · ".join(where)} · {state} · since {_since(incident, now)}</div>'
        f"{_fixes(incident)}</div>"
    )


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def _gpu_row(gpu: GpuSample, who: str) -> str:
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    share = None if used is None or not total else min(used / total, 1.0)
    bar = "" if share is None else f'<span style="width:{share * 100:.1f}%"></span>'
    hot = " hot" if share is not None and share >= 0.95 else ""
    nums = [f"{_gib(used)}/{_gib(total)} GiB"]
    nums.append("util ?" if gpu.utilization_pct is None else f"{gpu.utilization_pct:.0f}%")
    nums.append("?°C" if gpu.temperature_c is None else f"{gpu.temperature_c:.0f}°C")
    nums.append("? W" if gpu.power_w is None else f"{gpu.power_w:.0f} W")
    return (
        f'<div class="gpu"><b>{gpu.index}</b><div class="bar{hot}">{bar}</div>'
        f'<span class="nums">{" ".join(nums)}</span>'
        f'<span class="who">{escaped(gpu.name or "")}{" · " + who if who else ""}</span></div>'
    )


def _who(monitor: HostMonitor, gpu: GpuSample) -> str:
    """The job on ``gpu`` (the config's), else its processes' names: escaped HTML."""
    jobs = [name for name, job in monitor.workloads.jobs.items() if gpu.index in job.gpus]
    if jobs:
        return ", ".join(escaped(name) for name in jobs)
    latest = monitor.latest
    names = [] if latest is None else [p.name for p in latest.processes_for(gpu) if p.name]
    return ", ".join(escaped(name) for name in dict.fromkeys(names))


def _host_card(monitor: HostMonitor) -> str:
    css, words = host_state(monitor)
    latest = monitor.latest
    gpus = "" if latest is None else "".join(_gpu_row(g, _who(monitor, g)) for g in latest.gpus)
    return (
        f'<div class="card host"><b>{escaped(monitor.name)}</b> '
        f'<span class="{css}">{escaped(words)}</span>{gpus}</div>'
    )


def index_page(
    monitors: Sequence[HostMonitor], listed: Sequence[Listed], now: float, links: Links
) -> str:
    """``/``: the active incidents, the most urgent first, then every host and its GPUs."""
    cards = "".join(_incident_card(i, now, links) for i in listed)
    incidents = cards or '<p class="ok">no active incident</p>'
    hosts = "".join(_host_card(m) for m in monitors) or '<p class="muted">no host watched</p>'
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    body = (
        f'<h1>gpumon</h1><p class="muted">read-only · {len(monitors)} host(s) · {stamp}</p>'
        f"<h2>Incidents</h2>{incidents}<h2>Hosts</h2>{hosts}"
    )
    return page("gpumon", body)


def _alert_block(alert: Alert, part: str, lines: Sequence[str], now: float) -> str:
    sev = alert.peak.value
    state = "active" if alert.active else f"ended {_ago(alert.last_seen, now)}"
    rows = [("first", alert.time, alert.raised_text)]
    if alert.peak_text != alert.raised_text or alert.peak_at != alert.time:
        rows.append(("peak", alert.peak_at, alert.peak_text))
    rows.append(("now" if alert.active else "last", alert.last_seen, alert.message))
    said = "".join(
        f"<dt>{label}</dt><dd><span class='muted'>{_clock(at)}</span> {escaped(text)}</dd>"
        for label, at, text in rows
    )
    raised = f"<pre>{escaped(chr(10).join(lines))}</pre>" if lines else ""
    return (
        f'<div class="card alert"><span class="sev {sev}">{part}</span> '
        f"<b>{escaped(kind_title(alert.kind))}</b> <span class='muted'>({sev}, {state})</span>"
        f"<dl>{said}</dl>{raised}</div>"
    )


def incident_plots(monitor: HostMonitor, incident: Incident, now: float) -> list[str]:
    """The SVG plots of the last ``PLOT_S``: each affected GPU's memory and utilisation
    (the GPUs its alerts name, and its job's), then its job's or server's throughput."""
    job = monitor.workloads.jobs.get(incident.job or "")
    gpus = sorted(
        {a.gpu for a in incident.alerts if a.gpu is not None}
        | set(job.gpus if job is not None else ())
    )
    histories = {i: monitor.histories[i] for i in gpus if i in monitor.histories}
    # The window is the last PLOT_S, or less while the histories hold less (a watch
    # started a minute ago): the minutes it has are drawn across the whole width.
    firsts = [h.times[0] for h in histories.values() if len(h.times)]
    start = max(now - PLOT_S, min(firsts, default=now - PLOT_S))
    latest = monitor.latest
    totals = {} if latest is None else {g.index: g.memory_total_mib for g in latest.gpus}
    plots = []
    for index, history in histories.items():
        times = list(history.times)
        total = totals.get(index)
        memory = [
            (t, None if v is None else v / 1024)
            for t, v in zip(times, history.memory_used_mib, strict=True)
        ]
        plots.append(
            svg_plot(
                f"GPU {index} memory",
                "GiB",
                memory,
                start,
                now,
                None if total is None else total / 1024,
                f"plot gpu{index} memory",
            )
        )
        util = list(zip(times, history.utilization_pct, strict=True))
        plots.append(
            svg_plot(
                f"GPU {index} utilisation", "%", util, start, now, 100.0, f"plot gpu{index} util"
            )
        )
    # the trackers keep their times on their own clock (Workloads.now), the plots the wall's
    wall_of = monitor.workloads.wall_of
    if job is not None and job.rate_history:
        plots.append(
            svg_plot(
                f"{printable(job.name)} throughput",
                job.rate_unit or "",
                [(wall_of(t), v) for t, v in job.rate_history],
                start,
                now,
                None,
                "plot rate",
            )
        )
    for port, server in monitor.workloads.sglang.items():
        if (
            any(a.facts.port == port or a.key.endswith(f":{port}") for a in incident.alerts)
            and server.history
        ):
            plots.append(
                svg_plot(
                    f"SGLang :{port} generation",
                    "tok/s",
                    [(wall_of(t), v) for t, v in server.history],
                    start,
                    now,
                    None,
                    "plot rate",
                )
            )
    return plots


def incident_page(
    monitor: HostMonitor,
    listed: Listed,
    sources: dict[str, tuple[str, ...]],
    now: float,
    links: Links,
    bundle_path: str,
    recording: str | None,
) -> str:
    """``/incident/KEY``: the incident in full (the dashboard's incident detail), its
    plots, the bundle's link."""
    incident = listed.incident
    sev = incident.severity.value
    where = [escaped(incident.host)]
    if incident.gpu is not None:
        where.append(f"GPU {incident.gpu}")
    if incident.job:
        where.append(escaped(incident.job))
    state = "active" if incident.active else f"ended {_ago(incident.last_seen, now)}"
    alerts = _alert_block(incident.cause, "cause", sources.get(incident.cause.key, ()), now)
    alerts += "".join(
        _alert_block(a, "evidence", sources.get(a.key, ()), now) for a in incident.evidence
    )
    plots = "".join(incident_plots(monitor, incident, now)) or '<p class="muted">no samples</p>'
    said_recording = (
        "" if recording is None else f"<p class='muted'>flight recording: {escaped(recording)}</p>"
    )
    body = (
        f'<p><a href="{links.to("")}">« all incidents</a></p>'
        f'<h1 class="headline"><span class="sev {sev}">{sev}</span> '
        f"{escaped(incident.headline)}</h1>"
        f'<p class="muted">{" · ".join(where)} · {state} · since {_since(incident, now)}'
        f" · <code>{escaped(listed.key)}</code></p>"
        f"<h2>Fix</h2>{_fixes(incident)}"
        f'<h2>Last {PLOT_S / 60:.0f} minutes</h2><div class="plots">{plots}</div>'
        f"<h2>Alerts</h2>{alerts}"
        f'<h2>Evidence</h2><p><a class="bundle" href="{links.to(bundle_path)}" '
        f'download>download the bundle</a> <span class="muted">(written now, secrets scrubbed; '
        f"takes up to a minute)</span></p>{said_recording}"
    )
    return page(f"{incident.headline} · gpumon", body)
