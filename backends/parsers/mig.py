"""The agent's MIG records (``remote.mig``: one per GPU instance) into ``MigInstance``s.

The records come from the target: a key missing or of the wrong type becomes None (a
count below 0 too), a record without its GPU instance id is dropped, and text is made
printable and bounded. At most ``MAX_INSTANCES`` are kept (a GPU has at most 7 GPU
instances; 8 GPUs 56)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpumon.backends.model import MigDevice, MigInstance
from gpumon.backends.untrusted import printable

MAX_INSTANCES = 64
MAX_PIDS = 256  # processes kept per instance


def _int(raw: Mapping[str, Any], key: str) -> int | None:
    v = raw.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _text(raw: Mapping[str, Any], key: str, limit: int = 80) -> str | None:
    v = raw.get(key)
    return printable(v[:limit]) if isinstance(v, str) and v else None


def _device(raw: object) -> MigDevice | None:
    if not isinstance(raw, Mapping):
        return None
    return MigDevice(_int(raw, "index"), _int(raw, "ci"), _text(raw, "uuid"), _text(raw, "profile"))


def instance(raw: Mapping[str, Any]) -> MigInstance | None:
    """One GPU instance from its record; None without a GPU instance id."""
    gi = _int(raw, "gi")
    if gi is None:
        return None
    devices = raw.get("devices")
    pids = raw.get("pids")
    return MigInstance(
        gpu_uuid=_text(raw, "gpu"),
        gpu_instance_id=gi,
        profile=_text(raw, "profile"),
        memory_total_mib=_int(raw, "total_mib"),
        memory_used_mib=_int(raw, "used_mib"),
        memory_free_mib=_int(raw, "free_mib"),
        sm_count=_int(raw, "sm"),
        devices=tuple(
            d for d in map(_device, devices if isinstance(devices, list) else []) if d is not None
        ),
        pids=tuple(
            p
            for p in (pids if isinstance(pids, list) else [])[:MAX_PIDS]
            if isinstance(p, int) and not isinstance(p, bool) and p > 0
        ),
    )


def parse_mig_records(records: Sequence[Mapping[str, Any]]) -> tuple[MigInstance, ...]:
    """The GPU instances of the records, in order (at most ``MAX_INSTANCES``)."""
    out = [i for i in map(instance, records[:MAX_INSTANCES]) if i is not None]
    return tuple(out)


def mig_record(inst: MigInstance) -> dict[str, Any]:
    """``inst`` as the agent's record (``remote.mig``), which ``instance`` reads back: how a
    flight recording keeps it."""
    return {
        "gpu": inst.gpu_uuid,
        "gi": inst.gpu_instance_id,
        "profile": inst.profile,
        "total_mib": inst.memory_total_mib,
        "used_mib": inst.memory_used_mib,
        "free_mib": inst.memory_free_mib,
        "sm": inst.sm_count,
        "devices": [
            {"index": d.index, "ci": d.compute_instance_id, "uuid": d.uuid, "profile": d.profile}
            for d in inst.devices
        ],
        "pids": list(inst.pids),
    }
