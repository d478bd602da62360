"""A MIG-sliced GPU's instances, read on the target: standard library only, Python 3.8.

A GPU in MIG mode is split into GPU instances, each with its own memory and SMs, each
holding one or more compute instances (the MIG devices CUDA sees, ``MIG-...`` UUIDs). The
whole GPU's memory is then the sum of its instances and its utilisation is not reported
(nvidia-smi prints ``[N/A]``): only the instances say who is short of memory.

What is read, by either source, is one record per GPU instance (``instance_record``):
``gpu`` the parent's UUID, ``gi`` its GPU instance id, ``profile`` (``3g.40gb``), memory
``total_mib``/``used_mib``/``free_mib`` (shared by its compute instances), ``sm`` its
multiprocessors, ``devices`` its compute instances (``index`` the MIG device index,
``ci``, ``uuid``, ``profile`` as ``-L`` names it, ``1c.3g.71gb``), ``pids`` the processes
the driver lists on it.

- NVML (``nvml_instances``): ``nvmlDeviceGetMigMode``, ``nvmlDeviceGetMaxMigDeviceCount``,
  ``nvmlDeviceGetMigDeviceHandleByIndex`` and, on each MIG device handle,
  ``nvmlDeviceGetGpuInstanceId`` / ``nvmlDeviceGetComputeInstanceId``, its name (``... MIG
  3g.40gb``), UUID, memory, attributes and compute processes (nvidia-ml-py 13.580.82's
  pynvml.py).
- nvidia-smi (``smi_instances``): ``nvidia-smi -L`` (the profiles and MIG UUIDs) and
  ``nvidia-smi -q -i N`` (its ``MIG Device`` sections and the processes' GPU and compute
  instance ids), as driver 590.48.01 prints them (docs/formats.md, MIG).

Neither reports utilisation per instance: NVML's ``nvmlDeviceGetUtilizationRates`` is not
supported on MIG devices (nor on the parent in MIG mode), and nvidia-smi prints none.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing is not imported on the target (its import costs memory)
if TYPE_CHECKING:
    from typing import Any, Callable

    Record = dict[str, Any]

MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE: nvmlDeviceGetMigMode's current mode
_LIST_GPU = re.compile(r"GPU (\d+): .* \(UUID: (GPU-[^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)\s]+)\)\s*$")
_COMPUTE_SLICE = re.compile(r"^\d+c\.")  # -L's "1c.3g.71gb": 1 of its GPU instance's slices
_MIB = re.compile(r"(\d+) MiB$")


def gpu_instance_profile(profile: str | None) -> str | None:
    """``1c.3g.71gb`` (a compute instance smaller than its GPU instance) -> ``3g.71gb``."""
    return _COMPUTE_SLICE.sub("", profile) if profile else profile


def parse_list(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """``nvidia-smi -L``: parent UUID -> its MIG devices as (index, profile, MIG UUID)."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    parent = None
    for line in text.splitlines():
        gpu = _LIST_GPU.match(line)
        if gpu:
            parent = gpu.group(2)
            out[parent] = []
            continue
        mig = _LIST_MIG.match(line)
        if mig and parent is not None:
            out[parent].append((int(mig.group(2)), mig.group(1), mig.group(3)))
    return out


def _number(text: str) -> int | None:
    text = text.strip()
    m = _MIB.match(text)
    if m:
        return int(m.group(1))
    return int(text) if text.isdigit() else None


def parse_query(text: str) -> list[Record]:
    """``nvidia-smi -q``: per GPU its ``bus_id``, ``uuid``, ``mig`` (the current mode's
    text), ``devices`` (its ``MIG Device`` sections: ``index``, ``gi``, ``ci``, ``sm``,
    ``total_mib``, ``used_mib``, ``free_mib``) and ``processes`` (``gi``, ``ci``, ``pid``)."""
    gpus: list[Record] = []
    gpu: Record | None = None
    stack: list[tuple[int, str]] = []  # (indent, heading) above the line
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            stack = []
            gpu = None
            if line.startswith("GPU "):
                gpu = {"bus_id": line[4:].strip(), "uuid": None, "mig": None}
                gpu["devices"], gpu["processes"] = [], []
                gpus.append(gpu)
            continue
        if gpu is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if " : " not in line and not line.rstrip().endswith(":"):
            stack.append((indent, line.strip()))
            continue
        key, _, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        path = [name for _, name in stack]
        _take(gpu, path, key, value)
    return gpus


def _take(gpu: Record, path: list[str], key: str, value: str) -> None:
    if not path:
        if key == "GPU UUID":
            gpu["uuid"] = value
        return
    head = path[0]
    if head == "MIG Mode" and key == "Current":
        gpu["mig"] = value
    elif head == "MIG Device":
        devices = gpu["devices"]
        if key == "Index" and len(path) == 1:
            devices.append({"index": _number(value)})
        elif devices:
            device = devices[-1]
            if len(path) == 1 and key == "GPU Instance ID":
                device["gi"] = _number(value)
            elif len(path) == 1 and key == "Compute Instance ID":
                device["ci"] = _number(value)
            elif key == "Multiprocessor count":
                device["sm"] = _number(value)
            elif path[-1].endswith("FB Memory Usage") and key in ("Total", "Used", "Free"):
                device[key.lower() + "_mib"] = _number(value)
    elif head == "Processes":
        procs = gpu["processes"]
        name = key.casefold()
        if name == "gpu instance id" or (
            name == "process id" and (not procs or "pid" in procs[-1])
        ):
            procs.append({})
        if procs and name in ("gpu instance id", "compute instance id", "process id"):
            procs[-1][{"gpu instance id": "gi", "compute instance id": "ci"}.get(name, "pid")] = (
                _number(value)
            )


