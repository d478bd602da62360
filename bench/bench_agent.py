"""The agent's own cost on the target: RSS, CPU and wake-ups at 1 Hz.

Starts the real agent as ``gpumon local`` starts it (``sources.agent.agent_argv``: the
same interpreter flags and shipped modules) with the benches' NVML shim (``bench/nvml_shim``) on
PYTHONPATH (8 fake GPUs behind the real nvidia-ml-py) or, with NVML off, the simulator's
nvidia-smi; optionally watching 8 simulated SGLang servers (``sim.sglang_server``, their
``/metrics`` every interval) and their logs. After a warm-up it measures a window:

- CPU: the agent's own utime+stime over the window, % of one core (its nvidia-smi
  children apart: the simulator's nvidia-smi is a Python program, not the real one);
  "exact": the same from its live threads' schedstat run time in ns (utime+stime are
  10 ms ticks, sampled: +-0.1 % of a core over 60 s at these rates);
- RSS: VmRSS, RssAnon, RssFile at the end, VmHWM;
- wake-ups/s: voluntary context switches of the agent's live threads over the window
  (/proc/PID/task/*/status; a thread that ended inside the window is not counted);
- messages/s by type (how often the process list is polled, for one).

Cases: ``nvml`` or ``smi``, plus ``+work`` (the SGLang servers and logs; ``+http``: the
servers' scrapes alone, ``+logs``: their logs alone, which then lack the access line of
each scrape, 8 of their ~11 lines/s) and ``+steady``
(the simulated nvidia-smi frozen: GPU memory that does not move, as on a steady job; the
NVML shim's memory always moves). ``shim-cost``: the NVML shim's own RSS (its uuid,
hashlib and libcrypto), a bare interpreter without and with its import, to take from the
NVML figures for what a real GPU host sees (where libnvidia-ml.so takes the shim's place).

    python bench/bench_agent.py [--window 60] [--cases nvml,smi,nvml+work,smi+work,...]
        [--python /tmp/anchors-venv/bin/python] [--shim bench/nvml_shim]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gpumon.backends.monitor import demo_settings
from gpumon.backends.monitor.sources.agent import agent_argv
from gpumon.backends.parsers import PROCESS_FIELDS, QUERY_FIELDS
from gpumon.backends.parsers.oom import KEEP_PATTERN
from gpumon.backends.parsers.sglang import METRICS_LINE_FILTER
from gpumon.backends.remote.protocol import AgentOptions
from gpumon.backends.sim import write_wrapper
from gpumon.backends.workloads.watch import SERVER_INFO_PATHS

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "bench" / "nvml_shim"
ANCHORS_PYTHON = Path("/tmp/anchors-venv/bin/python")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVERS = 8


def stat_ticks(pid: int) -> tuple[int, int]:
    """(utime+stime of ``pid``, cutime+cstime: its reaped children)."""
    words = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(words[11]) + int(words[12]), int(words[13]) + int(words[14])


def children_ticks(pid: int) -> int:
    """utime+stime of the live children of ``pid`` (its nvidia-smi loop)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    total += sum(stat_ticks(int(child)))
    return total


def run_ns(pid: int) -> dict[str, int]:
    """Each live thread's time on a CPU so far, in ns (/proc/PID/task/TID/schedstat: exact,
    where utime+stime are counted in 10 ms ticks: +-0.1 % over a 60 s window)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[task.name] = int((task / "schedstat").read_text().split()[0])
    return out


def wakeups(pid: int) -> tuple[int, int]:
    """(voluntary context switches summed over the live threads, thread count)."""
    total = threads = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, StopIteration, ValueError):
            lines = (task / "status").read_text().splitlines()
            total += int(next(ln for ln in lines if ln.startswith("voluntary_ctxt")).split()[1])
            threads += 1
    return total, threads


def memory(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


class Reader(threading.Thread):
    """Drains the agent's stdout, counting messages by type; keeps the Hello."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.counts: collections.Counter[str] = collections.Counter()
        self.hello: dict[str, Any] | None = None

    def run(self) -> None:
        for line in self.stream:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                self.counts[str(msg.get("type"))] += 1
                if self.hello is None and msg.get("type") == "hello":
                    self.hello = msg


