"""``gpumon usage HOST``: GPU-hours used and held idle, energy and cost, from the
accounting ``gpumon watch`` and the dashboard keep (``backends/usage``)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpumon.backends.config import Config, ConfigError, resolve_host

__all__ = ["cmd_usage"]

EXIT_NOTHING = 1


def cmd_usage(args: argparse.Namespace, config: Config) -> int:
    from gpumon.backends.paths import usage_db
    from gpumon.backends.usage import UsageStore, parse_since, usage_report

    try:
        name = resolve_host(config, args.host).name
    except ConfigError:
        name = args.host  # a host watched once and gone from the config keeps its rows
    now = time.time()
    since = parse_since(args.since, now)
    path = usage_db()
    if not path.exists():
        print(
            f"gpumon usage: nothing recorded yet ({path} does not exist): `gpumon watch` "
            "and the dashboard record GPU use while they run",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    store = UsageStore(path)
    try:
        report = usage_report(store, name, since, now, args.by, config.usage)
        known = store.hosts()
    finally:
        store.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif args.csv:
        sys.stdout.write(report.to_csv())
    else:
        print("\n".join(report.table()))
    if not report.lines and name not in known:
        others = ", ".join(known) or "none"
        print(
            f"gpumon usage: no usage of {name} recorded (hosts recorded: {others})", file=sys.stderr
        )
        return EXIT_NOTHING
    return 0