def instance_record(gpu: str, gi: int) -> Record:
    """An empty GPU instance record (the module's docstring names its keys)."""
    return {
        "gpu": gpu,
        "gi": gi,
        "profile": None,
        "total_mib": None,
        "used_mib": None,
        "free_mib": None,
        "sm": None,
        "devices": [],
        "pids": [],
    }


def _add_device(
    instances: dict[int, Record], gpu: str, gi: int, device: Record, memory: Record
) -> Record:
    """The GPU instance ``gi`` (made on first sight) with ``device`` among its compute
    instances; its memory (the same for each of its compute instances) from ``memory``."""
    inst = instances.get(gi)
    if inst is None:
        inst = instances[gi] = instance_record(gpu, gi)
        for key in ("total_mib", "used_mib", "free_mib"):
            inst[key] = memory.get(key)
    inst["devices"].append(device)
    if inst["profile"] is None:
        inst["profile"] = gpu_instance_profile(device.get("profile"))
    sm = memory.get("sm")
    if isinstance(sm, int):
        inst["sm"] = (inst["sm"] or 0) + sm
    return inst


def smi_instances(list_text: str, query_text: str) -> tuple[list[str], list[Record]]:
    """The GPUs in MIG mode (parent UUIDs) and their GPU instances, from ``nvidia-smi -L``
    and ``nvidia-smi -q`` (for those GPUs, or all)."""
    listed = parse_list(list_text)
    mig_gpus: list[str] = []
    out: list[Record] = []
    for gpu in parse_query(query_text):
        uuid = gpu.get("uuid")
        if not uuid or (gpu.get("mig") or "").casefold() != "enabled":
            continue
        mig_gpus.append(uuid)
        names = {index: (profile, mig) for index, profile, mig in listed.get(uuid, [])}
        instances: dict[int, Record] = {}
        for d in gpu["devices"]:
            if d.get("gi") is None or d.get("index") is None:
                continue
            profile, mig_uuid = names.get(d["index"], (None, None))
            device = {"index": d["index"], "ci": d.get("ci"), "uuid": mig_uuid, "profile": profile}
            _add_device(instances, uuid, d["gi"], device, d)
        for p in gpu["processes"]:
            inst = instances.get(p.get("gi"))
            if inst is not None and p.get("pid") is not None:
                inst["pids"].append(p["pid"])
        out.extend(instances[gi] for gi in sorted(instances))
    return mig_gpus, out


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def nvml_instances(
    nvml: Any, processes: Callable[[Any, Any], list[tuple[int, Any]]]
) -> tuple[list[str], list[Record], list[str]]:
    """The GPUs in MIG mode (parent UUIDs), their GPU instances, and what could not be
    read (``"GPU-...: why"``), through NVML. ``processes(nvml, handle)``: the compute
    processes on a handle (the agent's ``nvml_compute_processes``), asked of each MIG
    device handle, as NVML answers per instance."""
    mig_gpus: list[str] = []
    out: list[Record] = []
    problems: list[str] = []
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            current = nvml.nvmlDeviceGetMigMode(h)[0]
        except nvml.NVMLError:
            continue  # no MIG on this board (NOT_SUPPORTED), or the GPU is unreadable
        if current != MIG_ENABLED:
            continue
        try:
            parent = _text(nvml.nvmlDeviceGetUUID(h))
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(h)
        except nvml.NVMLError as e:
            problems.append(f"GPU {i}: {e}")
            continue
        mig_gpus.append(parent)
        instances: dict[int, Record] = {}
        for slot in range(slots):
            try:
                m = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
            except nvml.NVMLError:
                continue  # NOT_FOUND: an empty slot
            try:
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(m))
                ci = int(nvml.nvmlDeviceGetComputeInstanceId(m))
                name = _text(nvml.nvmlDeviceGetName(m))
                mig_uuid = _text(nvml.nvmlDeviceGetUUID(m))
                memory = nvml.nvmlDeviceGetMemoryInfo(m)
                pids = [pid for pid, _ in processes(nvml, m)]
            except nvml.NVMLError as e:
                problems.append(f"{parent} MIG device {slot}: {e}")
                continue
            profile = name.rsplit("MIG ", 1)[1].strip() if "MIG " in name else None
            facts = {
                "total_mib": int(memory.total) >> 20,
                "used_mib": int(memory.used) >> 20,
                "free_mib": int(memory.free) >> 20,
                "sm": _sm_count(nvml, m),
            }
            device = {"index": slot, "ci": ci, "uuid": mig_uuid, "profile": profile}
            inst = _add_device(instances, parent, gi, device, facts)
            inst["pids"].extend(p for p in pids if p not in inst["pids"])
        if not instances and not problems:
            problems.append(f"{parent}: no MIG device could be opened")
        out.extend(instances[gi] for gi in sorted(instances))
    return mig_gpus, out, problems


def _sm_count(nvml: Any, handle: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except (nvml.NVMLError, AttributeError):
        return None
