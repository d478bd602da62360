"""``gpumon watch`` (headless monitoring, alerts delivered, the exporter) and ``gpumon
notify test|status``.

    gpumon watch [HOST ...] [--config F] [--read-only] [--log-format text|json]
                 [--metrics-port N] [--metrics-host ADDR]
    gpumon notify test NAME       send a test event through notifier NAME now
    gpumon notify status [--json] the outbox: pending messages, last errors, open incidents

``watch`` without HOST watches every ``[hosts.NAME]`` of the config. SIGTERM and SIGINT
stop it cleanly (exit 0); SIGHUP reloads the config: new hosts start, gone ones stop,
changed notifiers restart, the rest keeps running. One line per incident change goes to
stderr (JSON lines with ``--log-format json``): the incident's headline and fix, what
gpumon did and when, the recording, the raw alert line last. Every line's time is ISO 8601
with its offset (``iso_time``), text and JSON alike; the last line says why it stopped (a
signal, or the error). No Textual is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from gpumon.backends.config import Config, ConfigError, HostConfig, load_config, resolve_host
from gpumon.backends.errors import GpumonError
from gpumon.backends.model import iso_time
from gpumon.tui.cli.options import sim_settings

EXIT_USAGE = 2

log = logging.getLogger("gpumon.watch")


# --- gpumon watch -------------------------------------------------------------------------


def _hosts(config: Config, names: Sequence[str]) -> list[HostConfig]:
    chosen = list(dict.fromkeys(names)) or list(config.hosts)
    if not chosen:
        raise ConfigError(
            "no HOST given and no [hosts.NAME] in the config; name the hosts to watch",
            source="command line",
        )
    return [resolve_host(config, name) for name in chosen]


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": iso_time(record.created),
            "level": record.levelname.lower(),
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line)


class _TextLines(logging.Formatter):
    """``TIME LEVEL message``, the time as the JSON lines and the change lines say it."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record.created)


def _log_change(fmt: str, ev: Any) -> None:
    from gpumon.backends.notify.event import IncidentEvent

    assert isinstance(ev, IncidentEvent)
    if fmt == "json":
        print(json.dumps({"logged_at": iso_time(time.time()), **ev.to_json()}), file=sys.stderr)
    else:
        print(f"{iso_time(ev.time)} {ev.event} {ev.key}: {ev.line()}", file=sys.stderr)
    sys.stderr.flush()


def _demo_auto_restart(monitor: Any) -> None:
    from dataclasses import replace

    if monitor.host.kind == "demo":
        jobs = tuple(replace(j, auto_restart=True) if j.start else j for j in monitor.host.jobs)
        monitor.host = replace(monitor.host, jobs=jobs)


