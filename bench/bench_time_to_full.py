"""Time to full on a realistic set of memory traces: false warnings per hour where memory
never runs out, and the warning's lead before a real OOM.

The traces are ``tests/support/memory_traces.py``'s (each described there): the NVML
stand-in's oscillation (+-20 % below 80 %) at periods from 10 s to 10 min, the same shape
between 75 % and 95 %, PyTorch's caching-allocator sawtooth (``empty_cache`` every 500
steps, and after every step), an SGLang server's static pool, the demo's drafter ramp to
its OOM, linear ramps to OOM from 20 to 800 MiB/s (one with +-200 MiB of noise) and two
leaks in blocks. Each goes through ``AlertEngine.on_sample`` with the default ``[alerts]``
rules: the monitor's own rule code, nothing copied (``memory_traces.replay``). An
oscillation is watched for an hour from each of four points of its cycle.

Printed per trace: hours watched, warnings raised where nothing runs out (and per hour),
the first warning's lead before the OOM. ``--show`` adds each warning's time and words.

    python bench/bench_time_to_full.py [--trace NAME] [--show]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from memory_traces import (
    HOUR,
    PHASES,
    Trace,
    drafter,
    oscillation,
    oscillation_high,
    ramp,
    replay,
    sawtooth,
    sglang_pool,
    staircase,
)


def traces() -> list[Trace]:
    out: list[Trace] = []
    for period in (10.0, 30.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 600.0):
        out += [oscillation(period, p) for p in range(PHASES)]
    for period in (30.0, 60.0, 120.0, 300.0):
        out += [oscillation_high(period, p) for p in range(PHASES)]
    out += [sawtooth(), sawtooth(each_step=True), sglang_pool(), drafter()]
    out += [ramp(r) for r in (20.0, 50.0, 100.0, 200.0, 400.0, 800.0)]
    out += [ramp(200.0, jitter=200.0), staircase(512.0, 2.5), staircase(2048.0, 10.0)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="only the traces whose name starts with this")
    parser.add_argument("--show", action="store_true", help="print each warning")
    args = parser.parse_args()
    print(f"{'trace':28} {'hours':>6} {'false':>6} {'per hour':>9} {'lead before OOM':>16}")
    rows: dict[str, list[tuple[float, int, float | None, bool]]] = {}
    for trace in traces():
        if args.trace and not trace.name.startswith(args.trace):
            continue
        got = replay(trace)
        rows.setdefault(trace.name, []).append(
            (got.seconds / HOUR, got.false, got.lead_s, trace.oom_at is not None)
        )
        for seconds, message in got.warnings if args.show else ():
            print(f"  {trace.name} at {seconds:.0f} s: {message}")
    for name, results in rows.items():
        hours = sum(r[0] for r in results)
        false = sum(r[1] for r in results)
        leads = [r[2] for r in results if r[2] is not None]
        lead = f"{min(leads):.0f} s" if leads else ("none" if results[0][3] else "")
        print(f"{name:28} {hours:6.2f} {false:6d} {false / hours:9.1f} {lead:>16}")


if __name__ == "__main__":
    main()
