"""A stand-in pynvml for the agent (put this directory on the agent's PYTHONPATH): one
GPU with plausible values; while the file ``FAKE_NVML_HANG`` names exists, every device
call hangs (a driver call that never returns). Any call not written out here raises
``NVMLError_NotSupported`` (the agent then prints ``[N/A]``, as nvidia-smi does)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_ResetRequired(NVMLError):
    pass


NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
nvmlMemory_v2 = 2


def nvmlInit() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    if os.environ.get("FAKE_NVML_HANG") and os.path.exists(os.environ["FAKE_NVML_HANG"]):
        time.sleep(3600)  # hung in the driver, for good
    return 1


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return i


def nvmlDeviceGetUUID(h: int) -> str:
    return f"GPU-6e1f0c4e-0000-4000-8000-0000000000{h:02d}"


def nvmlDeviceGetName(h: int) -> str:
    return "NVIDIA RTX PRO 6000"


def nvmlDeviceGetPciInfo(h: int) -> Any:
    return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")


def nvmlDeviceGetMemoryInfo(h: int, version: int = 1) -> Any:
    mib = 1024 * 1024
    return SimpleNamespace(total=97887 * mib, used=1024 * mib, free=96863 * mib)


def nvmlDeviceGetUtilizationRates(h: int) -> Any:
    return SimpleNamespace(gpu=7, memory=1)


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:
    return 41


def nvmlDeviceGetPowerUsage(h: int) -> int:
    return 80500


def nvmlDeviceGetComputeRunningProcesses(h: int) -> list[Any]:
    return []


def __getattr__(name: str) -> Any:
    if name.startswith("NVML_"):  # a constant
        return 0
    if name.startswith("nvml"):

        def not_supported(*_args: object, **_kw: object) -> Any:
            raise NVMLError_NotSupported(name)

        return not_supported
    raise AttributeError(name)
