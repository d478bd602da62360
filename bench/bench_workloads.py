"""Cost of the workload parsers: SGLang ``/metrics`` for 8 servers each second, and job
progress lines.

Budget: parsing and tracking 8 servers scraped once a second must stay under 1 % of one
core, i.e. < 10 ms of CPU per second of wall time. Measured on ``metrics_busy.prom``
(74 families, 500 samples, 48 KB) in every way it can reach the parser: the whole page,
the page filtered here, and the page the agent already filtered on the target.

    python bench/bench_workloads.py [--seconds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpumon.backends.parsers import (
    ProgressParser,
    filter_metrics_text,
    parse_sglang_log_line,
    parse_sglang_metrics,
)
from gpumon.backends.workloads import LATENCY_EVERY_S, JobTracker, SglangTracker

ROOT = Path(__file__).resolve().parent.parent
SGLANG = ROOT / "tests" / "fixtures" / "sglang"
PROGRESS = ROOT / "tests" / "fixtures" / "progress"
SERVERS = 8
BUDGET_MS = 10.0


def per_call_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median over 5 rounds of the CPU milliseconds one call takes."""
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeat):
            fn()
        rounds.append((time.process_time() - start) / repeat * 1e3)
    return statistics.median(rounds)


def tracked_ms_per_second(text: str, seconds: int) -> float:
    """CPU ms per second of wall time for 8 trackers fed ``text`` once a second (the
    trackers decide when to read the histograms, as in the monitor)."""
    trackers = [SglangTracker(30000 + i) for i in range(SERVERS)]
    start = time.process_time()
    for second in range(seconds):
        for tr in trackers:
            tr.observe_text(text, float(second))
    assert all(tr.up and tr.error is None for tr in trackers)
    return (time.process_time() - start) / seconds * 1e3


def progress_us(preset: str, lines: list[str]) -> tuple[float, float]:
    """CPU microseconds per line: parsing alone, and feeding a JobTracker."""
    parser = ProgressParser(preset)
    job = JobTracker("bench", preset)
    clock = iter(range(10**9))
    parse_ms = per_call_ms(lambda: [parser.parse(ln) for ln in lines], 20)
    feed_ms = per_call_ms(lambda: [job.feed(ln, float(next(clock))) for ln in lines], 20)
    return parse_ms / len(lines) * 1e3, feed_ms / len(lines) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=120, help="simulated seconds of scraping")
    args = ap.parse_args()

    busy = (SGLANG / "metrics_busy.prom").read_text(encoding="utf-8")
    filtered = filter_metrics_text(busy)
    samples = sum(1 for ln in busy.splitlines() if ln and not ln.startswith("#"))
    print(f"metrics_busy.prom: {len(busy)} bytes, {samples} samples")
    print(f"  agent-filtered page: {len(filtered)} bytes, {filtered.count(chr(10))} lines")

    rows = [
        ("prometheus_client, whole page", lambda: list(text_string_to_metric_families(busy))),
        ("filter only (whole page in)", lambda: filter_metrics_text(busy)),
        ("filter + parse, all families", lambda: parse_sglang_metrics(busy)),
        ("filter + parse, no histograms", lambda: parse_sglang_metrics(busy, latency=False)),
        ("pre-filtered + parse, all", lambda: parse_sglang_metrics(filtered)),
        ("pre-filtered + parse, no hist.", lambda: parse_sglang_metrics(filtered, latency=False)),
    ]
    print(f"\nper scrape (CPU ms)            one server   x{SERVERS} servers/s")
    for label, fn in rows:
        ms = per_call_ms(fn, 40)
        print(f"  {label:30s} {ms:8.3f}   {ms * SERVERS:8.2f}")

    print(
        f"\nsteady state, {SERVERS} trackers, 1 scrape/s each, "
        f"histograms every {LATENCY_EVERY_S:.0f} s:"
    )
    for label, text in (("whole page", busy), ("agent-filtered page", filtered)):
        ms = tracked_ms_per_second(text, args.seconds)
        verdict = "OK" if ms < BUDGET_MS else "OVER"
        print(
            f"  {label:22s} {ms:6.2f} ms per second = {ms / 10:.2f} % of one core "
            f"(budget {BUDGET_MS:.0f} ms: {verdict})"
        )

    print("\nprogress lines (CPU us per line)")
    cases = [
        ("kv", "kv_drafter_oom.log"),
        ("kv", "kv_megatron.log"),
        ("tqdm", "tqdm_train.log"),
        ("hf", "hf_trainer.log"),
        ("jsonl", "metrics.jsonl"),
        ("batch", "batch_generate.log"),
    ]
    for preset, name in cases:
        lines = [ln for ln in (PROGRESS / name).read_bytes().decode().split("\n") if ln]
        parse_us, feed_us = progress_us(preset, lines)
        segments = sum(ln.count("\r") + 1 for ln in lines)
        print(
            f"  {preset:5s} {name:22s} {len(lines):4d} lines ({segments:4d} segments): "
            f"parse {parse_us:7.1f}  feed {feed_us:7.1f}"
        )
    log = (SGLANG / "server_decode.log").read_text(encoding="utf-8").splitlines()
    us = per_call_ms(lambda: [parse_sglang_log_line(ln) for ln in log], 200) / len(log) * 1e3
    print(f"  sglang server_decode.log {len(log)} lines: {us:.1f} us per line")


if __name__ == "__main__":
    main()