def cmd_watch(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.notify.watch import WatchLocked, hold_watch_lock

    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(_JsonLines())
    else:
        handler.setFormatter(_TextLines("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    log.setLevel(logging.INFO)  # its own lines (start, reload, stop); the library's warnings
    hosts = _hosts(config, args.hosts)
    try:
        lock = hold_watch_lock()
    except WatchLocked as e:
        print(f"gpumon watch: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_watch(args, config, hosts))
    except KeyboardInterrupt:  # a second Ctrl-C while it was stopping
        log.info("stopped: interrupted while stopping (SIGINT)")
        return 130
    except Exception as e:  # a bug: say it in the log's own format, then the traceback
        log.critical("stopped: error: %s: %s", type(e).__name__, e, exc_info=True)
        return 1
    finally:
        lock.close()


async def _watch(args: argparse.Namespace, config: Config, hosts: list[HostConfig]) -> int:
    from gpumon.backends.runtime import Runtime

    settings = config.notify_settings()
    runtime = Runtime.for_watch(
        hosts,
        settings,
        sim=partial(sim_settings, args),
        read_only=args.read_only,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        prepare=_demo_auto_restart if args.demo_auto_restart else None,
        usage=config.usage,
    )
    assert runtime.hub is not None
    runtime.hub.changes.add(lambda ev: _log_change(args.log_format, ev))
    try:
        await runtime.start()
    except OSError as e:
        await runtime.stop()
        port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
        why = f"cannot serve metrics on port {port}: {e.strerror or e}"
        print(f"gpumon watch: {why}", file=sys.stderr)
        log.info("stopped: %s", why)
        return EXIT_USAGE

    async def reload() -> None:
        try:
            new = load_config(args.config)
            changes = await runtime.reload(_hosts(new, args.hosts), new.notify_settings())
        except GpumonError as e:
            log.warning("reload refused, the old config stays: %s", e)
            return
        log.info("config reloaded: %s", "; ".join(changes) or "nothing changed")

    def ready() -> None:
        names = ", ".join(m.name for m in runtime.monitors)
        metrics = runtime.metrics
        serving = f"; metrics on {metrics.host}:{metrics.port}" if metrics else ""
        notifiers = ", ".join(settings.notifiers) or "none"
        log.info("watching %s; notifiers: %s%s", names, notifiers, serving)

    stopped_by = await runtime.serve(reload, ready)
    log.info("stopped: %s", stopped_by)
    return 0


# --- gpumon notify ------------------------------------------------------------------------


def cmd_notify(args: argparse.Namespace, config: Config) -> int:
    """``gpumon notify test NAME`` or ``gpumon notify status``."""
    if args.action == "status":
        return cmd_notify_status(args, config)
    if not args.name:
        print("gpumon notify test: name the notifier: gpumon notify test NAME", file=sys.stderr)
        return EXIT_USAGE
    return cmd_notify_test(args, config)


def cmd_notify_test(args: argparse.Namespace, config: Config) -> int:
    import os

    from gpumon.backends.notify.hub import deliver, test_event
    from gpumon.backends.notify.notifiers import DeliveryError

    settings = config.notify_settings()
    cfg = settings.notifiers.get(args.name)
    if cfg is None:
        known = ", ".join(settings.notifiers) or "none configured"
        print(f"gpumon notify: no notifier {args.name!r} ({known})", file=sys.stderr)
        return EXIT_USAGE
    now = time.time()
    try:
        asyncio.run(deliver(cfg, [test_event(cfg.name, now)], now, os.environ))
    except DeliveryError as e:
        print(f"gpumon notify test {cfg.name}: FAILED: {e}", file=sys.stderr)
        return 1
    print(f"gpumon notify test {cfg.name}: sent ({cfg.kind})")
    return 0


def _age(then: float | None, now: float) -> str:
    return "-" if then is None else f"{max(now - then, 0):.0f} s ago"


def cmd_notify_status(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.notify.hub import default_outbox
    from gpumon.backends.notify.outbox import Outbox
    from gpumon.backends.notify.watch import watch_running

    settings = config.notify_settings()
    path = default_outbox(settings)
    now = time.time()
    if not path.exists():
        rows: list[dict[str, Any]] = []
        incidents: list[Any] = []
    else:
        outbox = Outbox(path)
        try:
            rows, incidents = outbox.status(), outbox.open_incidents()
        finally:
            outbox.close()
    names = sorted(set(settings.notifiers) | {r["notifier"] for r in rows})
    by_name = {r["notifier"]: r for r in rows}
    if args.json:
        print(
            json.dumps(
                {
                    "outbox": str(path),
                    "watch_running": watch_running(),
                    "notifiers": [
                        {
                            "configured": n in settings.notifiers,
                            **by_name.get(n, {"notifier": n, "pending": 0}),
                        }
                        for n in names
                    ],
                    "open_incidents": [ev.to_json() for ev in incidents],
                },
                indent=2,
            )
        )
        return 0
    print(f"outbox: {path}{'' if path.exists() else ' (not created yet)'}")
    print(f"gpumon watch running: {'yes' if watch_running() else 'no'}")
    for n in names:
        r = by_name.get(n, {})
        kind = settings.notifiers[n].kind if n in settings.notifiers else "not configured"
        line = (
            f"  {n} ({kind}): {r.get('pending', 0)} pending"
            f", last delivered {_age(r.get('last_ok'), now)}"
        )
        if r.get("pending"):
            line += f", oldest waiting since {_age(r.get('oldest_pending'), now)}"
        if r.get("failures"):
            line += f", {r['failures']} failures in a row"
        if r.get("rejected"):
            line += f", {r['rejected']} refused by the receiver and set aside"
        print(line)
        if r.get("last_error"):
            print(f"      last error ({_age(r.get('last_error_at'), now)}): {r['last_error']}")
    print(f"open incidents: {len(incidents)}")
    for ev in incidents:
        print(f"  {ev.key} {ev.severity} since {iso_time(ev.opened_at)}: {ev.title}")
        if ev.fix:
            print(f"      fix: {ev.fix}")
        if done := ev.done():
            print(f"      gpumon: {done}")
    return 0
