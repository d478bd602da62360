"""``python -m sglang.launch_server --port N [--crash-dump-folder DIR]``, standing in for
SGLang's launcher: the simulator's SGLang server on that port (``/server_info``,
``/metrics``), after the lines a hung server's log holds (``sglang_watchdog``: with
tests/support on PYTHONPATH)."""

from __future__ import annotations

import argparse
import sys

from sglang_watchdog import AFTER, BEFORE, WATCHDOG_DUMP

from gpumon.backends.sim.sglang_server import main as serve


def main() -> int:
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--crash-dump-folder")
    args = parser.parse_args()
    sys.stdout.write(BEFORE + WATCHDOG_DUMP + AFTER)
    sys.stdout.flush()
    return serve(["--ports", str(args.port)])


if __name__ == "__main__":
    sys.exit(main())
