"""Cost of one GPU sample: gpumon's stream vs what the operator does today.

Starts a real sshd on 127.0.0.1 (throwaway keys, stand-in ``pct``, the simulator's
``nvidia-smi``) and measures, per sample, the CPU time of everything involved: the
client process tree and the sshd session tree (sshd, shell, pct, agent, nvidia-smi),
read from /proc after the sessions are reaped, so other load on the machine does not
count. Also times ``gpumon snapshot demo --json`` and the CLI import.

    python bench/bench_backbone.py [--samples N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpumon.backends.parsers import query_gpu_args

from sshd_server import SshServer

TICK = os.sysconf("SC_CLK_TCK")


def sshd_reaped_cpu(server: SshServer) -> float:
    """CPU seconds of sshd's finished sessions (children's time, reaped recursively)."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / TICK  # cutime + cstime


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(server: SshServer, argv: list[str], samples: int) -> tuple[float, float]:
    """Run the client ``argv``; returns (CPU seconds per sample, wall seconds per sample)."""
    time.sleep(0.5)  # let earlier sessions be reaped
    cpu0, srv0, wall0 = children_cpu(), sshd_reaped_cpu(server), time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - wall0
    time.sleep(1.0)  # sessions end and are reaped after the client disconnects
    cpu = (children_cpu() - cpu0) + (sshd_reaped_cpu(server) - srv0)
    return cpu / samples, wall / samples


def client_script(server: SshServer, mode: str, samples: int) -> list[str]:
    cfg = server.root / "bench.toml"
    cfg.write_text(server.config_toml("ct200", container=200, interval=0.2))
    code = f"""
import asyncio
from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import make_monitor, make_transport
from gpumon.backends.parsers import parse_query_gpu, query_gpu_args
host = resolve_host(load_config({str(cfg)!r}), "ct200")
async def stream():
    m = make_monitor(host)
    m.start()
    while m.samples < {samples}:
        await m.wait_for_update(5)
    await m.stop()
async def exec_each():
    t = make_transport(host)
    for _ in range({samples}):
        res = await t.run(["nvidia-smi", *query_gpu_args()])
        assert len(parse_query_gpu(res.stdout).gpus) == 8
    await t.close()
asyncio.run({"stream" if mode == "stream" else "exec_each"}())
"""
    return [sys.executable, "-c", code]


def marginal(server: SshServer, mode: str, n: int) -> tuple[float, float]:
    """Per-sample cost without the client's fixed start-up: runs of n and 3n, subtracted."""
    cpu1, wall1 = measure(server, client_script(server, mode, n), n)
    cpu3, wall3 = measure(server, client_script(server, mode, 3 * n), 3 * n)
    return (cpu3 * 3 * n - cpu1 * n) / (2 * n), (wall3 * 3 * n - wall1 * n) / (2 * n)


def fresh_ssh_loop(server: SshServer, samples: int) -> list[str]:
    remote = shlex.join(["pct", "exec", "200", "--", "nvidia-smi", *query_gpu_args()])
    ssh = shlex.join(
        [
            "ssh", "-p", str(server.port), "-i", str(server.client_key),
            "-o", f"UserKnownHostsFile={server.known_hosts}", "-o", "BatchMode=yes",
            "-F", "/dev/null", "root@127.0.0.1", remote,
        ]
    )  # fmt: skip
    return ["sh", "-c", f"for i in $(seq {samples}); do {ssh} >/dev/null || exit 1; done"]


def wall_times(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    args = ap.parse_args()
    n = args.samples
    with tempfile.TemporaryDirectory() as tmp:
        server = SshServer(Path(tmp) / "sshd")
        server.setup()
        server.start()
        os.environ["GPUMON_SSH_CONFIG"] = ""
        try:
            fresh = measure(server, fresh_ssh_loop(server, n), n)
            each = marginal(server, "exec", n)
            stream = marginal(server, "stream", n * 3)
        finally:
            server.kill()
    print("per sample: CPU of client + sshd session tree, and wall; for exec and stream the")
    print("marginal cost (runs of N and 3N samples subtracted, so client start-up is excluded)")
    for name, (cpu, wall) in (
        ("fresh ssh + pct exec + nvidia-smi", fresh),
        ("exec on one open connection", each),
        ("gpumon stream (agent, -lms loop)", stream),
    ):
        print(f"  {name:<36} {cpu * 1000:8.2f} ms CPU   {wall * 1000:8.1f} ms wall")
    print(f"  stream is {fresh[0] / stream[0]:.1f}x cheaper than fresh ssh (target >= 20x)")
    print(f"  stream is {each[0] / stream[0]:.1f}x cheaper than exec per sample (target >= 5x)")

    gpumon = str(Path(sys.executable).parent / "gpumon")
    snap = wall_times([gpumon, "snapshot", "demo", "--json"], 5)
    print(
        f"gpumon snapshot demo --json: median {statistics.median(snap):.3f} s, "
        f"max {max(snap):.3f} s wall (includes waiting for the drafter job's second "
        "progress line, ~1 s apart, so its rate and ETA are not null)"
    )
    check = wall_times([gpumon, "check", "demo"], 5)
    print(
        f"gpumon check demo (a complete GPU sample + processes, no rates): median "
        f"{statistics.median(check):.3f} s, max {max(check):.3f} s wall (target < 1 s)"
    )
    bare = wall_times([sys.executable, "-c", "pass"], 5)
    cli = wall_times([sys.executable, "-c", "import gpumon.tui.cli"], 5)
    print(
        f"import gpumon.tui.cli: {statistics.median(cli) - statistics.median(bare):.3f} s "
        f"beyond interpreter start ({statistics.median(cli):.3f} s total; target < 0.3 s)"
    )


if __name__ == "__main__":
    main()
