# ruff: noqa
# mypy: ignore-errors
# The benches' NVML shim (bench_agent, bench_oneshot, bench_soak, and the side-by-side runs
# with nvitop and gpustat): its stand-ins mirror the C library's loose signatures, so
# neither ruff nor mypy reads it.
"""Simulated NVML: 8 fake GPUs for running nvitop / gpustat on a machine with no GPU.

Put this folder on PYTHONPATH; Python imports its `sitecustomize` at start-up, which
loads this module (`install`) when, and only if, the process imports `pynvml`. We do not touch pynvml's Python wrappers: we replace the ctypes
library object they call (`pynvml.nvmlLib`) with `FakeLib` below, whose attributes stand
in for the C symbols. So pynvml's wrappers and the tools' own re-implementations
(nvitop redefines several) run unchanged; only the C call is simulated.

Every symbol not defined in FakeLib returns NVML_ERROR_NOT_SUPPORTED, which pynvml
raises as NVMLError_NotSupported: the tools show N/A for it (fan, ECC, MIG, PCIe
throughput, encoder/decoder, NVLink, ...), as on a real driver without that feature.

Env: NVML_SHIM_PIDS=pid,pid,...  real PIDs to report as GPU compute processes
(default: the monitor's own PID). GPU i runs PIDS[i % n]; odd GPUs also PIDS[(i+1) % n].
NVML_SHIM_MISSING=sym,sym,...  C symbols the simulated library lacks (an older driver),
e.g. nvmlDeviceGetComputeRunningProcesses_v3 as on R470 or R535 from 535.98.
"""

import ctypes
import math
import os
import time

N_GPUS = 8
NAME = b"NVIDIA RTX PRO 6000 Blackwell Server Edition"
MIB = 1 << 20
TOTAL = 97887 * MIB
BUS = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
# uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu-{i}"), written out: the uuid module imports
# platform (nine patterns compiled), which the C library it stands in for costs no tool
UUIDS = [
    b"GPU-b5c159ed-97ef-523e-9b2f-dbcfee495f3b",
    b"GPU-2e874132-ed8c-5cfa-9c14-0af00919ae11",
    b"GPU-9b94f854-4fa4-5a84-9c98-4bad326ab81e",
    b"GPU-ce87eeeb-fd5c-52e7-a1c0-8d0b1f5b66f3",
    b"GPU-59cef264-a1f1-5686-80f9-5c7804fa5de6",
    b"GPU-178d2bbd-faa1-54c9-acbb-77996787288f",
    b"GPU-e2916a9a-b9bc-5948-adbb-9841a200d206",
    b"GPU-08a5268c-e134-5236-9fc3-e1d1abf71b67",
]
MAX_CLOCKS = {0: 2617, 1: 2617, 2: 14001, 3: 1965}  # MHz: graphics, SM, memory, video
PIDS = [int(p) for p in os.environ.get("NVML_SHIM_PIDS", "").split(",") if p.strip()]
OK, INVALID_ARGUMENT, NOT_SUPPORTED, INSUFFICIENT_SIZE = 0, 2, 3, 7  # NVML return codes


SHIM_T0 = time.time()
# ---- the simulated state: smooth functions of time.time() ----


def util(i):
    """GPU utilisation %, a slow sine per GPU (5..95)."""
    return round(50 + 45 * math.sin(time.time() / 15 + i))


def mem_used(i):
    """Bytes used. GPU 6 climbs towards full over 10 min, then starts over."""
    t = time.time()
    frac = 0.50 + 0.49 * (t % 600) / 600 if i == 6 else 0.60 + 0.2 * math.sin(t / 40 + 2 * i)
    return int(TOTAL * frac)


def temperature(i):
    return 35 + util(i) * 45 // 100  # deg C


def power_mw(i):
    return 80_000 + util(i) * 5_000  # limit is 600 W


