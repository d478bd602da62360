"""The simulated drafter training job: ``python -m gpumon.backends.sim.job --log PATH``.

Appends one progress line per second of scenario time to ``--log``::

    [2026-11-29 14:32:08] step 690/5000 | loss 2.3100 | lr 2.0e-04 | 12.8 Ktok/s | tokens 8.83M

In ``training-oom`` run 0 dies at ``OOM_AT``: it writes a ``CUDA_VISIBLE_DEVICES`` line and a
PyTorch CUDA OOM traceback naming ``GPU 1`` (the process-local ordinal of physical GPU 6),
then exits 1. In ``stall`` run 0 writes its last step at ``STALL_AT``, then at
``STALL_TIMEOUT_AT`` rank 1's NCCL watchdog line (an ALLREDUCE that timed out after
``STALL_TIMEOUT_S``) and its ranks' flight-recorder dumps (``write_dumps``), then nothing:
its ranks hang until stopped. In ``slow`` run 0 trains
at ``SLOW_TOKENS_PER_S`` (a step every 2.8 s) and never ends. A job started after a
restart recorded in the state dir is that restarted run: it resumes from the checkpoint
and never OOMs (nor stalls). The log is a function of scenario time only: a job started
late first writes the lines it missed, then keeps pace with the clock. Settings come from
``GPUMON_SIM_*``; SIGTERM ends it at once (default action).
``--restarted`` first records a restart at the scenario time now (``state.record_restart``),
so this job is the restarted run and the simulated GPUs refill; it ends when the state dir
is removed (the demo that started it is gone, even if it was killed).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from gpumon.backends.parsers.flight_recorder import read_dump
from gpumon.backends.sim.scenario import (
    DRAFTER_GPUS,
    JUPYTER_MIB,
    MEMORY_USABLE_MIB,
    OOM_AT,
    OOM_GPU,
    SLOW_TOKENS_PER_S,
    STALL_AT,
    STALL_TIMEOUT_AT,
    STALL_TIMEOUT_S,
    TRAINING_SCENARIOS,
    DrafterRun,
    SimSettings,
    drafter_run,
    held,
    oom_gpu_memory,
    scenario_time,
    wall_time,
)
from gpumon.backends.sim.state import record_restart, record_stop, with_state

TOTAL_STEPS = 5000
STEP_AT_T0 = 650  # run 0 resumed from this checkpoint at scenario time 0
TOKENS_PER_STEP = 12800  # one step per second: about 12.8 Ktok/s
SCRIPT = "/root/drafter/train_drafter.py"
SITE = "/root/venv/lib/python3.12/site-packages"
VISIBLE = ",".join(str(g) for g in DRAFTER_GPUS)
LOCAL_OOM_GPU = DRAFTER_GPUS.index(OOM_GPU)  # "GPU 1" in torch's message is physical GPU 6
# The all-reduce the stall scenario's ranks hang in, and its inputs: the flight-recorder
# dumps its ranks write (write_dumps) are PyTorch's own, from a real job that hung there.
STALL_SEQ = 17
STALL_NUMEL = 65536
DUMPS = Path(__file__).resolve().parent / "data" / "flight-recorder"
HOLD_POLL_S = 0.05  # a held clock's release is seen this soon (its other parts read it at once)

_TRACEBACK = f"""Traceback (most recent call last):
  File "{SCRIPT}", line 418, in <module>
    main()
  File "{SCRIPT}", line 391, in main
    loss = train_step(model, batch, optimizer, scaler)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SCRIPT}", line 233, in train_step
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], \
labels=batch["labels"])
          {"^" * 99}
  File "{SITE}/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/torch/nn/modules/module.py", line 1762, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/utils/generic.py", line 943, in wrapper
    output = func(self, *args, **kwargs)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/transformers/models/llama/modeling_llama.py", line 470, in forward
    loss = self.loss_function(logits=logits, labels=labels, \
vocab_size=self.config.vocab_size, **kwargs)
           {"^" * 93}
  File "{SITE}/transformers/loss/loss_utils.py", line 55, in ForCausalLMLoss
    logits = logits.float()
             ^^^^^^^^^^^^^^
"""


def format_size(mib: float) -> str:
    """PyTorch's ``format_size`` (``%.2f`` MiB up to 1 GiB, else GiB) for a size in MiB."""
    return f"{mib:.2f} MiB" if mib <= 1024 else f"{mib / 1024:.2f} GiB"


