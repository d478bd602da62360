#!/usr/bin/env python3
"""A stand-in nvidia-smi whose output the test chooses: ``FAKE_SMI_GPUS`` GPUs (default 1)
whose name, and one process whose name, the test sets (``HOSTILE_NAME``,
``HOSTILE_PROCESS``); while the file ``FAKE_SMI_DROP`` names exists, the last GPU is not
listed (fallen off the bus); ``FAKE_SMI_LONG_NAME=I:N``: GPU I's name is N characters
long; or a failure whose output the test chooses (``HOSTILE_FAIL``:
printed on stdout, exit 255, the way nvidia-smi reports a driver problem). Answers what
the agent asks: ``--help-query-gpu``, ``--query-gpu=... -lms N`` (one round of rows per
interval until killed) and ``--query-compute-apps``.

Faults the test switches on and off while it runs: the file ``FAKE_SMI_MODE`` names holds
``stall`` (the loop stops printing, alive), ``garbage`` (lines that are not rows),
``flood`` (20000 rows at once, then silence), ``nolf:N`` (N bytes without a newline, then
silence), ``fail`` (the driver error, exit 9), ``lost`` (a GPU fallen off the bus: the
query and the process list fail with the driver's "GPU is lost", exit 15, as after an
Xid 79; ``--help-query-gpu`` still answers), ``no_handle:N`` (N GPUs listed, the last
one's row replaced by nvidia-smi's ``Unable to determine the device handle for
GPU0000:BB:00.0: Unknown Error``, the loop going on), ``gpus:N`` (N GPUs, no fault;
the one process stays on GPU 0) or ``held:NAME,NAME...`` (one GPU per name, each at 0 %
holding ``HELD_MIB``, held by one process of that name: GPU i by PID 4242+i); empty or
absent: normal. Each run
writes ``PID PPID`` and, on a second line, its arguments into a file in the directory
``FAKE_SMI_PIDS`` names.

Values are in the ``csv,noheader,nounits`` shape; a field it does not know is ``[N/A]``.

``FAKE_SMI_DRIVER=pre-r535``: a driver before R535. ``--help-query-gpu`` prints
tests/fixtures/nvidia/help_query_gpu_pre_r535.txt, and a query naming a field that help
does not list (``clocks_event_reasons.active``, ``power.draw.instant``) fails the way
nvidia-smi fails it: ``Field "NAME" is not a valid field to query.``, exit 2, no rows.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

UUID = "GPU-6e1f0c4e-0000-4000-8000-0000000000"  # + two digits: the index
VALUES = {
    "index": "0",
    "pci.bus_id": "00000000:18:00.0",
    "pstate": "P0",
    "temperature.gpu": "41",
    "utilization.gpu": "7",
    "memory.total": "97887",
    "memory.used": "1024",
    "memory.free": "96863",
    "power.draw": "80.5",
    "power.limit": "600.00",
    "clocks_event_reasons.active": "0x0000000000000004",  # SwPowerCap
    "clocks_throttle_reasons.active": "0x0000000000000004",  # its name before R535
}
OLD_HELP = Path(__file__).parents[1] / "fixtures" / "nvidia" / "help_query_gpu_pre_r535.txt"


def _old_driver_fields() -> set[str] | None:
    """The fields a pre-R535 nvidia-smi knows; None for the current driver."""
    if os.environ.get("FAKE_SMI_DRIVER") != "pre-r535":
        return None
    return set(re.findall(r'"([A-Za-z_][A-Za-z0-9_.]*)"', OLD_HELP.read_text()))


HELD_MIB = 70656  # 69 GiB: an SGLang server's KV cache pool, or a kernel's tensors


def _row(index: int, fields: list[str], held: bool = False) -> str:
    values = {
        **VALUES,
        "index": str(index),
        "uuid": f"{UUID}{index:02d}",
        "pci.bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "name": os.environ.get("HOSTILE_NAME", "NVIDIA RTX PRO 6000"),
    }
    if held:  # held and idle
        total = int(VALUES["memory.total"])
        values |= {"utilization.gpu": "0", "memory.used": str(HELD_MIB)}
        values["memory.free"] = str(total - HELD_MIB)
    long_gpu, _, long_size = os.environ.get("FAKE_SMI_LONG_NAME", "").partition(":")
    if long_gpu == str(index):  # "3:100000": GPU 3's name is 100,000 characters
        values["name"] = "NVIDIA " + "X" * (int(long_size) - 7)
    return ", ".join(values.get(f, "[N/A]") for f in fields)


DRIVER_FAIL = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
GPU_LOST = (
    "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost. "
    "Reboot the system to recover this GPU"
)
GPU_LOST_EXIT = 15


def _mode() -> str:
    path = os.environ.get("FAKE_SMI_MODE")
    try:
        with open(path or "", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def _silence() -> None:
    while True:
        time.sleep(3600)


def _faulty_round(mode: str, fields: list[str], count: int) -> None:
    """One round of the loop in fault ``mode`` (returns only for ``garbage``)."""
    if mode == "garbage":
        sys.stdout.write("".join(f"garbled {i} ~~~\n" for i in range(count)))
    elif mode == "flood":
        sys.stdout.write("".join(_row(i % count, fields) + "\n" for i in range(20000)))
    elif mode.startswith("nolf:"):
        size = int(mode[5:])
        while size > 0:
            sys.stdout.write("x" * min(65536, size))
            size -= 65536
    sys.stdout.flush()
    if mode != "garbage":
        _silence()


def main(argv: list[str]) -> int:
    pids = os.environ.get("FAKE_SMI_PIDS")
    if pids:
        with open(os.path.join(pids, str(os.getpid())), "w", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {os.getppid()}\n{' '.join(argv)}\n")
    fail = os.environ.get("HOSTILE_FAIL")
    if fail is not None:
        print(fail)
        return 255
    if _mode() == "fail":
        print(DRIVER_FAIL)
        return 9
    old_fields = _old_driver_fields()
    if "--help-query-gpu" in argv:
        if old_fields is not None:
            lines = OLD_HELP.read_text().splitlines()
            print("\n".join(ln for ln in lines if not ln.startswith("#")))
            return 0
        known = [f for f in VALUES if not f.startswith("clocks_")]  # as before: no reasons
        print("\n".join(f'"{f}"' for f in [*known, "name", "uuid"]))
        return 0
    query = next((a for a in argv if a.startswith("--query-gpu=")), None)
    if query is not None:
        fields = query.split("=", 1)[1].split(",")
        unknown = [f for f in fields if old_fields is not None and f not in old_fields]
        if unknown:
            print(f'Field "{unknown[0]}" is not a valid field to query.')
            print()
            return 2
        count = int(os.environ.get("FAKE_SMI_GPUS", "1"))
        drop = os.environ.get("FAKE_SMI_DROP")
        loop_ms = int(argv[argv.index("-lms") + 1]) if "-lms" in argv else None
        while True:
            mode = _mode()
            if mode == "fail":
                print(DRIVER_FAIL)
                return 9
            if mode == "lost":
                print(GPU_LOST)
                return GPU_LOST_EXIT
            gpus = count
            if mode.startswith("gpus:"):
                gpus, mode = int(mode.partition(":")[2]), ""
            if mode.startswith("held:"):
                names = mode.partition(":")[2].split(",")
                sys.stdout.write("".join(_row(i, fields, True) + "\n" for i in range(len(names))))
                sys.stdout.flush()
                time.sleep((loop_ms or 1000) / 1000)
                continue
            if mode.startswith("no_handle:"):
                listed = int(mode.partition(":")[2])
                dead = f"0000:{0x18 + listed - 1:02X}:00.0"
                rows = [_row(i, fields) for i in range(listed - 1)]
                rows.append(f"Unable to determine the device handle for GPU{dead}: Unknown Error")
                sys.stdout.write("".join(row + "\n" for row in rows))
                sys.stdout.flush()
                time.sleep((loop_ms or 1000) / 1000)
                continue
            if mode:
                _faulty_round(mode, fields, count)
                time.sleep((loop_ms or 1000) / 1000)
                continue
            listed = gpus - 1 if drop and os.path.exists(drop) else gpus
            sys.stdout.write("".join(_row(i, fields) + "\n" for i in range(listed)))
            sys.stdout.flush()
            if loop_ms is None:
                return 0
            time.sleep(loop_ms / 1000)
    if any(a.startswith("--query-compute-apps=") for a in argv):
        mode = _mode()
        if mode == "lost":
            print(GPU_LOST)
            return GPU_LOST_EXIT
        if mode.startswith("held:"):
            for i, held_by in enumerate(mode.partition(":")[2].split(",")):
                bus = f"00000000:{0x18 + i:02X}:00.0"
                print(f"{4242 + i}, {held_by}, {HELD_MIB}, {UUID}{i:02d}, {bus}")
            return 0
        name = os.environ.get("HOSTILE_PROCESS", "python")
        print(f"4242, {name}, 1000, {UUID}00, 00000000:18:00.0")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
