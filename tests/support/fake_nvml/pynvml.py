"""A stand-in pynvml for the agent (put this directory on the agent's PYTHONPATH): one
GPU with plausible values; while the file ``FAKE_NVML_HANG`` names exists, every device
call hangs (a driver call that never returns). Any call not written out here raises
``NVMLError_NotSupported`` (the agent then prints ``[N/A]``, as nvidia-smi does).

What the test chooses through the environment, in the real module's own terms:

- ``FAKE_NVML_BINDING``: the nvidia-ml-py release being imitated. ``13`` (default) is
  13.580.82's pynvml.py: ``nvmlDeviceGetComputeRunningProcesses`` is wrapped in
  ``throwOnVersionMismatch``, so a library without ``..._v3`` raises
  ``NVMLLibraryMismatchError`` (an ``Exception``, not an ``NVMLError``); it has a ``_v2``
  binding. ``12`` is 12.535.161's: the unversioned call is ``_v3`` with nothing around it
  (``NVMLError_FunctionNotFound``), and there is no ``_v2`` binding.
- ``FAKE_NVML_DRIVER``: which symbols the "libnvidia-ml.so" has and the struct its
  process calls fill (the C side, reached through ``_nvmlGetFunctionPointer`` as in the
  real module): ``current`` (default: ``_v3`` with the 4-field v2 struct, and
  ``nvmlDeviceGetRunningProcessDetailList``), ``r535cc`` (``_v3`` filling the 5-field
  struct with ``usedGpuCcProtectedMemory``, ``nvmlDeviceGetConfComputeMemSizeInfo`` but no
  ``RunningProcessDetailList``: the R535 branch nvitop's libnvml.py singles out), ``r470``
  (no ``_v3``; ``_v2``), ``r418`` (only the unversioned v1 call, 2-field struct).
- ``FAKE_NVML_GPU``: ``hbm`` (an H200: NVML_FI_DEV_MEMORY_TEMP answers) or the default
  GDDR7 board (memory temperature NOT_SUPPORTED); NVML_FI_DEV_POWER_INSTANT answers on both.
- ``FAKE_NVML_HEALTH``: stand-in health states, comma-separated (default: healthy):
  ``pcie_x4`` (link width 4 of 16), ``hw_slowdown`` (HwSlowdown in the clock event
  reasons), ``ecc_uncorrected`` (2 volatile uncorrected errors), ``row_pending`` (a row
  remap waits for the next reset), ``row_failure``, ``recovery_reset`` (the recovery-action
  field says GPU_RESET), ``no_remap`` (the remapping calls raise NOT_SUPPORTED).
- ``FAKE_NVML_MINOR_BASE``: the device minor of GPU 0 (``/dev/nvidiaN``; default 0): a
  container that sees a subset keeps the host's numbers.
- ``FAKE_NVML_GPUS``: how many GPUs it lists (default 1); ``FAKE_NVML_NO_HANDLE``: the
  index whose ``nvmlDeviceGetHandleByIndex`` raises NVML's Unknown Error (the GPU
  nvidia-smi prints ``Unable to determine the device handle for GPU...`` for).
- ``FAKE_NVML_PROCESS_PID``: the pids of the compute processes, comma-separated (default:
  none), using 1000, 1024, ... MiB, each with its SM and memory-bandwidth % on each GPU
  (``process_usage``; ``FAKE_NVML_PROCESS_UTIL=unsupported``: not sampled);
  ``FAKE_NVML_PROC_FAULT``: the process calls raise a
  RuntimeError (what no one expected: the agent's thread must say it died).
- ``FAKE_NVML_MIG``: GPU 0 is in MIG mode (``nvmlDeviceGetMigMode`` [1, 1]) with the GPU
  instances ``MIG_SLOTS`` (one compute instance each; the first process on GI 1, the
  next on GI 5); ``no_devices``: in MIG mode, but ``nvmlDeviceGetMigDeviceHandleByIndex``
  raises NOT_SUPPORTED (a driver that gives no slice). The MIG calls are nvidia-ml-py
  13.580.82's (``MIG_CALLS``); the utilisation of a MIG device, and of GPU 0 while in MIG
  mode, is NOT_SUPPORTED, as NVML documents.
- ``FAKE_NVML_ENERGY``: ``unsupported``: ``nvmlDeviceGetTotalEnergyConsumption`` raises
  NOT_SUPPORTED (a board before Volta); else the counter grows at ``ENERGY_W`` from the
  module's import.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            NVML_ERROR_NOT_SUPPORTED: "Not Supported",
            NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        }.get(self.value, "Unknown Error")


class NVMLError_NotSupported(NVMLError):
    def __init__(self, value: object = None) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_NotFound(NVMLError):
    def __init__(self, value: object = None) -> None:
        super().__init__(6)  # NVML_ERROR_NOT_FOUND


class NVMLError_FunctionNotFound(NVMLError):
    def __init__(self, value: object = None) -> None:
        super().__init__(NVML_ERROR_FUNCTION_NOT_FOUND)


class NVMLError_ResetRequired(NVMLError):
    pass


class NVMLLibraryMismatchError(Exception):  # 13.x: deliberately not an NVMLError
    pass


NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
nvmlMemory_v2 = 2
MIB = 1024 * 1024


def _binding() -> str:
    return os.environ.get("FAKE_NVML_BINDING", "13")


def _driver() -> str:
    return os.environ.get("FAKE_NVML_DRIVER", "current")


def nvmlInit() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    if os.environ.get("FAKE_NVML_HANG") and os.path.exists(os.environ["FAKE_NVML_HANG"]):
        time.sleep(3600)  # hung in the driver, for good
    return int(os.environ.get("FAKE_NVML_GPUS", "1"))


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    if os.environ.get("FAKE_NVML_NO_HANDLE") == str(i):
        raise NVMLError()  # NVML_ERROR_UNKNOWN: "Unknown Error"
    return i


def nvmlDeviceGetUUID(h: int) -> str:
    if h >= MIG_BASE:
        return f"MIG-5d1e27a4-8b3c-5f09-9e12-4a7b6c0d3e{h % 100:02d}"
    return f"GPU-6e1f0c4e-0000-4000-8000-0000000000{h:02d}"


def nvmlDeviceGetName(h: int) -> str:
    if h >= MIG_BASE:  # NVML names a MIG device "<board> MIG <profile>"
        return f"NVIDIA RTX PRO 6000 MIG {MIG_SLOTS[h % 100][1]}"
    return "NVIDIA H200" if os.environ.get("FAKE_NVML_GPU") == "hbm" else "NVIDIA RTX PRO 6000"


def nvmlDeviceGetPciInfo(h: int) -> Any:
    return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")


def nvmlDeviceGetMinorNumber(h: int) -> int:
    return h + int(os.environ.get("FAKE_NVML_MINOR_BASE", "0"))


def nvmlDeviceGetMemoryInfo(h: int, version: int = 1) -> Any:
    if h >= MIG_BASE:
        total = MIG_SLOTS[h % 100][2] * MIB
        used = sum(used for _, used in _processes(h)) + 13 * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)
    return SimpleNamespace(total=97887 * MIB, used=1024 * MIB, free=96863 * MIB)


def nvmlDeviceGetUtilizationRates(h: int) -> Any:
    if h >= MIG_BASE or _mig_gpu(h):
        raise NVMLError_NotSupported()
    return SimpleNamespace(gpu=7, memory=1)


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:
    return 41


def nvmlDeviceGetPowerUsage(h: int) -> int:
    return 80500


ENERGY_W = 90  # the counter's rate: not the 80.5 W reading, so a test tells the two apart
_LOADED = time.time()  # "the driver was loaded": when the agent imported this module


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
    """As nvml.h documents it: millijoules since the driver was last loaded (an unsigned
    long long), Volta and newer; ``FAKE_NVML_ENERGY=unsupported``: NOT_SUPPORTED, as an
    older board answers."""
    if os.environ.get("FAKE_NVML_ENERGY") == "unsupported":
        raise NVMLError_NotSupported()
    return int((time.time() - _LOADED) * ENERGY_W * 1000)


def _health() -> set[str]:
    return set(filter(None, os.environ.get("FAKE_NVML_HEALTH", "").split(",")))


def nvmlDeviceGetCurrPcieLinkGeneration(h: int) -> int:
    return 5


def nvmlDeviceGetMaxPcieLinkGeneration(h: int) -> int:
    return 5


def nvmlDeviceGetCurrPcieLinkWidth(h: int) -> int:
    return 4 if "pcie_x4" in _health() else 16


def nvmlDeviceGetMaxPcieLinkWidth(h: int) -> int:
    return 16


def nvmlDeviceGetCurrentClocksEventReasons(h: int) -> int:
    return 0x8 if "hw_slowdown" in _health() else 0x0


def nvmlDeviceGetTotalEccErrors(h: int, error_type: int, counter_type: int) -> int:
    if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED and "ecc_uncorrected" in _health():
        return 2
    return 0


def nvmlDeviceGetRemappedRows(h: int) -> tuple[int, int, int, int]:
    """(corrected rows, uncorrected rows, pending, failure occurred), as nvidia-ml-py."""
    health = _health()
    if "no_remap" in health:
        raise NVMLError_NotSupported()
    return (
        0,
        1 if "row_pending" in health else 0,
        int("row_pending" in health),
        int("row_failure" in health),
    )


def nvmlDeviceGetFieldValues(h: int, field_ids: list[int]) -> list[Any]:
    """As the real call fills c_nvmlFieldValue_t: per entry its nvmlReturn and value."""
    out = []
    for fid in field_ids:
        value, ret = 0, NVML_ERROR_NOT_SUPPORTED
        if fid == NVML_FI_DEV_POWER_INSTANT:
            value, ret = 83250, NVML_SUCCESS  # mW
        elif fid == NVML_FI_DEV_MEMORY_TEMP and os.environ.get("FAKE_NVML_GPU") == "hbm":
            value, ret = 47, NVML_SUCCESS
        elif fid == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:  # nvmlGpuRecoveryAction_t
            value, ret = (1 if "recovery_reset" in _health() else 0), NVML_SUCCESS
        out.append(
            SimpleNamespace(
                fieldId=fid,
                nvmlReturn=ret,
                valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                value=SimpleNamespace(uiVal=value, ullVal=value, dVal=float(value)),
            )
        )
    return out


# --- the C side of the process calls ---------------------------------------------------


class _V1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _V2(ctypes.Structure):
    _fields_ = [
        *_V1._fields_,
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _V3CC(ctypes.Structure):
    _fields_ = [*_V2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


_SYMBOLS: dict[str, dict[str, type[ctypes.Structure] | None]] = {
    "current": {
        "nvmlDeviceGetComputeRunningProcesses_v3": _V2,
        "nvmlDeviceGetComputeRunningProcesses_v2": _V2,
        "nvmlDeviceGetComputeRunningProcesses": _V1,
        "nvmlDeviceGetConfComputeMemSizeInfo": None,
        "nvmlDeviceGetRunningProcessDetailList": None,
    },
    "r535cc": {
        "nvmlDeviceGetComputeRunningProcesses_v3": _V3CC,
        "nvmlDeviceGetComputeRunningProcesses_v2": _V2,
        "nvmlDeviceGetComputeRunningProcesses": _V1,
        "nvmlDeviceGetConfComputeMemSizeInfo": None,
    },
    "r470": {
        "nvmlDeviceGetComputeRunningProcesses_v2": _V2,
        "nvmlDeviceGetComputeRunningProcesses": _V1,
    },
    "r418": {"nvmlDeviceGetComputeRunningProcesses": _V1},
}


def _processes(handle: int = 0) -> list[tuple[int, int]]:
    """The processes on ``handle``; on a MIG device only the one of its slot."""
    pids = os.environ.get("FAKE_NVML_PROCESS_PID", "")
    procs = [(int(pid), (1000 + 24 * n) * MIB) for n, pid in enumerate(pids.split(",")) if pid]
    if isinstance(handle, int) and handle >= MIG_BASE:  # (a test may pass a ctypes handle)
        return procs[handle % 100 : handle % 100 + 1]
    return procs


def _process_call(struct: type[ctypes.Structure]) -> Callable[..., int]:
    """The driver's ``nvmlDeviceGet*RunningProcesses*``: count first, then it writes its
    own struct layout into the caller's buffer, whatever type the caller declared."""

    def call(handle: int, count_ref: Any, buffer: Any) -> int:
        count = count_ref._obj  # the c_uint behind byref()
        procs = _processes(handle)
        if buffer is None or count.value < len(procs):
            count.value = len(procs)
            return NVML_ERROR_INSUFFICIENT_SIZE if procs else NVML_SUCCESS
        raw = b"".join(
            bytes(struct(pid, used, *([0xFFFFFFFF] * 2 if struct is not _V1 else [])))
            for pid, used in procs
        )
        ctypes.memmove(ctypes.addressof(buffer), raw, len(raw))
        count.value = len(procs)
        return NVML_SUCCESS

    return call


