"""Connections a ``gpumon watch`` makes to a host that accepts and never answers.

Starts a hung sshd on 127.0.0.1 (``tests/support/hung_sshd.py``: it accepts every
connection and never sends its version line; on a real hung sshd each connection is a
pre-auth session) and a real ``gpumon watch`` on it with the default schedule, for
``--seconds`` (default 900: issue 34's 15 minutes). Prints the connections per minute,
the reachability probes and the SSH attempts apart, and the totals.

Run: ``PYTHONPATH=tests/support .venv/bin/python bench/bench_probes.py [--seconds 900]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from hung_sshd import HungSshd


def _per_minute(times: list[float], start: float, minutes: int) -> list[int]:
    counts = [0] * minutes
    for t in times:
        counts[min(int((t - start) // 60), minutes - 1)] += 1
    return counts


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        async with HungSshd() as hung:
            cfg = home / "config.toml"
            hosts = f'[hosts.hung]\nssh = "root@127.0.0.1"\nport = {hung.port}\n'
            cfg.write_text(hosts + "[watch]\nmetrics_port = 0\n")  # no exporter
            env = dict(os.environ, HOME=tmp, GPUMON_SSH_CONFIG="")
            env.update(XDG_CONFIG_HOME=f"{tmp}/config", XDG_STATE_HOME=f"{tmp}/state")
            env.pop("SSH_AUTH_SOCK", None)
            start = time.monotonic()
            watch = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "gpumon.tui.cli", "watch", "--config", str(cfg)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=(home / "watch.log").open("ab"),
                env=env,
            )
            try:
                async with asyncio.timeout(seconds):  # the measurement window itself
                    await watch.wait()
                raise SystemExit(f"the watch ended: {(home / 'watch.log').read_text()}")
            except TimeoutError:
                pass
            finally:
                if watch.returncode is None:
                    watch.send_signal(signal.SIGTERM)
                    await watch.wait()
    minutes = max(int(-(-seconds // 60)), 1)
    probes = _per_minute(hung.probes, start, minutes)
    attempts = _per_minute(hung.attempts, start, minutes)
    print("minute  probes  ssh attempts")
    for m, (p, a) in enumerate(zip(probes, attempts, strict=True), 1):
        print(f"{m:6d}  {p:6d}  {a:12d}")
    total = len(hung.probes) + len(hung.attempts)
    print(
        f"{seconds:.0f} s: {total} connections "
        f"({len(hung.probes)} probes, {len(hung.attempts)} SSH attempts)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=900.0)
    asyncio.run(main(parser.parse_args().seconds))