def oom_message() -> str:
    """The ``torch.OutOfMemoryError`` line, its numbers taken from GPU 6 at the OOM."""
    used = oom_gpu_memory(OOM_AT)
    # PyTorch counts this process's own memory: the GPU's use less CT 201's jupyter (on
    # GPU 6 at the OOM: the story's cause) and the CUDA context. The line said the whole
    # GPU's, so a restart's need read from it was more than the GPU holds, and the free-GPU
    # wait passed beside the jupyter as if it were not the jupyter's to free.
    process = used - JUPYTER_MIB - 20
    reserved = process - 760  # context and non-PyTorch allocations
    unallocated = 3.05 * 1024
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        f"GPU {LOCAL_OOM_GPU} has a total capacity of {format_size(MEMORY_USABLE_MIB)} of "
        f"which {format_size(MEMORY_USABLE_MIB - used)} is free. Including non-PyTorch memory, "
        f"this process has {format_size(process)} memory in use. Of the allocated memory "
        f"{format_size(reserved - unallocated)} is allocated by PyTorch, and "
        f"{format_size(unallocated)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        " to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _stamp(settings: SimSettings, t: float) -> str:
    return time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(wall_time(settings, t)))


def progress_line(
    settings: SimSettings, t: float, step: int, tokens_per_s: float = TOKENS_PER_STEP
) -> str:
    """The log line for ``step``, written at scenario time ``t`` (deterministic)."""
    rng = random.Random(f"{settings.seed}:job:{step}")
    loss = 1.9 + 1.3 * math.exp(-step / 600) + rng.uniform(-0.01, 0.01)
    rate = tokens_per_s / 1000 + rng.uniform(-0.3, 0.3) * tokens_per_s / TOKENS_PER_STEP
    tokens = step * TOKENS_PER_STEP / 1e6
    return (
        f"{_stamp(settings, t)} step {step}/{TOTAL_STEPS} | loss {loss:.4f} | lr 2.0e-04 | "
        f"{rate:.1f} Ktok/s | tokens {tokens:.2f}M"
    )


def watchdog_line(settings: SimSettings, rank: int) -> str:
    """PyTorch's NCCL watchdog line (2.4+ spelling, its ``[rankN]:`` prefix) for ``rank``
    of the stall scenario's all-reduce."""
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(wall_time(settings, STALL_TIMEOUT_AT)))
    ms = round(STALL_TIMEOUT_S * 1000)
    return (
        f"[rank{rank}]:[E{stamp}.426415540 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum={STALL_SEQ}, OpType=ALLREDUCE, "
        f"NumelIn={STALL_NUMEL}, NumelOut={STALL_NUMEL}, Timeout(ms)={ms}) ran for {ms + 81} "
        "milliseconds before timing out."
    )


def log_events(settings: SimSettings, name: str, run: DrafterRun) -> Iterator[tuple[float, str]]:
    """(scenario time, text) of every log write of ``run``, in order; run 0's ends at the OOM
    (training-oom) or at its NCCL watchdog line (stall)."""
    # run 0 never reaches the next checkpoint, so every restart resumes from the same one
    start, step = (0.0 if run.number == 0 else run.start), STEP_AT_T0
    yield (
        start,
        (
            f"{_stamp(settings, start)} {name}: run {run.number} resumed from checkpoint step "
            f"{step}, world size {len(DRAFTER_GPUS)}"
        ),
    )
    k = 1
    if run.number == 0 and settings.scenario == "stall":
        while k <= STALL_AT:
            yield k, progress_line(settings, k, step + k)
            k += 1
        yield STALL_TIMEOUT_AT, watchdog_line(settings, LOCAL_OOM_GPU)
        return
    if run.number == 0 and settings.scenario == "slow":  # one step per TOKENS_PER_STEP tokens
        every = TOKENS_PER_STEP / SLOW_TOKENS_PER_S
        while True:
            yield k * every, progress_line(settings, k * every, step + k, SLOW_TOKENS_PER_S)
            k += 1
    while run.number > 0 or start + k < OOM_AT:
        yield start + k, progress_line(settings, start + k, step + k)
        k += 1
    yield OOM_AT, f"{name} ranks: CUDA_VISIBLE_DEVICES={VISIBLE}\n{_TRACEBACK}{oom_message()}"


def missed_bytes(settings: SimSettings, name: str, now: float) -> int:
    """How many bytes of log a job started at scenario time ``now`` writes at once (the
    lines it missed: ``run_job``'s writes due by then)."""
    settings = with_state(settings)
    run = drafter_run(settings, now) or DrafterRun(0, -math.inf)
    due = itertools.takewhile(lambda event: event[0] <= now, log_events(settings, name, run))
    return sum(len(text.encode()) + 1 for _, text in due)