def _nvmlGetFunctionPointer(name: str) -> Any:
    if os.environ.get("FAKE_NVML_PROC_FAULT") and "Processes" in name:
        raise RuntimeError(f"{name}: the library was unloaded under us")  # not an NVMLError
    symbols = _SYMBOLS[_driver()]
    if name not in symbols:
        raise NVMLError_FunctionNotFound()
    struct = symbols[name]
    return _process_call(struct) if struct is not None else (lambda *_a: NVML_SUCCESS)


def _python_binding(symbol: str) -> Callable[[int], list[Any]]:
    """pynvml's own wrapper: it reads the buffer as ITS struct (the v2 layout for _v3)."""

    def call(handle: int) -> list[Any]:
        fn = _nvmlGetFunctionPointer(symbol)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == NVML_SUCCESS:
            return []
        count.value = count.value * 2 + 5
        buffer = (_V2 * count.value)()
        fn(handle, ctypes.byref(count), buffer)
        return [
            SimpleNamespace(pid=buffer[i].pid, usedGpuMemory=buffer[i].usedGpuMemory)
            for i in range(count.value)
        ]

    return call


nvmlDeviceGetComputeRunningProcesses_v3 = _python_binding("nvmlDeviceGetComputeRunningProcesses_v3")


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Any]:
    if _binding() == "12":
        return nvmlDeviceGetComputeRunningProcesses_v3(handle)
    try:  # 13.x: @throwOnVersionMismatch
        return nvmlDeviceGetComputeRunningProcesses_v3(handle)
    except NVMLError_FunctionNotFound:
        raise NVMLLibraryMismatchError(
            "Unversioned function called and the pyNVML version does not match the NVML lib "
            "version. Either use matching pyNVML and NVML lib versions or use a versioned "
            "function such as nvmlDeviceGetComputeRunningProcesses_v2"
        ) from None


