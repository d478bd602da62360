"""Silent failures: the time from the fault to the incident for ``sglang_hung``,
``job_stalled`` (the NCCL watchdog line, and a silent log) and ``job_slow``, against the
target "the threshold plus two scrapes".

Each case runs the demo host (the simulator behind gpumon's real agent and parsers) in
its scenario, started a few scenario seconds before the fault, sampled every
``--interval``, with the rule's threshold shortened so the run takes seconds, not minutes:

- hang: server 0 of ``--scenario hang`` stops making tokens at ``HANG_AT`` with requests
  running; ``hung_after_s`` = ``--hung-after``. Fault: ``HANG_AT``.
- stall (watchdog): ``--scenario stall``, the drafter's rank 1 prints its NCCL collective
  timeout at ``STALL_TIMEOUT_AT``; the incident is raised on that line (no threshold).
  Fault: the line.
- stall (silent log): ``--scenario stall``, the drafter's last step at ``STALL_AT`` and
  ``stall_after_s`` = ``--stall-after``, watched from before the line could come. Fault:
  the last step.
- slow: ``--scenario slow``, the drafter at a third of its expected rate from the start
  (``slow_for_s`` = the demo's 3 s). Fault: gpumon's start (the run is already slow;
  the rule has to see two progress lines for a rate, then ``slow_for_s``).

    PYTHONPATH=tests/support python bench/bench_silent.py [--interval S] [--hung-after S]
        [--stall-after S]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace

from gpumon.backends.config import HostConfig, load_config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.sim.scenario import HANG_AT, STALL_AT, STALL_TIMEOUT_AT, wall_time

WAIT_S = 90.0  # past the threshold: give up and say NOT raised


async def latency(
    name: str,
    scenario: str,
    start_at: float,
    fault_at: float | None,
    kind: str,
    threshold: float,
    interval: float,
    tune: Callable[[HostConfig], HostConfig],
) -> None:
    """Run the demo host in ``scenario`` from scenario time ``start_at`` and print the
    time from ``fault_at`` (scenario seconds; None: gpumon's start) to the first
    ``kind`` alert. ``tune``: the monitor's host with the rule's threshold set."""
    settings = demo_settings(scenario, demo_time=start_at)
    host = replace(resolve_host(load_config(None), "demo"), interval=interval)
    monitor = make_monitor(host, settings, reconnect=False, record=False)
    monitor.host = monitor.workloads.host = tune(monitor.host)  # the rules read it each sample
    started = time.time()
    fault = wall_time(settings, fault_at) if fault_at is not None else started
    monitor.start()
    try:
        deadline = max(fault, started) + threshold + WAIT_S
        while time.time() < deadline:
            found = [a for a in monitor.alerts.active() if a.kind == kind]
            if found:
                seen = found[0].time - fault
                extra = seen - threshold
                verdict = "within" if extra <= 2 * interval else "OVER"
                print(
                    f"{name}: {seen:.2f} s from the fault to {kind} (threshold "
                    f"{threshold:g} s + {extra:.1f} s = {extra / interval:.1f} scrapes at "
                    f"{interval:g} s; {verdict} the target of 2): {found[0].message}"
                )
                return
            await asyncio.sleep(0.05)
        print(f"{name}: {kind} NOT raised within the threshold + {WAIT_S:g} s")
    finally:
        await monitor.stop()


def _sglang(after: float) -> Callable[[HostConfig], HostConfig]:
    def tune(h: HostConfig) -> HostConfig:
        assert h.sglang is not None
        return replace(h, sglang=replace(h.sglang, hung_after_s=after))

    return tune


def _drafter(
    stall_after_s: float | None = None, slow_for_s: float = 300.0
) -> Callable[[HostConfig], HostConfig]:
    def tune(h: HostConfig) -> HostConfig:
        jobs = tuple(
            replace(j, stall_after_s=stall_after_s, slow_for_s=slow_for_s)
            if j.name == "drafter"
            else j
            for j in h.jobs
        )
        return replace(h, jobs=jobs)

    return tune


async def run(interval: float, hung_after: float, stall_after: float) -> None:
    await latency(
        "hang", "hang", HANG_AT - 5.0, HANG_AT, "sglang_hung", hung_after, interval,
        _sglang(hung_after),
    )  # fmt: skip
    await latency(
        "stall (NCCL watchdog line)", "stall", STALL_TIMEOUT_AT - 5.0, STALL_TIMEOUT_AT,
        "job_stalled", 0.0, interval, _drafter(),
    )  # fmt: skip
    await latency(
        "stall (silent log)", "stall", STALL_AT - 5.0, STALL_AT, "job_stalled", stall_after,
        interval, _drafter(stall_after_s=stall_after),
    )  # fmt: skip
    await latency("slow", "slow", 400.0, None, "job_slow", 3.0, interval, _drafter(slow_for_s=3.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--hung-after", type=float, default=10.0)
    parser.add_argument("--stall-after", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        os.environ["XDG_STATE_HOME"] = state  # learned baselines stay out of the user's
        asyncio.run(run(args.interval, args.hung_after, args.stall_after))


if __name__ == "__main__":
    main()
