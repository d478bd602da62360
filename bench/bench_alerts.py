"""Cost of the alert path: LogScanner throughput, AlertEngine.on_sample, recorder writes.

The agent must keep up with a job log growing at 50,000 lines/s, so the scanner has to
scan well over that on realistic mixed lines (training progress, SGLang decode/prefill
stats, uvicorn access lines, pip output, with a traceback now and then). on_sample runs
once per sample for 8 GPUs and should cost well under 0.5 ms.

    python bench/bench_alerts.py [--lines N] [--samples N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample, Source
from gpumon.backends.parsers import LogScanner
from gpumon.backends.recording import FlightRecorder

TOTAL = 97887

ORDINARY = [
    "[2026-11-29 14:32:{s:02d}] step {n}/5000 | loss 2.31{n:02d} | lr 2.0e-04 | 12.8 Ktok/s "
    "| tokens 8.83M",
    "2026-11-29 14:33:{s:02d},882 INFO train_drafter: step {n}/20000 loss=2.3511 acc@1=0.609 "
    "lr=1.96e-04 tok/s=41907",
    "[2026-08-25 14:21:{s:02d} TP0] Decode batch, #running-req: 64, #token: 263428, token usage: "
    "0.76, cuda graph: True, gen throughput (token/s): 1132.58, #queue-req: 0",
    "[2026-08-25 14:21:{s:02d} TP0] Prefill batch, #new-seq: 1, #new-token: 1843, #cached-token: "
    "2048, token usage: 0.77, #running-req: 64, #queue-req: 0, #pending-token: 0, cuda graph: "
    "True, input throughput (token/s): 812.33",
    '[2026-08-25 14:21:{s:02d}] INFO:     10.0.4.23:40204 - "POST /v1/chat/completions HTTP/1.1" '
    "200 OK",
    "[rank{r}]: step {n} loss 2.4{n:02d} grad_norm 0.83 memory 88.1 GiB",
    "[2026-08-25 13:01:{s:02d}] Load weight end. elapsed=9.84 s, type=Qwen3ForCausalLM, avail "
    "mem=63.14 GB, mem usage=15.27 GB.",  # holds "mem" but not a keyword: the slow-ish path
    "Requirement already satisfied: torch==2.7.1 in /opt/venvs/train/lib/python3.12/site-packages",
    "Epoch 3:  42%|████▏     | 4200/10000 [12:01<16:36,  5.82it/s, loss=2.31, v_num=7]",
    "[2026-08-25 14:21:{s:02d}] GPU memory usage is 93% of the pool",  # "emory": detailed check
]
CRASH = [
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 418, in <module>',
    "    main()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 94.97 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this "
    "process has 93.70 GiB memory in use.",
]


def mixed_lines(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        if rng.random() < 0.0005:
            out += CRASH
            continue
        template = rng.choice(ORDINARY)
        out.append(template.format(s=rng.randrange(60), n=rng.randrange(5000), r=rng.randrange(8)))
    return out[:count]


def bench_scanner(count: int) -> None:
    lines = mixed_lines(count)
    runs = []
    events = 0
    for _ in range(5):
        scanner = LogScanner("0,1,2,3,4,5,6,7")
        start = time.perf_counter()
        events = len(scanner.scan(lines)) + len(scanner.flush())
        runs.append(time.perf_counter() - start)
    best = min(runs)
    print(
        f"LogScanner: {count / best:,.0f} lines/s on mixed lines (best of 5; median "
        f"{count / statistics.median(runs):,.0f}); {events} events in {count:,} lines; "
        f"{best / count * 1e6:.2f} us/line; 50k lines/s uses {50_000 * best / count:.1%} of a core"
    )
    plain = [
        f"[2026-11-29 14:32:{k % 60:02d}] step {k}/5000 | loss 2.3100 | 12.8 Ktok/s"
        for k in range(count)
    ]
    scanner = LogScanner()
    start = time.perf_counter()
    scanner.scan(plain)
    took = time.perf_counter() - start
    print(f"LogScanner: {count / took:,.0f} lines/s on plain progress lines")


def gpu(index: int, used: int) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index:08x}",
        memory_total_mib=TOTAL,
        memory_reserved_mib=637,
        memory_used_mib=used,
        memory_free_mib=TOTAL - 637 - used,
        utilization_pct=97.0,
        power_w=590.1,
        temperature_c=76.0,
    )


def samples(count: int) -> list[HostSample]:
    rng = random.Random(2)
    procs = tuple(GpuProcess(1000 + i, "python3", 80000, f"GPU-{i:08x}") for i in range(8))
    out = []
    for k in range(count):
        gpus = []
        for i in range(8):
            base = 84500 if i != 6 else 81000 + 60 * (k % 250)  # GPU 6 keeps ramping
            gpus.append(gpu(i, base + rng.randint(-12, 12)))
        out.append(HostSample("ct200", 1e9 + k, Source.AGENT_NVML, tuple(gpus), procs))
    return out


def bench_on_sample(count: int) -> None:
    series = samples(count)
    engine = AlertEngine("ct200", AlertRules(), clock=lambda: 1e9)
    per = []
    for s in series:
        start = time.perf_counter()
        engine.on_sample(s)
        per.append(time.perf_counter() - start)
    per.sort()
    print(
        f"AlertEngine.on_sample, 8 GPUs: median {statistics.median(per) * 1e3:.3f} ms, "
        f"p99 {per[int(len(per) * 0.99)] * 1e3:.3f} ms, max {per[-1] * 1e3:.3f} ms "
        f"({count} samples, ttf fit on every GPU)"
    )


def bench_recorder() -> None:
    series = samples(1800)
    recorder = FlightRecorder("ct200", clock=lambda: series[-1].time)
    start = time.perf_counter()
    for s in series:
        recorder.record(s)
    per_record = (time.perf_counter() - start) / len(series)
    with tempfile.TemporaryDirectory() as tmp:
        recorder.directory = Path(tmp)
        t = series[-1].time - 60
        recorder.on_alert(Alert("k", Health.CRITICAL, "cuda_oom", "ct200", 6, None, "m", t, t))
        path = recorder.flush_now()
        assert path is not None and recorder.last_write_s is not None
        size = path.stat().st_size
    print(
        f"FlightRecorder: record() {per_record * 1e6:.0f} us/sample; 30 min of 8 GPUs holds "
        f"{recorder.memory_bytes() / 1e6:.1f} MB; writing the 11-minute window "
        f"(661 samples) took {recorder.last_write_s * 1e3:.1f} ms -> {size / 1e3:.0f} kB gzip"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    bench_scanner(args.lines)
    bench_on_sample(args.samples)
    bench_recorder()


if __name__ == "__main__":
    main()
