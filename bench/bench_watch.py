"""Cost and speed of ``gpumon watch`` (issue 13).

1. alert raised -> notifier request received, with a live receiver on 127.0.0.1
   (target <= 1 s, median and p95): an alert is raised on a monitor the hub watches and
   the clock runs until the webhook request arrives;
2. outbox throughput: events queued, delivered and marked (SQLite, one host: grouped into
   few messages; many hosts: one message each);
3. ``gpumon watch demo`` CPU and RSS over ``--seconds`` (default 600) next to
   ``gpumon demo`` in tmux (the dashboard) over the same time (target: below it);
4. exporter scrape time for 8 GPUs + 8 SGLang servers (the demo's sglang scenario).

    python bench/bench_watch.py [--seconds 600] [--skip-soak]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))


from gpumon.backends.config import Config, resolve_host
from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import SETTLE_SAMPLES, NotifyHub
from gpumon.backends.notify.outbox import Outbox
from gpumon.backends.runtime import Runtime

from prometheus import free_port
from receiver import Receiver
from sim_samples import sim_printers, sim_sample

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
# The dashboard bench's CPU accounting and tmux session (bench/ is this script's folder).
_dashboard: Any = importlib.import_module("bench_dashboard")
CLK_TCK, Session, cpu_ticks = _dashboard.CLK_TCK, _dashboard.Session, _dashboard.cpu_ticks


def spread(name: str, values_ms: list[float], target_ms: float | None = None) -> None:
    values = sorted(values_ms)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    med = statistics.median(values)
    verdict = ""
    if target_ms is not None:
        verdict = f"  (target <= {target_ms:g} ms: {'ok' if p95 <= target_ms else 'OVER'})"
    print(
        f"  {name}: median {med:.1f} ms, p95 {p95:.1f} ms, max {values[-1]:.1f} ms"
        f" over {len(values)}{verdict}"
    )


async def latency(rounds: int, tmp: Path) -> None:
    print("\n1. alert raised -> webhook request received (live receiver on 127.0.0.1)")
    with Receiver() as rx:
        hook = NotifierConfig(
            name="hook", kind="webhook", url=rx.url("/hook"), group_s=0, max_per_minute=10_000
        )
        hub = NotifyHub(
            NotifySettings(notifiers={"hook": hook}, min_open_s=0, resolve_after_s=0),
            Outbox(tmp / "latency.sqlite3"),
        )
        settings = demo_settings(demo_time=10, frozen=True)
        monitor = make_monitor(resolve_host(Config(path=None), "demo"), settings, record=False)
        printers = sim_printers(settings)
        for i in range(SETTLE_SAMPLES):
            monitor.ingest_sample(sim_sample(printers, settings, 10.0 + i))
        hub.attach(monitor)
        await hub.start()
        out = []
        for i in range(rounds):
            before = len(rx.received())
            t0 = time.time()
            monitor.ingest_alert(
                "xid",
                Health.CRITICAL,
                f"Xid 79 #{i}",
                gpu=i % 8,
                job=None,
                key=f"xid:bench:{i}",
                at=t0,
            )
            while len(rx.received()) == before:
                await asyncio.sleep(0.001)
            out.append((rx.received()[-1].at - t0) * 1000)
            monitor.alerts.clear(f"xid:bench:{i}")
            await asyncio.sleep(0.05)
        await hub.close()
        hub.outbox.close()
    spread("raised -> received", out, 1000)


async def throughput(events: int, tmp: Path) -> None:
    print("\n2. outbox throughput (receiver live)")
    box = Outbox(tmp / "bench.sqlite3")
    ev = IncidentEvent(
        "open",
        "h/gpu0/-/xid",
        "h",
        0,
        None,
        "xid",
        Health.CRITICAL,
        "bench",
        None,
        None,
        0.0,
        0.0,
        None,
    )
    t0 = time.perf_counter()
    ids = [box.add("n", ev, 0.0, 0.0) for _ in range(events)]
    add = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in ids:
        box.mark_sent("n", [i], 1.0)
    mark = time.perf_counter() - t0
    print(f"  SQLite: {events / add:,.0f} rows queued/s, {events / mark:,.0f} rows marked sent/s")
    box.close()
    for hosts in (1, events // 4):
        with Receiver() as rx:
            hook = NotifierConfig(
                name="hook", kind="webhook", url=rx.url("/hook"), group_s=0, max_per_minute=100_000
            )
            hub = NotifyHub(
                NotifySettings(notifiers={"hook": hook}, min_open_s=0, resolve_after_s=0),
                Outbox(tmp / f"tp{hosts}.sqlite3"),
            )
            n = events // 4
            batch = [
                ev.with_event("open", 0.0, host=f"h{i % hosts}", key=f"h{i % hosts}/gpu{i}/-/x")
                for i in range(n)
            ]
            t0 = time.perf_counter()
            hub.publish(batch)
            await hub.start()
            while hub.outbox.pending("hook"):
                await asyncio.sleep(0.01)
            wall = time.perf_counter() - t0
            await hub.close()
            hub.outbox.close()
            got = sum(len(r.json()["events"]) for r in rx.received())
            assert got == n, (got, n)
            print(
                f"  {n} events over {hosts} host(s): {len(rx.received())} messages in "
                f"{wall:.2f} s = {n / wall:,.0f} events/s, {len(rx.received()) / wall:,.0f} "
                "messages/s"
            )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def soak(seconds: float, tmp: Path) -> None:
    print(f"\n3. CPU and RSS over {seconds:.0f} s, demo at speed 1 (OOM at 60 s), 1 Hz")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "wstate"), "XDG_CONFIG_HOME": str(tmp)}
    watch = subprocess.Popen(
        [*GPUMON, "watch", "demo", "--metrics-port", str(free_port())],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    dash = Session(tmp) if shutil.which("tmux") else None
    try:
        if dash is not None:
            dash.start(120, 40)
        time.sleep(3)  # past start-up
        pids = {"gpumon watch demo": watch.pid}
        if dash is not None:
            pids["gpumon demo (tmux 120x40)"] = dash.pid()
        start = {name: cpu_ticks(pid) for name, pid in pids.items()}
        rss: dict[str, list[int]] = {name: [] for name in pids}
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            time.sleep(min(10.0, seconds))
            for name, pid in pids.items():
                rss[name].append(rss_kib(pid))
        wall = time.monotonic() - t0
        end = {name: cpu_ticks(pid) for name, pid in pids.items()}
    finally:
        watch.terminate()
        watch.wait(timeout=30)
        if dash is not None:
            dash.kill()
    for name in pids:
        own = (end[name][0] - start[name][0]) / CLK_TCK / wall * 100
        kids = (end[name][1] - start[name][1]) / CLK_TCK / wall * 100
        r = rss[name]
        print(
            f"  {name:28s} CPU {own:5.2f} % (+ agent/simulator {kids:5.2f} %) of one core; "
            f"RSS first {r[0] / 1024:.1f} MiB, last {r[-1] / 1024:.1f} MiB, "
            f"max {max(r) / 1024:.1f} MiB"
        )


async def scrape(rounds: int, tmp: Path) -> None:
    print("\n4. exporter scrape, 8 GPUs + 8 SGLang servers (demo sglang scenario)")
    host = resolve_host(Config(path=None), "demo")
    service = Runtime.for_watch(
        [host],
        NotifySettings(metrics_port=free_port()),
        sim=demo_settings("sglang"),
        outbox=tmp / "scrape.sqlite3",
    )
    assert service.metrics is not None
    await service.start()
    try:
        monitor = service.named("demo")
        deadline = time.monotonic() + 60
        while len([s for s in monitor.workloads.sglang.values() if s.running is not None]) < 8:
            assert time.monotonic() < deadline, "the 8 servers did not answer"
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # a few rounds of everything
        url = f"http://127.0.0.1:{service.metrics.port}/metrics"

        def get() -> tuple[float, str]:
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read().decode()
            return (time.perf_counter() - t0) * 1000, body

        times = []
        body = ""
        for _ in range(rounds):
            ms, body = await asyncio.to_thread(get)
            times.append(ms)
        series = [x for x in body.splitlines() if x.startswith("gpumon_")]
        gpus = {x.split('gpu="')[1].split('"')[0] for x in series if x.startswith("gpumon_gpu_")}
        servers = {
            x.split('port="')[1].split('"')[0] for x in series if x.startswith("gpumon_sglang_")
        }
        print(
            f"  {len(series)} series: {len(gpus)} GPUs, {len(servers)} SGLang servers, "
            f"{len(body) / 1024:.1f} KiB"
        )
        spread("GET /metrics", times)
    finally:
        await service.stop()


async def async_parts(args: argparse.Namespace, tmp: Path) -> None:
    await latency(args.rounds, tmp)
    await throughput(args.events, tmp)
    await scrape(args.rounds, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="CPU/RSS window")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--skip-soak", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        asyncio.run(async_parts(args, tmp))
        if not args.skip_soak:
            soak(args.seconds, tmp)


if __name__ == "__main__":
    main()