# --- MIG ----------------------------------------------------------------------------------

NVML_DEVICE_MIG_ENABLE = 1
MIG_BASE = 1000  # a MIG device's handle: MIG_BASE + its slot (GPU 0's)
MIG_SLOTS = ((1, "2g.48gb", 47872, 94), (5, "1g.24gb", 23936, 47))  # (GI, profile, MiB, SMs)
# What gpumon calls, as nvidia-ml-py 13.580.82's pynvml.py defines them (the MIG device
# handles' own calls are the device calls above: name, UUID, memory, processes)
MIG_CALLS = (
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
)


def _mig_gpu(h: int) -> bool:
    return bool(os.environ.get("FAKE_NVML_MIG")) and h == 0


def nvmlDeviceGetMigMode(h: int) -> list[int]:
    """[current, pending] (pynvml returns both as a list)."""
    if h >= MIG_BASE:
        raise NVMLError_NotSupported()
    mode = NVML_DEVICE_MIG_ENABLE if _mig_gpu(h) else 0
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(h: int) -> int:
    return 4 if _mig_gpu(h) else 0  # the RTX PRO 6000: up to 4 GPU instances


def nvmlDeviceGetMigDeviceHandleByIndex(h: int, index: int) -> int:
    if os.environ.get("FAKE_NVML_MIG") == "no_devices":
        raise NVMLError_NotSupported()
    if not _mig_gpu(h) or index >= len(MIG_SLOTS):
        raise NVMLError_NotFound()  # an empty slot
    return MIG_BASE + index


