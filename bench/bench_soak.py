"""Soak: the demo for a simulated day; RSS per simulated hour must be flat after the first.

    python bench/bench_soak.py [--hours 24] [--speed 0] [--interval 1] [--scrape-every 10]
                               [--scenario both|training-oom|sglang]
                               [--part both|monitor|dashboard] [--jobs 2]
    python bench/bench_soak.py --part watch [--minutes 60] [--demo-speed 10]
                               [--scenario training-oom|sglang] [--sample-every 30]
                               [--target demo|ssh [--churn S]] [--trace DIR]
    python bench/bench_soak.py --part local-tmux [--minutes 60] [--interval 1]
                               [--sample-every 30] [--warmup 10] [--out FILE.jsonl]
                               [--trace DIR [--trace-every 300]] [--gpumon PATH]

Part ``local-tmux`` is real time instead: ``gpumon local --interval N`` (by default the
``gpumon`` beside this Python) runs in tmux at 120x40 over the benches' NVML shim
(``$GPUMON_NVML_SHIM``, default ``bench/nvml_shim``; 8 simulated GPUs whose processes are
8 ``sleep`` PIDs this bench starts), as the side-by-side runs with nvitop run it. After
``--warmup`` s, every ``--sample-every`` s it prints the dashboard's VmRSS and VmHWM, the
RSS of its agent (the pane process's descendants) and both CPUs, then a table: start,
after 10 min, end, max and the least-squares slope in MiB/h over the run and after its
first 10 minutes. ``--trace DIR`` runs the same dashboard inside this
script under tracemalloc (it costs ~20 % of a core and its own memory: not a run to read
RSS from) and prints what grew from the 10th minute to the end, by allocating line and
traceback, and the gc's object counts by type.

Part ``watch`` is real time too: ``gpumon watch demo`` (no notifier, its state in a
temporary directory) with the demo's clock at ``--demo-speed`` (10: an OOM cycle a minute),
sampled and summed up as local-tmux is (``--trace DIR`` too: what grew after 5 minutes).
``--target ssh``: ``gpumon watch`` of a real sshd on 127.0.0.1 (the integration tests'
``sshd_server``) whose nvidia-smi is the simulator's at that speed: asyncssh, the agent
over SSH, as the field runs it (the agent is sshd's child there, not watch's: its RSS
reads 0); ``--churn S`` SIGKILLs the sshd serving the session every S seconds (a
reconnection each time).

The simulated CT200 of ``gpumon demo`` drives a real ``HostMonitor`` (part ``monitor``) or a
real ``GpumonApp`` with its monitor under Textual's headless driver (part ``dashboard``),
through a transport whose agent stream is generated from the simulator's own pure
functions on a simulated clock: the JSON lines the agent sends (a GPU round every
``--interval``, the process list every 5 s, the job's log lines, each SGLang server's
``/metrics`` and decode log), through the same ``untrusted.loads``, parsers, alert engine,
flight recorder (incidents written to a temporary directory), trackers and, in the
dashboard, views and toasts. The clock advances as the lines are read, so a day passes in
minutes; ``--speed N`` caps it at N simulated seconds per second (0: as fast as the CPU
goes). The dashboard is redrawn every simulated minute, besides its own timer.

- ``training-oom`` is replayed every 10 simulated minutes: the drafter ramps GPU 6, dies of
  CUDA OOM at 60 s (traceback in its log, OOM-death and memory alerts, an incident
  recording) and stays down until the next replay: 144 OOMs a day.
- ``sglang``: the eight servers' steady day. The agent scrapes ``/metrics`` every interval;
  here every ``--scrape-every`` simulated seconds (10 by default, 69,120 scrapes a day),
  because a scrape costs ~2 ms (``untrusted.loads`` of the body and the Prometheus
  parse) and 1 s would make the day ~30 min of CPU per part.

Each (scenario, part) runs in its own process, ``--jobs`` at a time. At every simulated
hour it prints the RSS (after ``gc.collect()`` and ``malloc_trim``, so freed heap does not
count), the live Python heap blocks (``sys.getallocatedblocks``) and what the bounded
buffers hold. Verdict: flat when no later hour is more than ``max(3 MiB, 5 %)`` above the
RSS at the end of hour 1 (every history full) and the RSS slope over the second half of the
run is under 0.05 MiB/h. The margin is for the dashboard: Textual's per-widget render
caches keep filling for ~3 simulated hours (+1.4 MiB with the SGLang pane), after which the
live heap is flat. Exit status 1 when a part grows or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed, so mypy sees the bench's calls into the app (a renamed method)
    from gpumon.tui.app import GpumonApp

SOAK_T0 = 1795962720.0  # the simulator's DEFAULT_T0: 2026-11-29 14:32:00 UTC
CYCLE_S = 600.0  # training-oom replays every 10 simulated minutes
PROCESS_EVERY_S = 5.0
REDRAW_EVERY_S = 60.0
YIELD_EVERY = 64  # lines between two turns of the event loop
PORTS = tuple(range(30000, 30008))


def settle() -> None:
    """Collect garbage and hand freed heap back to the OS, so RSS counts what is live."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# --- the simulated machine's agent stream ------------------------------------------------


