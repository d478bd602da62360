"""A small real job for the restart tests: ``python job_script.py [options] [ARG ...]``.

Prints ``argv: [...]`` (its arguments as JSON, so a test can see exactly what it got), then
one ``progress N pid P`` line every ``--every`` seconds to stdout (the launcher sends
stdout and stderr to the job's log). ``--ignore-sigterm`` makes SIGTERM (and SIGHUP) do
nothing, so only SIGKILL ends it; ``--fail-at-start MESSAGE`` prints MESSAGE to stderr and
exits 3 at once. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_script")
    parser.add_argument("--every", type=float, default=0.2, help="seconds between lines")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--fail-at-start", metavar="MESSAGE")
    parser.add_argument("args", nargs="*", help="anything; echoed in the argv line")
    args = parser.parse_args(argv)
    print("argv: " + json.dumps(sys.argv[1:] if argv is None else argv), flush=True)
    if args.fail_at_start:
        print(args.fail_at_start, file=sys.stderr, flush=True)
        return 3
    if args.ignore_sigterm:  # and SIGHUP, which its tmux pane sends when the pane closes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    step = 0
    while True:
        step += 1
        print(f"progress {step} pid {os.getpid()}", flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
