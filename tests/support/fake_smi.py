#!/usr/bin/env python3
"""A stand-in nvidia-smi whose output the test chooses: ``FAKE_SMI_GPUS`` GPUs (default 1)
whose name, and one process whose name, the test sets (``HOSTILE_NAME``,
``HOSTILE_PROCESS``); while the file ``FAKE_SMI_DROP`` names exists, the last GPU is not
listed (fallen off the bus); or a failure whose output the test chooses (``HOSTILE_FAIL``:
printed on stdout, exit 255, the way nvidia-smi reports a driver problem). Answers what
the agent asks: ``--help-query-gpu``, ``--query-gpu=... -lms N`` (one round of rows per
interval until killed) and ``--query-compute-apps``.

Values are in the ``csv,noheader,nounits`` shape; a field it does not know is ``[N/A]``.
"""

from __future__ import annotations

import os
import sys
import time

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
}


def _row(index: int, fields: list[str]) -> str:
    values = {
        **VALUES,
        "index": str(index),
        "uuid": f"{UUID}{index:02d}",
        "pci.bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "name": os.environ.get("HOSTILE_NAME", "NVIDIA RTX PRO 6000"),
    }
    return ", ".join(values.get(f, "[N/A]") for f in fields)


def main(argv: list[str]) -> int:
    fail = os.environ.get("HOSTILE_FAIL")
    if fail is not None:
        print(fail)
        return 255
    if "--help-query-gpu" in argv:
        print("\n".join(f'"{f}"' for f in [*VALUES, "name", "uuid"]))
        return 0
    query = next((a for a in argv if a.startswith("--query-gpu=")), None)
    if query is not None:
        fields = query.split("=", 1)[1].split(",")
        count = int(os.environ.get("FAKE_SMI_GPUS", "1"))
        drop = os.environ.get("FAKE_SMI_DROP")
        loop_ms = int(argv[argv.index("-lms") + 1]) if "-lms" in argv else None
        while True:
            listed = count - 1 if drop and os.path.exists(drop) else count
            sys.stdout.write("".join(_row(i, fields) + "\n" for i in range(listed)))
            sys.stdout.flush()
            if loop_ms is None:
                return 0
            time.sleep(loop_ms / 1000)
    if any(a.startswith("--query-compute-apps=") for a in argv):
        name = os.environ.get("HOSTILE_PROCESS", "python")
        print(f"4242, {name}, 1000, {UUID}00, 00000000:18:00.0")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