class DemoDay:
    """The agent's JSON lines for one simulated scenario, one sampling round per
    ``interval`` of a clock that only moves as the lines are taken."""

    def __init__(
        self, scenario: str, interval: float, scrape_every: float, hours: float, state: Path
    ) -> None:
        from gpumon.backends.parsers import METRICS_LINE_FILTER, PROCESS_FIELDS, QUERY_FIELDS
        from gpumon.backends.sim import SimSettings, job, smi
        from gpumon.backends.sim.scenario import DrafterRun

        self.scenario = scenario
        self.interval = interval
        self.end = SOAK_T0 + hours * 3600.0
        self.now = SOAK_T0
        self.settings = SimSettings(scenario=scenario, t0=SOAK_T0)
        shape = "--format=csv,noheader,nounits"  # what the agent asks for
        gpu_cmd = smi.parse_args([f"--query-gpu={','.join(QUERY_FIELDS)}", shape])
        proc_cmd = smi.parse_args([f"--query-compute-apps={','.join(PROCESS_FIELDS)}", shape])
        self.gpus = smi.Printer(gpu_cmd, self.settings)
        self.procs = smi.Printer(proc_cmd, self.settings)
        self.fields = list(QUERY_FIELDS)
        self.every = {
            "procs": max(round(PROCESS_EVERY_S / interval), 1),
            "scrape": max(round(scrape_every / interval), 1),
        }
        self.job_log = str(state / "drafter.log")
        self.job_events = list(job.log_events(self.settings, "drafter", DrafterRun(0, 0.0)))
        self.sglang_log = str(state / "sglang-{port}.log")
        self.wanted = re.compile(METRICS_LINE_FILTER)
        self.last_epoch = -1

    def clock(self) -> float:
        return self.now

    def rounds(self, on_round: Callable[[float], None]) -> Iterator[dict[str, Any]]:
        """Every message of the day, in order; ``on_round(now)`` runs before each round."""
        yield {"type": "hello", "agent": 1, "source": "agent/nvidia-smi"}
        k = 0
        while (now := SOAK_T0 + k * self.interval) <= self.end:
            self.now = now
            on_round(now)
            elapsed = now - SOAK_T0
            t = elapsed % CYCLE_S if self.scenario == "training-oom" else elapsed
            rows = self.gpus.gpu_round(t, now).splitlines()
            yield {"type": "gpus", "t": now, "fields": self.fields, "rows": rows}
            if k % self.every["procs"] == 0:
                rows = self.procs.process_round(t, now).splitlines()
                yield {"type": "procs", "t": now, "rows": rows}
            if self.scenario == "training-oom":
                yield from self._job_log(t)
            else:
                if k % self.every["scrape"] == 0:
                    yield from self._scrapes(t)
                yield from self._decode_logs(t)
            k += 1

    def _job_log(self, t: float) -> Iterator[dict[str, Any]]:
        due = [text for at, text in self.job_events if t - self.interval < at <= t]
        if due:
            yield self._log("job:drafter", self.job_log, "\n".join(due).split("\n"))

    def _scrapes(self, t: float) -> Iterator[dict[str, Any]]:
        from gpumon.backends.sim import UPTIME_AT_T0, metrics_text

        for i, port in enumerate(PORTS):
            text = metrics_text(self.settings, i, t, -UPTIME_AT_T0)
            body = "".join(ln + "\n" for ln in text.splitlines() if self.wanted.match(ln))
            yield {
                "type": "http",
                "tag": f"sglang:{port}",
                "t": self.now,
                "status": 200,
                "body": body,
            }

    def _decode_logs(self, t: float) -> Iterator[dict[str, Any]]:
        from gpumon.backends.sim import UPTIME_AT_T0, sglang_model

        epoch = int((t + UPTIME_AT_T0) // sglang_model.LOG_INTERVAL_S)
        if epoch == self.last_epoch:
            return
        self.last_epoch = epoch
        for i, port in enumerate(PORTS):
            lines = sglang_model.log_lines(self.settings, i, epoch, -UPTIME_AT_T0)
            yield self._log("sglang", self.sglang_log.format(port=port), lines)

    def _log(self, tag: str, path: str, lines: list[str]) -> dict[str, Any]:
        return {
            "type": "log",
            "tag": tag,
            "path": path,
            "t": self.now,
            "backlog": False,
            "lines": lines,
            "dropped": 0,
        }


class _Stdout:
    def __init__(
        self, lines: Iterator[bytes], speed: float, day: DemoDay, ready: asyncio.Event
    ) -> None:
        self.lines = lines
        self.speed = speed
        self.day = day
        self.ready = ready
        self.started = time.monotonic()
        self.count = 0

    async def readline(self) -> bytes:
        if not self.ready.is_set():  # the dashboard is up (the day starts on its screen)
            await self.ready.wait()
            self.started = time.monotonic()
        self.count += 1
        if self.count % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # the app's timers and the monitor's listeners get a turn
        if self.speed > 0:
            ahead = (self.day.now - SOAK_T0) / self.speed - (time.monotonic() - self.started)
            if ahead > 0:
                await asyncio.sleep(ahead)
        return next(self.lines, b"")

    async def read(self, size: int) -> bytes:
        return await self.readline()  # a line at a time (ProcessStream bounds them)


class _Nothing:
    async def readline(self) -> bytes:
        return b""

    async def read(self, size: int) -> bytes:
        return b""

    def write(self, data: bytes) -> None:
        pass

    def write_eof(self) -> None:
        pass


def soak_transport(
    host: Any, day: DemoDay, speed: float, on_round: Callable[[float], None], ready: asyncio.Event
) -> Any:
    """A Transport whose one agent stream is the simulated day (and whose python exists);
    the day starts when ``ready`` is set."""
    from gpumon.backends.transport import ProcessStream, RunResult, Transport

    class SoakTransport(Transport):
        label = "simulated day"

        async def run(
            self,
            argv: Sequence[str],
            *,
            input: bytes | None = None,
            timeout: float = 30.0,
            on_host: bool = False,
            max_bytes: int = 0,
            keep_end: bool = False,
        ) -> RunResult:
            return RunResult(0, "True\n", "")  # the monitor's "is there a python" probe

        async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
            messages = day.rounds(on_round)
            lines = (json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in messages)

            async def waiter() -> int:
                return 0

            return ProcessStream(
                _Stdout(lines, speed, day, ready),
                _Nothing(),
                _Nothing(),
                waiter,
                lambda: None,
                lambda: None,
            )

    return SoakTransport(host)


# --- one (scenario, part) in this process --------------------------------------------------


def census(monitor: Any, app: Any | None) -> dict[str, int]:
    """What every bounded buffer holds now (entries), to attribute any growth."""
    alerts = monitor.alerts
    out = {
        "history": max((len(h) for h in monitor.histories.values()), default=0),
        "recorder": len(monitor.recorder),
        "recorder_alerts": len(monitor.recorder._alerts),
        "incidents": len(monitor.recorder.written),
        "alert_history": len(alerts.history()),
        "active_alerts": len(alerts.active()),
        "alert_repeat": len(alerts._repeat),
        "log_sources": len(alerts._logs),
        "notes": len(alerts.notes()),
    }
    for tracker in monitor.workloads.sglang.values():
        out["sglang_points"] = max(out.get("sglang_points", 0), len(tracker._points))
        out["sglang_history"] = max(out.get("sglang_history", 0), len(tracker.history))
    for job in monitor.workloads.jobs.values():
        out["job_rate_history"] = len(job.rate_history)
    if app is not None:
        out["toasts"] = len(app._notifications)
        out["screens"] = len(app.screen_stack)
    out["gc_objects"] = len(gc.get_objects())
    out["heap_blocks"] = sys.getallocatedblocks()  # every live Python object, strings too
    return out


def soak_one(scenario: str, part: str, args: argparse.Namespace) -> int:
    from gpumon.backends.config import Config, JobConfig, SglangConfig, resolve_host
    from gpumon.backends.monitor import AgentSource, HostMonitor
    from gpumon.backends.sim import DRAFTER_GPUS

    state = Path(tempfile.mkdtemp(prefix="gpumon-soak-"))
    os.environ["XDG_STATE_HOME"] = str(state / "xdg")  # incident recordings land here
    hours, speed, interval = args.hours, args.speed, args.interval
    day = DemoDay(scenario, interval, args.scrape_every, hours, state)
    host = replace(resolve_host(Config(path=None), "demo"), interval=interval, kernel_log=False)
    if scenario == "training-oom":
        host = replace(host, jobs=(JobConfig("drafter", DRAFTER_GPUS, day.job_log),))
    else:
        host = replace(host, sglang=SglangConfig(PORTS, str(state / "sglang-*.log"), False))
    done, ready = asyncio.Event(), asyncio.Event()
    began = time.monotonic()
    apps: list[GpumonApp] = []  # the dashboard part's app, once made

    def on_round(now: float) -> None:
        elapsed = now - SOAK_T0
        app = apps[0] if apps else None
        if app is not None and elapsed % REDRAW_EVERY_S < interval:
            app.dashboard.refresh_dashboard()  # the DashboardScreen draws
        if elapsed % 3600.0 < interval and elapsed > 0:
            settle()
            row = {"hour": round(elapsed / 3600), "rss_mib": round(rss_mib(), 2)}
            row["wall_s"] = round(time.monotonic() - began, 1)
            print(json.dumps({**row, **census(monitor, app)}), flush=True)
        if now + interval > day.end:
            done.set()

    transport = soak_transport(host, day, speed, on_round, ready)
    monitor = HostMonitor(host, AgentSource(transport, reconnect=False), clock=day.clock)

    async def until_done() -> None:
        """Wait for the day's end, or fail with what ended the monitor's stream task
        first (an exception there, in the bench's callbacks too, would otherwise leave
        the loop idle forever: nothing reads the stream any more)."""
        stream = monitor._task
        assert stream is not None, "the monitor was not started"
        finished = asyncio.ensure_future(done.wait())
        await asyncio.wait({finished, stream}, return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            finished.cancel()
            error = stream.exception() if not stream.cancelled() else None
            raise RuntimeError(f"the monitor's stream ended early: {error!r}") from error

    async def run_monitor() -> None:
        monitor.start()
        ready.set()
        await until_done()
        await monitor.stop()

    async def run_dashboard() -> None:
        from gpumon.tui.app import GpumonApp

        app = GpumonApp([monitor], bell=False)
        apps.append(app)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            ready.set()
            await until_done()
            await pilot.pause()

    try:
        asyncio.run(run_monitor() if part == "monitor" else run_dashboard())
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(
        json.dumps(
            {"done": True, "samples": monitor.samples, "incidents": len(monitor.recorder.written)}
        ),
        flush=True,
    )
    return 0


# --- part local-tmux: the real `gpumon local` in tmux, real time --------------------------

TRACE_FRAMES = 6  # frames kept per allocation by the traced dashboard (--trace)
SHIM = Path(os.environ.get("GPUMON_NVML_SHIM", Path(__file__).parent / "nvml_shim"))


def _status_kib(pid: int, *keys: str) -> dict[str, int]:
    """``VmRSS``/``VmHWM``... of one process from /proc/PID/status, in KiB (0 when gone)."""
    out = dict.fromkeys(keys, 0)
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in out:
                out[key] = int(line.split()[1])
    return out


def _ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (0 when gone)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    return 0


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (the dashboard's agent and whatever it starts)."""
    found, frontier = [], [pid]
    while frontier:
        kids = []
        for p in frontier:
            for task in Path(f"/proc/{p}/task").glob("*"):
                with contextlib.suppress(OSError):
                    kids += [int(k) for k in (task / "children").read_text().split()]
        found += kids
        frontier = kids
    return found


def local_tmux(args: argparse.Namespace) -> int:
    """``gpumon local --interval N`` in tmux at 120x40 over the NVML shim for ``--minutes``
    of real time; every ``--sample-every`` s the dashboard's VmRSS and VmHWM and the RSS of
    its agent (its descendants). Prints one JSON line per sample, then the summary: start,
    after 10 min, end, max, least-squares slope over the whole run and after the first
    10 minutes."""
    gpumon = args.gpumon or str(Path(sys.executable).with_name("gpumon"))
    sleepers = [subprocess.Popen(["sleep", "1000000"]) for _ in range(8)]
    sock = f"gpumon-soak-{os.getpid()}"
    env = [
        "env",
        "-i",
        f"PATH={Path(gpumon).parent}:/usr/bin:/bin",
        f"HOME={os.environ.get('HOME', '/root')}",
        "LANG=C.UTF-8",
        "TERM=$TERM",  # tmux's own, expanded by the pane's shell
        f"PYTHONPATH={SHIM}",
        "NVML_SHIM_PIDS=" + ",".join(str(s.pid) for s in sleepers),
    ]
    gpumon_args = ["local", "--interval", f"{args.interval:g}"]
    if args.trace:  # the same dashboard, in bench_soak's own interpreter under tracemalloc
        Path(args.trace).mkdir(parents=True, exist_ok=True)
        every = f"{args.trace_every:g}"
        gpumon = f"{sys.executable} {Path(__file__).resolve()} --traced-gpumon {args.trace} {every}"
    cmd = " ".join([*env, gpumon, *gpumon_args])
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    rows: list[dict[str, Any]] = []
    out = open(args.out, "a", encoding="utf-8") if args.out else None  # noqa: SIM115
    try:
        subprocess.run(
            [*tmux, "new-session", "-d", "-x", "120", "-y", "40", "-s", "m", f"exec {cmd}"],
            check=True,
        )
        pid = int(
            subprocess.run(
                [*tmux, "display", "-p", "#{pane_pid}"], check=True, capture_output=True, text=True
            ).stdout
        )

        def screen() -> str:
            return subprocess.run(
                [*tmux, "capture-pane", "-p"], capture_output=True, text=True
            ).stdout

        rows = sample(pid, args, out, screen)
        if not rows or "error" in rows[-1]:
            return 1
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        for s in sleepers:
            s.kill()
            s.wait()
        if out:
            out.close()
    print(local_summary(rows), flush=True)
    if args.trace:
        print(trace_diff(Path(args.trace), since_s=args.warmup + 600), flush=True)
    return 0


def sample(
    pid: int, args: argparse.Namespace, out: Any, screen: Callable[[], str] | None
) -> list[dict[str, Any]]:
    """Every ``--sample-every`` s for ``--minutes`` after ``--warmup`` s: the VmRSS and
    VmHWM of ``pid``, the RSS of its descendants (its agent) and both CPUs, one JSON line
    each (also to ``out``); the first and last with the top of ``screen()``. A last row
    with ``error`` when ``pid`` exited early."""
    rows: list[dict[str, Any]] = []
    began, hz = time.monotonic(), os.sysconf("SC_CLK_TCK")
    time.sleep(args.warmup)  # start-up is not the steady state (the first sample is)
    last_ticks: tuple[float, int, int] | None = None
    n = 0
    end_s = args.warmup + args.minutes * 60
    while (elapsed := time.monotonic() - began) <= end_s + 1:
        if not Path(f"/proc/{pid}").exists():
            rows.append({"error": f"process {pid} exited at {elapsed:.0f} s"})
            print(json.dumps(rows[-1]))
            return rows
        agents = _descendants(pid)
        mine = _status_kib(pid, "VmRSS", "VmHWM")
        ticks = (_ticks(pid), sum(_ticks(a) for a in agents))
        row: dict[str, Any] = {
            "t_s": round(elapsed, 1),
            "rss_mib": round(mine["VmRSS"] / 1024, 2),
            "hwm_mib": round(mine["VmHWM"] / 1024, 2),
            "agent_rss_mib": round(sum(_status_kib(a, "VmRSS")["VmRSS"] for a in agents) / 1024, 2),
            "agents": len(agents),
        }
        if last_ticks is not None:  # CPU over the last sample window, % of one core
            dt = elapsed - last_ticks[0]
            row["cpu_pct"] = round(100 * (ticks[0] - last_ticks[1]) / hz / dt, 2)
            row["agent_cpu_pct"] = round(100 * (ticks[1] - last_ticks[2]) / hz / dt, 2)
        last_ticks = (elapsed, *ticks)
        rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
        if screen is not None and (n == 0 or end_s - elapsed < args.sample_every):
            print("\n".join(screen().splitlines()[:3]), flush=True)
        n += 1
        time.sleep(max(began + args.warmup + n * args.sample_every - time.monotonic(), 0))
    return rows


# --- part watch: the real `gpumon watch demo`, real time, the demo's clock sped up --------


def ssh_target(tmp: Path, sim: Any, stack: contextlib.ExitStack, churn: float) -> str:
    """A real sshd on 127.0.0.1 (``tests/support/sshd_server.py``) whose nvidia-smi is
    the simulator's at ``sim``; the config file that names it ``ct200``. ``churn`` > 0:
    every ``churn`` seconds the sshd processes serving the session are SIGKILLed (the
    link drops, gpumon connects again)."""
    import signal
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    from gpumon.backends.sim import write_wrapper

    from sshd_server import SshServer, serving_sshd

    server = SshServer(tmp / "sshd")
    server.setup()
    write_wrapper(server.bin, sim)
    server.start()
    stack.callback(server.kill)
    stop = threading.Event()
    stack.callback(stop.set)  # runs first: no kill while the server goes

    def drop_links() -> None:
        while not stop.wait(churn):
            for pid in serving_sshd(server):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    if churn > 0:
        threading.Thread(target=drop_links, name="churn", daemon=True).start()
    config = tmp / "config.toml"
    config.write_text(server.config_toml(python="python3"), encoding="utf-8")
    return str(config)


def watch_demo(args: argparse.Namespace) -> int:
    """``gpumon watch demo --demo-speed S --scenario X`` (issue 28: its RSS rose 52.9 ->
    56.0 MiB in 15 minutes) for ``--minutes`` of real time, sampled as local-tmux is: the
    same JSON lines and summary table. The state (outbox, incidents, recordings) goes to
    a temporary directory; no notifier is configured (the outbox keeps what it would
    send, with its own bound)."""
    gpumon = args.gpumon or str(Path(sys.executable).with_name("gpumon"))
    scenario = "training-oom" if args.scenario == "both" else args.scenario
    out = open(args.out, "a", encoding="utf-8") if args.out else None  # noqa: SIM115
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        env = {**os.environ, "XDG_STATE_HOME": f"{tmp}/state", "XDG_CONFIG_HOME": tmp}
        with socket.socket() as s:  # the exporter on, as in the field (nothing scrapes it)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        from gpumon.backends.monitor import demo_settings

        sim = demo_settings(scenario, speed=args.demo_speed)
        host = ["demo", "--scenario", scenario, "--demo-speed", f"{args.demo_speed:g}"]
        if args.target == "ssh":  # the test sshd, its nvidia-smi the simulator's, sped up
            host = ["ct200", "--config", ssh_target(Path(tmp), sim, stack, args.churn)]
            env["GPUMON_SSH_CONFIG"] = ""
        argv = [gpumon, "watch", *host, "--metrics-port", str(port)]
        print(f"== {' '.join(argv[1:])}: {args.minutes:g} min", flush=True)
        if args.trace:  # the same watch, in this script's interpreter under tracemalloc
            Path(args.trace).mkdir(parents=True, exist_ok=True)
            every = f"{args.trace_every:g}"
            argv[:1] = [sys.executable, str(Path(__file__).resolve()), "--traced-gpumon"]
            argv[3:3] = [args.trace, every]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            rows = sample(proc.pid, args, out, None)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if out:
                out.close()
    if not rows or "error" in rows[-1]:
        return 1
    print(local_summary(rows, "watch"), flush=True)
    if args.trace:
        print(trace_diff(Path(args.trace), since_s=args.warmup + 300), flush=True)
    return 0


def traced_gpumon(where: str, every: float, argv: list[str]) -> int:
    """``gpumon ARGV`` in this process under tracemalloc: every ``every`` seconds a
    snapshot (``snap-SECONDS.tracemalloc``) and the gc's live objects counted by type
    (``types-SECONDS.json``) land in ``where``, taken from a thread while the app runs."""
    import threading
    import tracemalloc
    from collections import Counter

    from gpumon.tui.cli import main as gpumon_main

    out = Path(where)
    tracemalloc.start(TRACE_FRAMES)
    began = time.monotonic()

    def probe() -> None:
        n = 0
        while True:
            n += 1
            time.sleep(max(began + n * every - time.monotonic(), 0))
            gc.collect()
            t = round(time.monotonic() - began)
            tracemalloc.take_snapshot().dump(str(out / f"snap-{t:05d}.tracemalloc"))
            types = Counter(
                type(o).__module__ + "." + type(o).__qualname__ for o in gc.get_objects()
            )
            (out / f"types-{t:05d}.json").write_text(json.dumps(types))

    threading.Thread(target=probe, name="soak probe", daemon=True).start()
    return gpumon_main(argv)


def trace_diff(where: Path, since_s: float, top: int = 15) -> str:
    """What grew between the snapshot nearest ``since_s`` and the last: tracemalloc by
    allocating line (this project's frames first) and gc object counts by type."""
    import tracemalloc

    snaps = sorted(where.glob("snap-*.tracemalloc"))
    if len(snaps) < 2:
        return f"trace: fewer than two snapshots in {where}"
    first = min(snaps[:-1], key=lambda p: abs(int(p.stem.split("-")[1]) - since_s))
    last = snaps[-1]
    keep = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<*")]
    a = tracemalloc.Snapshot.load(str(first)).filter_traces(keep)
    b = tracemalloc.Snapshot.load(str(last)).filter_traces(keep)
    t0, t1 = (int(p.stem.split("-")[1]) for p in (first, last))
    total = sum(s.size for s in b.statistics("filename")) - sum(
        s.size for s in a.statistics("filename")
    )
    lines = [f"traced heap {t0} s -> {t1} s: {total / 2**20:+.2f} MiB; top lines:"]
    for stat in b.compare_to(a, "lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(
            f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  "
            f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        )
    lines.append("by traceback, grouped from the allocating frame up (the top 5):")
    for stat in b.compare_to(a, "traceback")[:5]:
        lines.append(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        for frame in reversed(stat.traceback):  # stored oldest first
            lines.append(f"      {frame.filename.split('site-packages/')[-1]}:{frame.lineno}")
    lines.append("by the project's innermost frame (what here asked for it; the top lines):")
    for size, where_from in _by_project_frame(b.compare_to(a, "traceback"))[:top]:
        lines.append(f"  {size / 1024:+9.1f} KiB  {where_from}")
    lines.append(
        "traced heap at each snapshot, MiB (growth that stops: something filling to its bound): "
        + " ".join(
            f"{int(p.stem.split('-')[1])}s={_traced_total(p, keep) / 2**20:.2f}" for p in snaps
        )
    )
    ta = json.loads((where / f"types-{t0:05d}.json").read_text())
    tb = json.loads((where / f"types-{t1:05d}.json").read_text())
    grown = sorted(((tb.get(k, 0) - ta.get(k, 0), k) for k in {*ta, *tb}), reverse=True)
    lines.append("gc objects by type, change: " + ", ".join(f"{k} {d:+d}" for d, k in grown[:top]))
    return "\n".join(lines)


def _by_project_frame(stats: list[Any]) -> list[tuple[int, str]]:
    """Size changes summed by the innermost (most recent) frame in this project's files,
    else the allocating frame, biggest change first."""
    root = str(Path(__file__).resolve().parent.parent) + "/"
    sums: dict[str, int] = {}
    for stat in stats:
        ours = [
            f
            for f in stat.traceback
            if f.filename.startswith(root) and "-packages/" not in f.filename
        ]
        frame = ours[-1] if ours else stat.traceback[-1]  # frames run oldest first
        key = f"{frame.filename.removeprefix(root).split('site-packages/')[-1]}:{frame.lineno}"
        sums[key] = sums.get(key, 0) + stat.size_diff
    return sorted(((v, k) for k, v in sums.items()), key=lambda kv: -abs(kv[0]))


def _traced_total(path: Path, keep: list[Any]) -> int:
    import tracemalloc

    snap = tracemalloc.Snapshot.load(str(path)).filter_traces(keep)
    return sum(s.size for s in snap.statistics("filename"))


def local_summary(rows: list[dict[str, Any]], name: str = "dashboard") -> str:
    """The table of a local-tmux (or watch) run: RSS at start, 10 min, end, max; slopes
    in MiB/h. ``name``: what the sampled process is."""

    t0 = rows[0]["t_s"]  # the first sample, after the warm-up

    def at(minute: float) -> dict[str, Any]:
        return min(rows, key=lambda r: abs(r["t_s"] - t0 - minute * 60))

    def per_hour(key: str, since_s: float) -> str:
        pts = [(r["t_s"] / 3600, r[key]) for r in rows if r["t_s"] - t0 >= since_s]
        return f"{slope(pts):+.3f}" if len(pts) >= 3 else "n/a"

    end = (rows[-1]["t_s"] - t0) / 60
    lines = [
        f"| {'':<16} | start | 10 min | end ({end:.0f} min) | max | slope all MiB/h "
        "| slope after 10 min MiB/h |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("rss_mib", f"{name} VmRSS"),
        ("hwm_mib", f"{name} VmHWM"),
        ("agent_rss_mib", "agent RSS"),
    ):
        top = max(r[key] for r in rows)
        lines.append(
            f"| {label:<16} | {rows[0][key]:.1f} | {at(10)[key]:.1f} | {rows[-1][key]:.1f} "
            f"| {top:.1f} | {per_hour(key, 0)} | {per_hour(key, 600)} |"
        )
    cpu = [r["cpu_pct"] for r in rows if "cpu_pct" in r]
    agent = [r["agent_cpu_pct"] for r in rows if "agent_cpu_pct" in r]
    if cpu:
        lines.append(
            f"CPU, % of one core, mean over the run: {name} {sum(cpu) / len(cpu):.2f}, "
            f"agent {sum(agent) / len(agent):.2f}"
        )
    return "\n".join(lines)


# --- the driver ----------------------------------------------------------------------------


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def verdict(hours: list[dict[str, Any]]) -> tuple[bool, str]:
    """Flat: no later hour above hour 1 by more than max(3 MiB, 5 %), and RSS no longer
    rising over the second half of the run (slope < 0.05 MiB/h, i.e. < 1.2 MiB a day)."""
    base = next((h for h in hours if h["hour"] == 1), None)
    later = [h for h in hours if h["hour"] >= 1]
    if base is None or len(later) < 4:
        return False, "too few hours to judge (run --hours 4 or more)"
    top = max(h["rss_mib"] for h in later)
    rise, allowed = top - base["rss_mib"], max(3.0, 0.05 * base["rss_mib"])
    half = later[len(later) // 2 :]
    late = slope([(h["hour"], h["rss_mib"]) for h in half])
    blocks = [h["heap_blocks"] for h in half]
    flat = rise <= allowed and late < 0.05
    return flat, (
        f"RSS hour 1 {base['rss_mib']:.1f} MiB, max {top:.1f} (+{rise:.2f}, allowed "
        f"{allowed:.1f}), second half {late:+.3f} MiB/h; live heap blocks "
        f"{base['heap_blocks']} at hour 1, {min(blocks)}..{max(blocks)} in the second half: "
        f"{'FLAT' if flat else 'GROWS'}"
    )


def run_child(args: argparse.Namespace, scenario: str, part: str) -> list[str]:
    """Run one (scenario, part) in a fresh process; its report as printable lines."""
    cmd = [sys.executable, __file__, "--child", scenario, part]
    for name in ("hours", "speed", "interval", "scrape_every"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - began
    out = [f"== {scenario}, {part}: {args.hours:g} simulated hours, interval {args.interval:g} s"]
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    hours = [r for r in rows if "hour" in r]
    if proc.returncode != 0:
        return [*out, proc.stdout[-2000:], proc.stderr[-4000:], "FAILED"]
    out.append(f"  {'hour':>4} {'RSS MiB':>8} {'wall s':>7}  buffers (entries)")
    for h in hours:
        buffers = " ".join(
            f"{k}={v}" for k, v in h.items() if k not in {"hour", "rss_mib", "wall_s"}
        )
        out.append(f"  {h['hour']:>4} {h['rss_mib']:>8.1f} {h['wall_s']:>7.1f}  {buffers}")
    flat, text = verdict(hours)
    speed = args.hours * 3600 / wall
    out.append(f"  {text}; {wall:.0f} s wall ({speed:.0f}x)")
    return [*out, "" if flat else "GROWS"]


def drive(args: argparse.Namespace) -> int:
    scenarios = ["training-oom", "sglang"] if args.scenario == "both" else [args.scenario]
    parts = ["monitor", "dashboard"] if args.part == "both" else [args.part]
    runs = [(s, p) for s in scenarios for p in parts]
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        reports = pool.map(lambda run: run_child(args, *run), runs)
        ok = True
        for lines in reports:  # in order, each as soon as it and those before it are done
            print("\n".join(lines[:-1]), flush=True)
            ok &= lines[-1] == ""
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--traced-gpumon"]:  # the dashboard of local-tmux --trace
        return traced_gpumon(argv[1], float(argv[2]), argv[3:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    numbers = (
        ("--hours", 24.0, "simulated hours"),
        ("--speed", 0.0, "at most this many simulated seconds per second (0: no cap)"),
        ("--interval", 1.0, "sampling interval, seconds"),
        ("--scrape-every", 10.0, "simulated seconds between SGLang scrapes (agent: interval)"),
    )
    for flag, default, text in numbers:
        p.add_argument(flag, type=float, default=default, help=f"{text} (default {default:g})")
    p.add_argument("--scenario", choices=["both", "training-oom", "sglang"], default="both")
    parts = ["both", "monitor", "dashboard", "local-tmux", "watch"]
    p.add_argument("--part", choices=parts, default="both")
    p.add_argument("--demo-speed", type=float, default=10.0, help="watch: the demo's clock")
    p.add_argument("--target", choices=["demo", "ssh"], default="demo", help="watch: the host")
    p.add_argument("--churn", type=float, default=0.0, help="watch, ssh: drop the link every S s")
    p.add_argument("--minutes", type=float, default=60.0, help="local-tmux: real minutes")
    p.add_argument("--sample-every", type=float, default=30.0, help="local-tmux: seconds")
    p.add_argument("--warmup", type=float, default=10.0, help="local-tmux: seconds before")
    p.add_argument("--gpumon", help="local-tmux: the gpumon command (default: beside python)")
    p.add_argument("--out", help="local-tmux: also append each sample to this JSONL file")
    p.add_argument("--trace", help="local-tmux: tracemalloc the dashboard, snapshots in DIR")
    p.add_argument("--trace-every", type=float, default=300.0, help="local-tmux: seconds")
    p.add_argument("--jobs", type=int, default=2, help="processes at once (default 2)")
    p.add_argument("--child", nargs=2, metavar=("SCENARIO", "PART"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return soak_one(args.child[0], args.child[1], args)
    if args.part == "local-tmux":
        return local_tmux(args)
    if args.part == "watch":
        return watch_demo(args)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
