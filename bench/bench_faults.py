"""Faults on a real SSH link: how fast gpumon notices and how fast it recovers.

Starts a real sshd on 127.0.0.1 (``tests/support/sshd_server.py``: throwaway keys, the
simulator's nvidia-smi on the session PATH) and one HostMonitor on it, at a 1 s interval.

- ``kill``: sshd and every session it serves are SIGKILLed (the kernel closes the
  sockets, the client sees the connection drop), then sshd is started again after
  ``--outage`` seconds. Measured: link kill -> the screen marks the data stale (the
  monitor leaves CONNECTED or its data is stale), and sshd back -> a fresh sample.
- ``hang``: every sshd session process is SIGSTOPped (the TCP connection stays up, no
  RST: a hung link), then SIGCONTed after ``--outage`` seconds. Measured: hang -> stale
  mark, and resume -> a fresh sample.
- ``stop``: only the sshd processes that serve the session are SIGSTOPped, and left so
  until gpumon has replaced the link (issue 28 point 5: a hung link; the listener still
  accepts). Measured: stop -> a new session's sshd exists (the new connection), and stop
  -> a fresh sample (over it); the issue wants the new connection within 5 s, 5 of 5.

Run: ``PYTHONPATH=tests/support .venv/bin/python bench/bench_faults.py [--kills 20]
[--hangs 5] [--stops 5] [--outage 2]``. Prints median and max of each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from gpumon.backends.config import load_config
from gpumon.backends.model import ConnState
from gpumon.backends.monitor import HostMonitor, make_monitor

from sshd_server import SshServer, descendants, serving_sshd

TIMEOUT_S = 60.0


def shows_stale(monitor: HostMonitor) -> bool:
    """What the header shows as not live: a lost connection, "no data" (a silent stream)
    or data too old."""
    return (
        monitor.status.state is not ConnState.CONNECTED or monitor.no_data() or monitor.is_stale()
    )


async def wait_for(condition: object, what: str) -> float:
    """Seconds until ``condition()`` holds (polled every 10 ms); raises on TIMEOUT_S."""
    assert callable(condition)
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > TIMEOUT_S:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def fresh_after(monitor: HostMonitor, moment: float) -> float:
    return await wait_for(
        lambda: monitor.latest is not None and monitor.latest.time > moment, "fresh data"
    )


def sessions(server: SshServer) -> list[int]:
    assert server.proc is not None
    return descendants(server.proc.pid)


async def one_kill(server: SshServer, monitor: HostMonitor, outage: float) -> tuple[float, float]:
    await fresh_after(monitor, time.time())
    server.kill()
    stale = await wait_for(lambda: shows_stale(monitor), "stale mark")
    await asyncio.sleep(max(outage - stale, 0.0))
    server.start()
    back = time.time()
    return stale, await fresh_after(monitor, back)


async def one_hang(server: SshServer, monitor: HostMonitor, outage: float) -> tuple[float, float]:
    await fresh_after(monitor, time.time())
    stopped = sessions(server)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        stale = await wait_for(lambda: shows_stale(monitor), "stale mark")
        await asyncio.sleep(max(outage - stale, 0.0))
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    resumed = time.time()
    return stale, await fresh_after(monitor, resumed)


async def one_stop(server: SshServer, monitor: HostMonitor) -> tuple[float, float]:
    await fresh_after(monitor, time.time())
    stopped = serving_sshd(server)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    at, began = time.time(), time.monotonic()
    try:
        new = await wait_for(lambda: set(serving_sshd(server)) - set(stopped), "a new sshd")
        fresh = time.monotonic() - began + await fresh_after(monitor, at)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return new, fresh


def report(name: str, figures: list[tuple[float, float]]) -> None:
    if not figures:
        return
    stale = [s for s, _ in figures]
    back = [b for _, b in figures]
    print(
        f"{name:5} x{len(figures):<3} stale mark: median {statistics.median(stale):5.2f} s, "
        f"max {max(stale):5.2f} s   fresh data after the host is back: median "
        f"{statistics.median(back):5.2f} s, max {max(back):5.2f} s, "
        f"{sum(b <= 5.0 for b in back)}/{len(back)} within 5 s"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = SshServer(Path(tmp) / "sshd")
        server.setup()
        server.start()
        config_file = Path(tmp) / "config.toml"
        config_file.write_text(server.config_toml(python="python3"), encoding="utf-8")
        host = load_config(config_file).hosts["ct200"]
        monitor = make_monitor(host)
        monitor.start()
        try:
            kills = [await one_kill(server, monitor, args.outage) for _ in range(args.kills)]
            report("kill", kills)
            hangs = [await one_hang(server, monitor, args.outage) for _ in range(args.hangs)]
            report("hang", hangs)
            stops = [await one_stop(server, monitor) for _ in range(args.stops)]
            for i, (new, fresh) in enumerate(stops, 1):
                print(f"stop  #{i}: new connection {new:5.2f} s, fresh data {fresh:5.2f} s")
            if stops:
                new_s = [n for n, _ in stops]
                print(
                    f"stop  x{len(stops):<3} new connection: median "
                    f"{statistics.median(new_s):5.2f} s, max {max(new_s):5.2f} s, "
                    f"{sum(n < 5.0 for n in new_s)}/{len(new_s)} under 5 s; fresh data: "
                    f"median {statistics.median(f for _, f in stops):5.2f} s, "
                    f"max {max(f for _, f in stops):5.2f} s"
                )
        finally:
            await monitor.stop()
            server.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--hangs", type=int, default=5)
    parser.add_argument("--stops", type=int, default=5)
    parser.add_argument("--outage", type=float, default=2.0, help="seconds the host is down")
    asyncio.run(main(parser.parse_args()))