def nvmlDeviceGetGpuInstanceId(h: int) -> int:
    if h < MIG_BASE:
        raise NVMLError_NotSupported()  # not a MIG device handle
    return MIG_SLOTS[h % 100][0]


def nvmlDeviceGetComputeInstanceId(h: int) -> int:
    if h < MIG_BASE:
        raise NVMLError_NotSupported()
    return 0


def nvmlDeviceGetAttributes(h: int) -> Any:
    if h < MIG_BASE:
        raise NVMLError_NotSupported()
    return SimpleNamespace(multiprocessorCount=MIG_SLOTS[h % 100][3])


# --- per-process utilisation ------------------------------------------------------------


def process_usage(gpu: int, n: int) -> tuple[int, int]:
    """(smUtil, memUtil) of the ``n``-th process of ``FAKE_NVML_PROCESS_PID`` on GPU
    ``gpu``: a different pair on each GPU, that the tests compare with what gpumon says."""
    sm = (13 + 29 * gpu + 41 * n) % 101
    return sm, sm * 3 // 7


def nvmlDeviceGetProcessUtilization(handle: int, timeStamp: int) -> list[Any]:
    """As nvidia-ml-py 13.615.71's binding: c_nvmlProcessUtilizationSample_t (pid,
    timeStamp, smUtil, memUtil, encUtil, decUtil), one sample a process, stamped now (in
    microseconds); NVMLError(NVML_ERROR_NOT_FOUND) when none is newer than ``timeStamp``.
    ``FAKE_NVML_PROCESS_UTIL=unsupported``: the driver does not sample processes."""
    if os.environ.get("FAKE_NVML_PROCESS_UTIL") == "unsupported":
        raise NVMLError_NotSupported()
    now_us = int(time.time() * 1e6)
    if timeStamp >= now_us or not _processes() or _mig_gpu(handle):
        raise NVMLError_NotFound()  # a MIG-sliced GPU samples no process (pmon's '-')
    out = []
    for n, (pid, _used) in enumerate(_processes()):
        sm, mem = process_usage(handle, n)
        out.append(
            SimpleNamespace(pid=pid, timeStamp=now_us, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0)
        )
    return out


def __getattr__(name: str) -> Any:
    if name == "nvmlDeviceGetComputeRunningProcesses_v2":
        if _binding() == "12":
            raise AttributeError(name)  # 12.535.x has no _v2 binding
        return _python_binding(name)
    if name.startswith("NVML_"):  # a constant
        return 0
    if name.startswith("nvml"):

        def not_supported(*_args: object, **_kw: object) -> Any:
            raise NVMLError_NotSupported(name)

        return not_supported
    raise AttributeError(name)
