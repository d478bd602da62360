"""A stand-in for a torch job's ranks and their debug pipes (the evidence tests):
``python fr_rank.py --ranks N`` starts N processes of itself, each with ``RANK`` set (as
torchrun's workers have it), and goes on as their launcher: ``job_script.py --every``.

Each rank does what PyTorch's ``DumpPipe`` and heartbeat monitor do
(``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp`` and ``.cpp``, 2.5 onwards): where
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is set and ``TORCH_FR_BUFFER_SIZE`` (or the older
``TORCH_NCCL_TRACE_BUFFER_SIZE``) is over 0, it removes ``STEM<rank>.pipe``, makes it a
FIFO (0666), opens it to read without blocking, and polls it; once anything is read it
writes its dump to ``TORCH_FR_DUMP_TEMP_FILE<rank>`` (the writer's prefix), which here
holds ``dump of rank R on demand N``. ``--silent-rank R``: rank R makes its pipe but never
dumps (a rank stuck where the monitor cannot run). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time


def rank_main(rank: int, silent: bool) -> int:
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    size = os.environ.get("TORCH_FR_BUFFER_SIZE") or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_")
    if not stem or int(size or 0) <= 0:
        while True:
            time.sleep(3600)
    pipe = f"{stem}{rank}.pipe"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pipe)
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    print(f"rank {rank}: pipe {pipe} opened", flush=True)
    dumps = 0
    while True:
        time.sleep(0.1)
        try:
            got = os.read(fd, 128)
        except BlockingIOError:
            continue
        if got and not silent:
            dumps += 1
            with open(f"{prefix}{rank}", "wb") as f:
                f.write(f"dump of rank {rank} on demand {dumps}".encode())


def main() -> int:
    parser = argparse.ArgumentParser(prog="fr_rank")
    parser.add_argument("--ranks", type=int, default=0)
    parser.add_argument("--silent-rank", type=int, default=-1)
    parser.add_argument("--every", type=float, default=0.5)
    args = parser.parse_args()
    rank = os.environ.get("RANK")
    if rank is not None and os.environ.get("FR_RANK_WORKER") == "1":
        return rank_main(int(rank), int(rank) == args.silent_rank)
    for r in range(args.ranks):  # in the launcher's session: the job's processes
        env = {**os.environ, "RANK": str(r), "FR_RANK_WORKER": "1"}
        subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env)
    # the launcher goes on as the restart tests' plain job (its progress lines)
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "job_script.py")
    os.execv(sys.executable, [sys.executable, job, "--every", str(args.every)])


if __name__ == "__main__":
    sys.exit(main())
