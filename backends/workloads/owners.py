"""Who owns each GPU, in the words of the dashboard's owner column: a configured job's
name, ``sglang:PORT``, ``vllm:PORT``, else the program of its biggest process. One
attribution for the rows (``tui/views/workload_cells.gpu_owners`` colours it) and for the
accounting (``backends/usage``: GPU-hours per job)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpumon.backends.model import GpuSample, HostSample
from gpumon.backends.parsers.processes import foreign
from gpumon.backends.untrusted import printable
from gpumon.backends.workloads.trackers import JobTracker, SglangTracker

__all__ = ["SGLANG_PROCESS_MARK", "OwnedBy", "gpu_owned_by"]

SGLANG_PROCESS_MARK = "sglang"  # SGLang's GPU processes are named sglang::scheduler_TP<n>


@dataclass(frozen=True, slots=True)
class OwnedBy:
    """A GPU's owner: its words (``text``), what it is (``kind``: ``job``, ``sglang``,
    ``vllm``, or ``program`` for a GPU no job or server owns) and the job's name or the
    server's port (``key``; the program's name for ``program``)."""

    text: str
    kind: str
    key: str | int


def gpu_owned_by(
    sample: HostSample | None,
    jobs: Mapping[str, JobTracker],
    servers: Mapping[int, SglangTracker],
    watched: int | None = None,
    vllm: Mapping[int, tuple[int, ...]] | None = None,
) -> dict[int, OwnedBy]:
    """GPU index -> its owner.

    vLLM servers own the GPUs ``vllm`` gives them (port -> GPUs: ``Workloads.vllm_gpus``,
    from their process trees or their processes' names), named ``vllm:PORT`` as SGLang's
    are ``sglang:PORT``.

    Jobs own the GPUs their config names (``gpus``). SGLang servers, sorted by port, map
    onto the GPUs that run an ``sglang`` process, in index order, when there are as many of
    those as servers; else onto every GPU in order when there are as many servers as GPUs
    (server i <-> GPU i, the usual one-server-per-GPU layout). Otherwise servers own
    nothing: a guess would be worse than no answer. A job wins over a server. Where some
    GPU has an owner, a GPU neither owns is named by the program of its biggest process
    (``train.target``), never by another container's (``watched``: the CT gpumon watches;
    those are foreign holders); a host without jobs or servers has no owners.
    """
    owners: dict[int, OwnedBy] = {}
    gpus = sample.gpus if sample is not None else ()
    if servers and gpus:
        ports = sorted(servers)
        hosting = [g.index for g in gpus if _runs_sglang(sample, g)]
        if len(hosting) != len(ports):
            hosting = [g.index for g in gpus] if len(gpus) == len(ports) else []
        for port, index in zip(ports, hosting, strict=False):
            owners[index] = OwnedBy(f"sglang:{port}", "sglang", port)
    for port, indexes in (vllm or {}).items():
        for index in indexes:
            owners[index] = OwnedBy(f"vllm:{port}", "vllm", port)
    for job in jobs.values():
        for index in job.gpus:
            owners[index] = OwnedBy(printable(job.name), "job", job.name)
    for gpu in gpus if owners else ():  # the rest, by program ("train.target")
        if gpu.index not in owners and (name := _program_on(sample, gpu, watched)):
            owners[gpu.index] = OwnedBy(name, "program", name)
    return owners


def _program_on(sample: HostSample | None, gpu: GpuSample, watched: int | None) -> str | None:
    """The program of the biggest process on ``gpu`` that is not another container's or
    the host's (those are foreign holders, flagged apart); None when none is named."""
    if sample is None:
        return None
    procs = sample.processes_for(gpu)
    others = {id(p) for p in foreign(procs, watched)}
    named = [p for p in procs if id(p) not in others and p.short_name]
    if not named:
        return None
    top = max(named, key=lambda p: p.memory_mib or 0)
    return printable(top.short_name or "")


def _runs_sglang(sample: HostSample | None, gpu: GpuSample) -> bool:
    if sample is None:
        return False
    return any(SGLANG_PROCESS_MARK in (p.name or "") for p in sample.processes_for(gpu))
