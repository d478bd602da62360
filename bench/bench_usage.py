"""The accounting's cost: the SQLite file after a 24 h soak of the demo's 8 GPUs at 1 Hz
(a fake clock: the samples are dated, nothing waits), the file at its bound (48 h of
minute rows and 90 days of hour rows), and the cost per sample: the split among holders
on the event loop (``Tally.add``, what ``UsageRecorder`` does per sample) and the write
on the writer's thread (``UsageStore.write``, a minute's batch per transaction) per
sample it holds.

The samples are the simulated CT200's (``sim.past.sample_at``: its nvidia-smi and its
process list through the real parsers), taken at scenario times across its story and
dated one second apart.

    python bench/bench_usage.py [--hours 24] [--owners 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.monitor import demo_settings
from gpumon.backends.sim.past import sample_at, sim_printers
from gpumon.backends.usage import Tally, UsageStore, gap_for
from gpumon.backends.usage.account import MINUTE
from gpumon.backends.usage.store import HOUR, HOURS_KEPT_S, MINUTES_KEPT_S
from gpumon.backends.workloads.owners import OwnedBy

T0 = 1_800_000_000.0 - 1_800_000_000.0 % HOUR
OWNERS = {i: OwnedBy("drafter", "job", "drafter") for i in (5, 6, 7)}


def soak(path: Path, hours: float) -> tuple[float, float, int, int]:
    """Seconds in ``Tally.add`` and in ``UsageStore.write``, samples, rows written."""
    settings = demo_settings("training-oom")
    printers = sim_printers(settings)
    variants = [sample_at(printers, settings, t, "demo") for t in (5, 35, 50, 70, 200)]
    tally, store = Tally(AlertRules(), watched=200), UsageStore(path)
    gap = gap_for(1.0)
    add_s = write_s = 0.0
    rows = 0
    count = int(hours * HOUR)
    for n in range(count):
        base = variants[(n // 600) % len(variants)]  # ten minutes of each, in turn
        sample = replace(base, time=T0 + n)
        start = time.perf_counter()
        tally.add(sample, sample.processes, OWNERS, gap)
        add_s += time.perf_counter() - start
        if n % MINUTE == 0 and n:
            batch = tally.take(sample.time)
            rows += len(batch)
            start = time.perf_counter()
            store.write("demo", batch, tally.estimated, sample.time)
            write_s += time.perf_counter() - start
    store.close()
    return add_s, write_s, count, rows


def bound(path: Path, gpus: int, owners: int) -> int:
    """The file's size at its bound: ``owners`` (+ nobody) per GPU in every minute row of
    48 h and every hour row of 90 days, for one host."""
    store = UsageStore(path)
    sums = [60.0, 30.0, 30.0, 18_000.0, 4.0e6, 3000.0]
    now = T0 + HOURS_KEPT_S
    minutes = [
        ((int(t), g, f"CT{200 + o}", "root", f"job{o}"), sums)
        for t in range(int(now - MINUTES_KEPT_S), int(now), MINUTE)
        for g in range(gpus)
        for o in range(owners + 1)
    ]
    hours = [
        ((int(t), g, f"CT{200 + o}", "root", f"job{o}"), [s * 60 for s in sums])
        for t in range(int(now - HOURS_KEPT_S), int(now - MINUTES_KEPT_S), HOUR)
        for g in range(gpus)
        for o in range(owners + 1)
    ]
    store.write("demo", minutes, True, now)  # rolled up as it goes in: below
    store._db.executemany(  # the hour rows as the roll-up leaves them
        "INSERT OR REPLACE INTO usage VALUES (3600, 'demo', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
        [(*k, *s) for k, s in hours],
    )
    store._db.execute("VACUUM")
    count = store.row_count()
    store.close()
    print(f"  at the bound: {count} rows ({len(minutes)} minute, {len(hours)} hour)")
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--owners", type=int, default=2, help="owners per GPU at the bound")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "usage.sqlite3"
        add_s, write_s, count, rows = soak(path, args.hours)
        size = path.stat().st_size + sum(
            p.stat().st_size for p in Path(folder).glob("usage.sqlite3-*")
        )
        print(f"soak: {args.hours:g} h of 8 GPUs at 1 Hz: {count} samples, {rows} minute rows")
        print(f"  file: {size / 1e6:.2f} MB ({size / max(rows, 1):.0f} B a row, WAL included)")
        print(f"  split among holders (event loop): {add_s / count * 1e6:.1f} us a sample")
        print(f"  write (writer thread): {write_s / count * 1e6:.1f} us a sample, "
              f"{write_s / max(count // MINUTE, 1) * 1e3:.2f} ms a minute's batch")  # fmt: skip
        at_bound = bound(Path(folder) / "bound.sqlite3", 8, args.owners)
        print(f"  file at the bound (8 GPUs, {args.owners} owners + nobody each): "
              f"{at_bound / 1e6:.1f} MB a host")  # fmt: skip


if __name__ == "__main__":
    main()