def start_servers(log_dir: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """The simulated SGLang servers on free ports (random ones, beside other engineers'
    servers: another try when one is taken) and their ports."""
    log_dir.mkdir()
    sim = [sys.executable, "-m", "gpumon.backends.sim.sglang_server"]
    for _ in range(10):
        base = random.randrange(32000, 60000, 16)
        ports = list(range(base, base + SERVERS))
        servers = subprocess.Popen(
            [*sim, "--ports", f"{ports[0]}-{ports[-1]}", "--log", str(log_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert servers.stdout is not None
        line = servers.stdout.readline().strip()  # its start-up line
        print("  ", line, file=sys.stderr)
        if "serving" in line:
            return servers, ports
        servers.wait(10)
    raise SystemExit("bench_agent: no free ports for the SGLang servers")


def run_case(case: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    nvml = case.startswith("nvml")
    scrape = "+work" in case or "+http" in case
    follow = "+work" in case or "+logs" in case
    smi = write_wrapper(tmp / "bin", demo_settings(frozen="+steady" in case))
    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(8)]
    env = {
        "PATH": f"{smi.parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(args.shim),
        "NVML_SHIM_PIDS": ",".join(str(p.pid) for p in sleepers),
    }
    servers = None
    logs: list[dict[str, str]] = []
    http: list[dict[str, Any]] = []
    if scrape or follow:
        log_dir = tmp / "logs"
        servers, ports = start_servers(log_dir)
    if follow:
        logs = [{"path": str(log_dir / f"sglang-{p}.log"), "tag": "sglang", "keep": KEEP_PATTERN}
                for p in ports]  # fmt: skip
    if scrape:
        http = [
            {
                "url": f"http://127.0.0.1:{p}/metrics",
                "tag": f"sglang:{p}",
                "filter": METRICS_LINE_FILTER,
                "info": list(SERVER_INFO_PATHS),
                "info_tag": f"sglang-info:{p}",
            }
            for p in ports
        ]
    options = AgentOptions(
        fields=list(QUERY_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi=str(smi),
        interval=1.0,
        nvml=nvml,
        logs=logs,
        http=http,
    )
    argv, data = agent_argv(str(args.python), options)
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(data)
    agent.stdin.flush()
    reader = Reader(agent.stdout)
    reader.start()
    try:
        time.sleep(args.warmup)
        own0, reaped0 = stat_ticks(agent.pid)
        live0 = children_ticks(agent.pid)
        wake0, _ = wakeups(agent.pid)
        ns0 = run_ns(agent.pid)
        counts0 = dict(reader.counts)
        t0 = time.monotonic()
        time.sleep(args.window)
        own1, reaped1 = stat_ticks(agent.pid)
        live1 = children_ticks(agent.pid)
        wake1, threads = wakeups(agent.pid)
        ns1 = run_ns(agent.pid)
        wall = time.monotonic() - t0
        mem = memory(agent.pid)
        counts = {k: (v - counts0.get(k, 0)) / wall for k, v in reader.counts.items()}
    finally:
        agent.stdin.close()
        agent.wait(10)
        if servers is not None:
            servers.terminate()
            servers.wait(10)
        for s in sleepers:
            s.kill()
            s.wait()
    hello = reader.hello or {}
    return {
        "case": case,
        "source": hello.get("source"),
        "note": hello.get("note"),
        "cpu_pct": round(100.0 * (own1 - own0) / CLK_TCK / wall, 2),
        "cpu_exact_pct": round(
            100.0 * sum(v - ns0.get(k, 0) for k, v in ns1.items()) / 1e9 / wall, 3
        ),
        "children_cpu_pct": round(
            100.0 * ((reaped1 - reaped0) + (live1 - live0)) / CLK_TCK / wall, 2
        ),
        "rss_mib": round(mem["VmRSS"] / 1024, 1),
        "anon_mib": round(mem["RssAnon"] / 1024, 1),
        "file_mib": round(mem["RssFile"] / 1024, 1),
        "hwm_mib": round(mem["VmHWM"] / 1024, 1),
        "threads": threads,
        "wakeups_per_s": round((wake1 - wake0) / wall, 1),
        "messages_per_s": {k: round(v, 2) for k, v in sorted(counts.items()) if v},
    }


# The shim's own cost: a bare interpreter (the agent's -S) importing pynvml as the agent
# does (ctypes.util a stand-in, site-packages appended), without and with the shim's
# sitecustomize (which patches pynvml as it is imported). The difference is what a real GPU host,
# where libnvidia-ml.so stands in place of the shim, would not see of the figures above.
BARE = """
import sys, types, ctypes, time
sys.path.append({site!r})
util = types.ModuleType("ctypes.util")
util.find_library = None
sys.modules["ctypes.util"] = util
ctypes.util = util
{imports}
del sys.modules["ctypes.util"]
sys.stdout.write("ready\\n")
sys.stdout.flush()
time.sleep(60)
"""


def bare_memory(python: Path, code: str) -> dict[str, int]:
    proc = subprocess.Popen(
        [str(python), "-S", "-u", "-c", code], stdout=subprocess.PIPE, env={"LANG": "C.UTF-8"}
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)
        return memory(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def shim_cost(args: argparse.Namespace) -> dict[str, Any]:
    where = "import site; print(site.getsitepackages()[0])"
    site = subprocess.run(
        [str(args.python), "-c", where], capture_output=True, text=True, check=True
    ).stdout.strip()
    shim = f"sys.path.insert(0, {str(args.shim)!r})\nimport sitecustomize\nimport pynvml"
    runs = {
        "pynvml": bare_memory(args.python, BARE.format(site=site, imports="import pynvml")),
        "shim": bare_memory(args.python, BARE.format(site=site, imports=shim)),
    }
    out: dict[str, Any] = {"case": "shim-cost"}
    for key, name in (("VmRSS", "rss"), ("RssAnon", "anon"), ("RssFile", "file")):
        out[f"{name}_mib"] = {k: round(v[key] / 1024, 1) for k, v in runs.items()}
        out[f"shim_{name}_mib"] = round((runs["shim"][key] - runs["pynvml"][key]) / 1024, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--cases", default="nvml,smi,nvml+work,smi+work,smi+steady,shim-cost")
    default_python = ANCHORS_PYTHON if ANCHORS_PYTHON.exists() else Path(sys.executable)
    parser.add_argument("--python", type=Path, default=default_python)
    parser.add_argument("--shim", type=Path, default=SHIM)
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    args = parser.parse_args()
    print(f"agent python: {args.python}; window {args.window:.0f} s", file=sys.stderr)
    for case in args.cases.split(","):
        if case == "shim-cost":
            cost = shim_cost(args)
            if args.json:
                print(json.dumps(cost), flush=True)
                continue
            print(
                f"{case:10} bare -S interpreter, RSS with pynvml {cost['rss_mib']['pynvml']} "
                f"MiB, with the shim {cost['rss_mib']['shim']} MiB: the shim's own "
                f"{cost['shim_rss_mib']} MiB (anon {cost['shim_anon_mib']}, "
                f"file {cost['shim_file_mib']})",
                flush=True,
            )
            continue
        with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
            result = run_case(case, args, Path(tmp))
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(
            f"{case:10} RSS {result['rss_mib']:5.1f} MiB (anon {result['anon_mib']:4.1f}, "
            f"file {result['file_mib']:4.1f}, hwm {result['hwm_mib']:4.1f})  "
            f"CPU {result['cpu_pct']:5.2f} % (exact {result['cpu_exact_pct']:5.3f} %, "
            f"children {result['children_cpu_pct']:5.2f} %)  "
            f"wake-ups {result['wakeups_per_s']:5.1f}/s  threads {result['threads']}",
            flush=True,
        )
        print(f"{'':10} {result['source']}  note: {result['note']}", flush=True)
        print(f"{'':10} messages/s {result['messages_per_s']}", flush=True)


if __name__ == "__main__":
    main()