def _wait_until(settings: SimSettings, t: float) -> None:
    """Sleep until scenario time ``t``; with a frozen clock that never comes, sleep forever.
    While the clock is held, ``t``'s wall time is not known yet: its hold file is looked
    for every ``HOLD_POLL_S``."""
    if settings.frozen_at is not None:
        while t > settings.frozen_at:
            time.sleep(3600)
        return
    delay = wall_time(settings, t) - time.time()
    while delay > 0:
        time.sleep(min(delay, HOLD_POLL_S) if held(settings) else delay)
        delay = wall_time(settings, t) - time.time()


def run_job(settings: SimSettings, log: Path, name: str, *, restarted: bool = False) -> int:
    """Write the log of the run alive now; returns 1 after an OOM. A restarted run writes
    forever, unless (``restarted``) its simulator's state dir is removed: the demo that
    started it has ended, so it ends too (returns 0)."""
    settings = with_state(settings)
    now = scenario_time(settings, time.time())
    run = drafter_run(settings, now) or DrafterRun(0, -math.inf)  # dead: replay run 0
    with log.open("a", encoding="utf-8") as f:
        for t, text in log_events(settings, name, run):
            _wait_until(settings, t)
            f.write(text + "\n")
            f.flush()
            if t >= OOM_AT and run.number == 0 and settings.scenario == "training-oom":
                return 1
            if t >= STALL_TIMEOUT_AT and run.number == 0 and settings.scenario == "stall":
                write_dumps(os.environ.get("TORCH_FR_DUMP_TEMP_FILE"))
            if restarted and settings.state_dir and not Path(settings.state_dir).is_dir():
                return 0
    if settings.scenario == "stall" and run.number == 0:
        _hang(settings)
    return 0  # pragma: no cover - restarted runs write forever


def write_dumps(prefix: str | None) -> list[Path]:
    """The stall's flight-recorder dumps, as PyTorch writes them on the watchdog's timeout
    (``TORCH_NCCL_DUMP_ON_TIMEOUT``): ``PREFIX<rank>`` for each rank. They are ranks 0-2 of a
    real capture (torch 2.13.0, tests/fixtures/upstream/flight-recorder/): rank 2 never
    entered all-reduce #17. Nothing without a prefix (the job's env sets it)."""
    if not prefix:
        return []
    out = []
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    for dump in sorted(DUMPS.glob("trace_rank_*")):
        path = Path(prefix + dump.name.rsplit("_", 1)[1])
        data = dump.read_bytes()
        path.write_bytes(data)
        # dated as the capture's watchdog would have dumped it: STALL_TIMEOUT_S after its
        # newest collective began (what the verdict's "waiting N s" is measured from)
        entries = read_dump(data, 0).entries
        if entries and entries[-1].created_ns:
            at = entries[-1].created_ns / 1e9 + STALL_TIMEOUT_S
            os.utime(path, (at, at))
        out.append(path)
    return out


def _hang(settings: SimSettings) -> None:
    """The stall scenario's hung ranks: nothing more until stopped or the demo is gone."""
    while settings.state_dir is None or Path(settings.state_dir).is_dir():
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (1 after the OOM, 130 on Ctrl+C)."""
    parser = argparse.ArgumentParser(prog="gpumon-sim-job", description="simulated training job")
    parser.add_argument("--log", required=True, type=Path, help="progress log to append to")
    parser.add_argument("--name", default="drafter", help="job name used in the log")
    parser.add_argument(
        "--restarted",
        action="store_true",
        help="this run is a restart: record it (scenario time now) in the state dir first, "
        "so the simulated GPUs fill up again",
    )
    args = parser.parse_args(argv)
    try:
        settings = SimSettings.from_env(os.environ)
    except ValueError as e:
        parser.error(str(e))
    if settings.scenario not in TRAINING_SCENARIOS:
        print(f"gpumon-sim-job: the {settings.scenario} scenario runs no training job")
        return 0
    if args.restarted:
        if not settings.state_dir:
            parser.error("--restarted needs a state dir (GPUMON_SIM_DIR)")
        record_restart(settings.state_dir, scenario_time(settings, time.time()))
    if settings.state_dir:
        # A stop (SIGTERM from gpumon's stop step) is recorded, so the simulated GPUs
        # release the drafter's memory as a real stop would; then it ends at once.
        def stopped(signum: int, frame: object) -> None:
            with contextlib.suppress(OSError):
                record_stop(str(settings.state_dir), scenario_time(settings, time.time()))
            os._exit(128 + signum)

        signal.signal(signal.SIGTERM, stopped)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # even if our parent ignored it
    try:
        return run_job(settings, args.log, args.name, restarted=args.restarted)
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"gpumon-sim-job: cannot write {args.log}: {e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
