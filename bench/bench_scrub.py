"""How fast the bundle's scrubber reads the files it scrubs most: an SGLang log and a
flight recording.

Scrubs 8 MB of SGLang 0.5.23's stats lines (``tests/fixtures/sglang/0.5.23/server.log``
repeated: ``token`` five times a line, the worst text for the named shapes) and 8 MB of
the recording's log records (those lines as JSON strings), ``--runs`` times each, and
prints the median throughput in MB/s. A bundle holds at most 50 MiB (16 MiB a file); a
usual one, a few MB.

Run: ``.venv/bin/python bench/bench_scrub.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from gpumon.backends.bundle.scrub import Scrubber

SIZE = 8_000_000
LOG = Path(__file__).parents[1] / "tests/fixtures/sglang/0.5.23/server.log"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    log = LOG.read_text()
    repeat = SIZE // len(log) + 1
    record = json.dumps({"type": "log", "lines": log.splitlines()}, separators=(",", ":"))
    texts = {
        "SGLang log": (log * repeat)[:SIZE],
        "recording (JSON lines)": "\n".join([record] * repeat)[:SIZE],
    }
    scrubber = Scrubber()
    for name, text in texts.items():
        seconds = []
        for _ in range(args.runs):
            began = time.perf_counter()
            scrubber.text(text)
            seconds.append(time.perf_counter() - began)
        print(f"{name}: {SIZE / 1e6 / statistics.median(seconds):.1f} MB/s")


if __name__ == "__main__":
    main()
