"""A stalled collective as PyTorch's flight recorder dumps it, for
tests/fixtures/upstream/flight-recorder/torch-<version>/.

Run by ``scripts/capture-upstream`` inside a throwaway venv holding the pinned torch:
``python flight_recorder.py OUT_DIR``. It starts a real ``torch.distributed`` job of
``WORLD`` ranks on the CPU (Gloo backend, ``init_process_group`` over a TCP store on
127.0.0.1), each rank a process of its own with the flight recorder on
(``TORCH_FR_BUFFER_SIZE``). The ranks train ``STEPS`` steps: a ``broadcast`` of the
step's seed, an ``all_reduce`` of the gradients (``GRAD`` floats), a small ``all_reduce`` of
the loss. At step ``STALL_STEP`` rank ``SKIP`` skips the gradients' ``all_reduce`` (its data
loader hangs: it sleeps), and the others wait in it until Gloo's timeout (``TIMEOUT_S``).

Two sets of dumps, each ``PREFIX<rank>`` as PyTorch's writer names them:

- ``on-demand/``: every rank, while the others wait, writes ``_dump_fr_trace()`` (the
  pickle PyTorch's writer puts in the file) when asked; this job is asked by a file that
  this program creates, which each rank looks for while it waits;
- ``on-timeout/``: each rank whose collective timed out writes ``_dump_fr_trace()`` to
  ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` from its handler of the timeout error: Gloo has no
  watchdog that dumps on a timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` is set and writes
  nothing with Gloo), and nothing asks the rank that never arrived, so its dump is missing
  there, as it is when a rank is wedged in a real job.

Beside each set, ``analyzer*.txt``: what ``python -m
torch.distributed.flight_recorder.fr_trace DIR -p PREFIX`` (and with
``--allow-incomplete-ranks``, ``-j``) printed, with its exit status. ``scenario.json``:
what the job was (world, the rank that skipped, the step and sequence number it skipped,
each rank's PID, the environment).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

WORLD = 4
SKIP = 2
STEPS = 6
STALL_STEP = 5  # the 0-based step whose gradients' all_reduce rank SKIP skips
GRAD = 1 << 16
TIMEOUT_S = 8.0
PREFIX = "trace_rank_"
BUFFER = 2000


def rank_main(rank: int, run: Path) -> None:
    import torch
    import torch._C._distributed_c10d as c10d
    import torch.distributed as dist

    demand, dumped = run / "dump-now", False

    def on_demand() -> None:
        """Writes the on-demand dump once it is asked for (polled by the waiting rank)."""
        nonlocal dumped
        if not dumped and demand.exists():
            t0 = time.monotonic()
            (run.parent / "on-demand" / f"{PREFIX}{rank}").write_bytes(c10d._dump_fr_trace())
            print(f"rank {rank}: dumped in {time.monotonic() - t0:.1f} s", file=sys.stderr)
            (run / f"dumped-{rank}").touch()
            dumped = True

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    grads = torch.ones(GRAD)
    for step in range(STEPS):
        seed = torch.tensor([step], dtype=torch.int64)
        dist.broadcast(seed, src=0)
        if step == STALL_STEP:
            (run / f"entered-{rank}").touch()
            if rank == SKIP:  # its data loader hangs; the parent ends it
                while True:
                    on_demand()
                    time.sleep(0.05)
            work = dist.all_reduce(grads, async_op=True)
            while not work.is_completed():
                on_demand()
                time.sleep(0.05)
            try:
                work.wait()
            except RuntimeError as e:
                print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
                target = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank)
                Path(target).write_bytes(c10d._dump_fr_trace())
                (run / f"timed-out-{rank}").touch()
                time.sleep(3600)  # stays, as a wedged job does, until it is ended
        dist.all_reduce(grads)
        loss = torch.tensor([1.0 / (step + 1)])
        dist.all_reduce(loss)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(paths: list[Path], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            missing = ", ".join(p.name for p in paths if not p.exists())
            raise SystemExit(f"flight_recorder.py: timed out waiting for {missing}")
        time.sleep(0.05)


def analyze(out: Path, folder: str, extra: list[str]) -> str:
    argv = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    argv += [str(out / folder), "-p", PREFIX, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    name = "analyzer" + "".join(a.replace("--", "-").replace("-", "_") for a in extra) + ".txt"
    shown = "python -m torch.distributed.flight_recorder.fr_trace " + " ".join(
        [folder, "-p", PREFIX, *extra]
    )
    text = f"$ {shown}\n# exit status {done.returncode}\n{done.stdout}{done.stderr}"
    (out / folder / name).write_text(text.replace(str(out), "OUT"))
    return f"{folder}/{name}: exit {done.returncode}"


def main(out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    run = out / ".run"
    for d in (run, out / "on-demand", out / "on-timeout"):
        d.mkdir(parents=True, exist_ok=True)
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(WORLD),
        "TORCH_FR_BUFFER_SIZE": str(BUFFER),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(out / "on-timeout" / PREFIX),
    }
    ranks = []
    for rank in range(WORLD):
        child_env = {**os.environ, **env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        argv = [sys.executable, __file__, "--rank", str(rank), str(run)]
        with open(out / f"stderr-rank{rank}.txt", "w") as said:
            ranks.append(subprocess.Popen(argv, env=child_env, stderr=said))
    try:
        wait_for([run / f"entered-{r}" for r in range(WORLD)], 120)
        time.sleep(1.0)  # the waiting ranks' all_reduce is under way
        (run / "dump-now").touch()
        wait_for([run / f"dumped-{r}" for r in range(WORLD)], 180)
        waiting = [r for r in range(WORLD) if r != SKIP]
        wait_for([run / f"timed-out-{r}" for r in waiting], TIMEOUT_S + 60)
    finally:
        for p in ranks:
            p.kill()
            p.wait()
    for rank in range(WORLD):
        said = out / f"stderr-rank{rank}.txt"
        said.write_text(said.read_text().replace(str(out), "OUT"))
    for f in run.iterdir():
        f.unlink()
    run.rmdir()
    # the seq of the skipped all_reduce: per step a broadcast and two all_reduces
    seq = STALL_STEP * 3 + 2
    said = [
        analyze(out, folder, extra)
        for folder in ("on-demand", "on-timeout")
        for extra in ([], ["--allow-incomplete-ranks"], ["-j"])
    ]
    shown_env = {k: v.replace(str(out), "OUT") for k, v in env.items() if k != "MASTER_PORT"}
    scenario = {
        "torch": torch.__version__,
        "world": WORLD,
        "backend": "gloo",
        "skipped_rank": SKIP,
        "skipped_op": "all_reduce",
        "skipped_seq": seq,
        "grad_numel": GRAD,
        "timeout_s": TIMEOUT_S,
        "prefix": PREFIX,
        "pids": {str(r): p.pid for r, p in enumerate(ranks)},
        "env": shown_env,
        "on_timeout_ranks": [r for r in range(WORLD) if r != SKIP],
    }
    (out / "scenario.json").write_text(json.dumps(scenario, indent=1) + "\n")
    print(
        f"torch {torch.__version__}, {WORLD} ranks on Gloo; rank {SKIP} skipped all_reduce "
        f"#{seq} (step {STALL_STEP}); the others timed out after {TIMEOUT_S:g} s.\n\n"
        + "\n".join(f"- {s}" for s in said)
    )


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(Path(sys.argv[1]).resolve())
