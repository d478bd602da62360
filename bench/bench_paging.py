"""How soon ``gpumon watch`` pages a host that is down or broken (issue 28 points 1, 2, 4).

Each run starts a real sshd on 127.0.0.1 (``tests/support/sshd_server.py``), a test
webhook receiver and ``gpumon watch`` with one notifier, and measures the time until the
receiver holds the incident's ``open`` event:

- ``down``: nothing listens on the host's port from the start (watch start -> open
  ``host_unreachable``);
- ``killed``: sshd and every session it serves are SIGKILLed once data flows and the
  watch counts the host (kill -> open ``host_unreachable``);
- ``hang``: the host's nvidia-smi hangs from the start (watch start -> open
  ``stale_data``);
- ``lost``: its nvidia-smi says "GPU is lost" from the start (watch start -> open
  ``driver_error``).

A host's alerts count once it sent three samples or ``SETTLE_S`` (10 s) after the watch
took it up, so the three "from the start" figures sit just above 10 s by design.

Run: ``PYTHONPATH=tests/support .venv/bin/python bench/bench_paging.py [--runs 3]``.
Prints the median and the maximum of each figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gpumon.backends.notify.hub import SETTLE_S

from prometheus import free_port
from receiver import Receiver
from sshd_server import SshServer
from watch_faults import Watch, faulty_config, is_event, wait_agent_up, wait_event, watch_config

# fault -> (the incident's kind, fake_smi's mode on the target or None: the simulator)
FAULTS = {
    "down": ("host_unreachable", None),
    "killed": ("host_unreachable", None),
    "hang": ("stale_data", "stall"),
    "lost": ("driver_error", "lost"),
}


def client_env(root: Path) -> dict[str, str]:
    """A gpumon child's environment: its own HOME and state, no ssh config or agent."""
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "GPUMON_CONFIG")}
    env.update(
        HOME=str(home),
        GPUMON_SSH_CONFIG="",
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".state"),
    )
    return env


def one_run(fault: str, root: Path) -> float:
    """Seconds from the fault (or the watch's start) to the open event at the receiver."""
    sshd = SshServer(root / "sshd")
    sshd.setup()
    sshd.start()
    env = client_env(root)
    log = root / "watch.log"
    port = free_port()  # the exporter, to see when data flows
    kind, mode = FAULTS[fault]
    try:
        with Receiver() as rx:
            if mode is not None:
                cfg, log = faulty_config(sshd, rx, root, mode)
            else:
                cfg = root / "config.toml"
                cfg.write_text(watch_config(rx, sshd.config_toml("box"), port))
            if fault == "down":
                sshd.kill()
            started = time.monotonic()
            with Watch(cfg, env, log):
                if fault == "killed":  # mid-stream: data flows and the host counts already
                    wait_agent_up(port, log)
                    time.sleep(max(started + SETTLE_S + 1.0 - time.monotonic(), 0.0))
                    sshd.kill()
                _, took = wait_event(rx, log, is_event("open", kind))
            return took
    finally:
        sshd.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated")
    args = parser.parse_args()
    for fault in args.faults.split(","):
        took = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="gpumon-paging-") as tmp:
                took.append(one_run(fault, Path(tmp)))
        each = ", ".join(f"{t:.1f}" for t in took)
        print(
            f"{fault:<7} fault -> open event at the receiver: median "
            f"{statistics.median(took):.1f} s, max {max(took):.1f} s  ({args.runs} runs: {each})"
        )


if __name__ == "__main__":
    main()