def clock(i, kind):
    """MHz: at max clock when busy, 40% when idle."""
    return MAX_CLOCKS.get(kind, 0) * (100 if util(i) > 10 else 40) // 100


def processes(i):
    """[(pid, bytes)] for GPU i: one or two real PIDs sharing most of the used memory."""
    pids = PIDS or [os.getpid()]
    mine = [pids[i % len(pids)]] + ([pids[(i + 1) % len(pids)]] if i % 2 else [])
    mine = list(dict.fromkeys(mine))
    share = (mem_used(i) - 600 * MIB) // len(mine)
    return [(pid, share) for pid in mine]


# ---- the fake C library ----


def _gpu(handle):
    """Device index from a handle made by nvmlDeviceGetHandleByIndex_v2."""
    return ctypes.cast(handle, ctypes.c_void_p).value - 1


def _out(ref):
    """The ctypes object behind byref(obj) (arrays and buffers are passed as-is)."""
    return getattr(ref, "_obj", ref)


def _set(ref, value):
    _out(ref).value = value
    return OK


class FakeLib:
    """Stands in for ctypes.CDLL('libnvidia-ml.so.1'): attribute name = C symbol."""

    def __getattr__(self, name):  # any symbol we don't simulate
        return lambda *args: NOT_SUPPORTED

    # init / system
    nvmlInitWithFlags = nvmlInit_v2 = nvmlShutdown = staticmethod(lambda *a: OK)
    nvmlSystemGetDriverVersion = staticmethod(lambda buf, size: _set(buf, b"590.48.01"))
    nvmlSystemGetCudaDriverVersion = staticmethod(lambda ref: _set(ref, 13010))
    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    # enumeration
    nvmlDeviceGetCount_v2 = staticmethod(lambda ref: _set(ref, N_GPUS))

    @staticmethod
    def nvmlDeviceGetHandleByIndex_v2(index, ref):
        if not 0 <= index.value < N_GPUS:
            return INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(_out(ref)).value = index.value + 1
        return OK

    nvmlDeviceGetIndex = staticmethod(lambda h, ref: _set(ref, _gpu(h)))
    nvmlDeviceIsMigDeviceHandle = staticmethod(lambda h, ref: _set(ref, 0))

    # identity
    nvmlDeviceGetName = staticmethod(lambda h, buf, size: _set(buf, NAME))
    nvmlDeviceGetUUID = staticmethod(lambda h, buf, size: _set(buf, UUIDS[_gpu(h)]))
    nvmlDeviceGetPersistenceMode = staticmethod(lambda h, ref: _set(ref, 1))
    nvmlDeviceGetDisplayActive = nvmlDeviceGetDisplayMode = staticmethod(
        lambda h, ref: _set(ref, 0)
    )
    nvmlDeviceGetComputeMode = staticmethod(lambda h, ref: _set(ref, 0))

    @staticmethod
    def nvmlDeviceGetCudaComputeCapability(h, major, minor):
        _set(major, 12)  # SM120 (Blackwell workstation/server)
        return _set(minor, 0)

    @staticmethod
    def nvmlDeviceGetPciInfo_v3(h, ref):
        info = _out(ref)
        info.domain, info.bus, info.device, info.pciDeviceId = 0, BUS[_gpu(h)], 0, 0x2BB510DE
        info.busId = info.busIdLegacy = b"00000000:%02X:00.0" % BUS[_gpu(h)]
        return OK

    # memory and utilisation
    @staticmethod
    def nvmlDeviceGetMemoryInfo_v2(h, ref):
        mem = _out(ref)
        mem.total, mem.used = TOTAL, mem_used(_gpu(h))
        mem.free = mem.total - mem.used
        return OK

    nvmlDeviceGetMemoryInfo = nvmlDeviceGetMemoryInfo_v2  # v1 struct has the same field names

    @staticmethod
    def nvmlDeviceGetUtilizationRates(h, ref):
        rates = _out(ref)
        rates.gpu, rates.memory = util(_gpu(h)), util(_gpu(h)) // 2
        return OK

    # sensors, power, clocks
    nvmlDeviceGetTemperature = staticmethod(lambda h, sensor, ref: _set(ref, temperature(_gpu(h))))

    @staticmethod
    def nvmlDeviceGetTemperatureV(h, ref):  # versioned struct; nvitop prefers it
        _out(ref).temperature = temperature(_gpu(h))
        return OK

    nvmlDeviceGetPowerUsage = staticmethod(lambda h, ref: _set(ref, power_mw(_gpu(h))))
    nvmlDeviceGetEnforcedPowerLimit = staticmethod(lambda h, ref: _set(ref, 600_000))
    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit
    nvmlDeviceGetPerformanceState = staticmethod(
        lambda h, ref: _set(ref, 0 if util(_gpu(h)) > 10 else 8)
    )
    nvmlDeviceGetMaxClockInfo = staticmethod(
        lambda h, kind, ref: _set(ref, MAX_CLOCKS.get(kind.value, 0))
    )
    nvmlDeviceGetClockInfo = staticmethod(
        lambda h, kind, ref: _set(ref, clock(_gpu(h), kind.value))
    )

    # processes: called once with (count, None) for the size, then with an array
    @staticmethod
    def nvmlDeviceGetComputeRunningProcesses_v3(h, count_ref, array):
        procs, count = processes(_gpu(h)), _out(count_ref)
        if array is None or count.value < len(procs):
            count.value = len(procs)
            return INSUFFICIENT_SIZE
        for slot, (pid, used) in zip(array, procs):
            slot.pid, slot.usedGpuMemory = pid, used
            if hasattr(slot, "gpuInstanceId"):  # v2/v3 structs; v1 has pid and memory only
                slot.gpuInstanceId = slot.computeInstanceId = 0xFFFFFFFF
        count.value = len(procs)
        return OK

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetComputeRunningProcesses = nvmlDeviceGetComputeRunningProcesses_v3

    # per-process utilisation samples (nvitop's %SM): the first process gets most of the GPU
    @staticmethod
    def nvmlDeviceGetProcessUtilization(h, array, count_ref, last_seen):
        procs, count = processes(_gpu(h)), _out(count_ref)
        if array is None or count.value < len(procs):
            count.value = len(procs)
            return INSUFFICIENT_SIZE
        u, now_us = util(_gpu(h)), int(time.time() * 1e6)
        for k, (slot, (pid, _used)) in enumerate(zip(array, procs)):
            slot.pid, slot.timeStamp = pid, now_us
            slot.smUtil = u if k == 0 else u // 3
            slot.memUtil = u // 2 if k == 0 else u // 6
            slot.encUtil = slot.decUtil = 0
        count.value = len(procs)
        return OK

    # energy since the shim's start, in mJ: power (mW) x seconds
    nvmlDeviceGetTotalEnergyConsumption = staticmethod(
        lambda h, ref: _set(ref, int((time.time() - SHIM_T0) * power_mw(_gpu(h))))
    )

    nvmlDeviceGetGraphicsRunningProcesses_v3 = staticmethod(
        lambda h, count_ref, array: _set(count_ref, 0)
    )
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3


MISSING = {m for m in os.environ.get("NVML_SHIM_MISSING", "").split(",") if m}


class OlderLib(FakeLib):
    """FakeLib without the symbols named in NVML_SHIM_MISSING (ctypes raises AttributeError)."""

    def __getattribute__(self, name):
        if name in MISSING:
            raise AttributeError(f"undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name):  # reached after the AttributeError above too
        if name in MISSING:
            raise AttributeError(f"undefined symbol: {name}")
        return lambda *args: NOT_SUPPORTED


def install(pynvml):
    """Put the simulated library where pynvml keeps the loaded one: its
    _LoadNvmlLibrary() sees a loaded library and keeps it."""
    pynvml.nvmlLib = OlderLib() if MISSING else FakeLib()
