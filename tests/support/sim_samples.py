"""The simulated CT200 sampled in process: its nvidia-smi output at a scenario time, read by
the real parsers into a ``HostSample``."""

from __future__ import annotations

from gpumon.backends.model import HostSample
from gpumon.backends.parsers import (
    PROCESS_FIELDS,
    QUERY_FIELDS,
    parse_compute_apps,
    parse_query_gpu,
)
from gpumon.backends.sim import SimSettings, smi, wall_time


def sim_printers(settings: SimSettings) -> tuple[smi.Printer, smi.Printer]:
    """The GPU and the compute-process printers of the simulated nvidia-smi."""
    gpus = smi.parse_args(
        [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    procs = smi.parse_args(
        [f"--query-compute-apps={','.join(PROCESS_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    return smi.Printer(gpus, settings), smi.Printer(procs, settings)


def sim_sample(
    printers: tuple[smi.Printer, smi.Printer], settings: SimSettings, t: float
) -> HostSample:
    """The sample of host "ct200" at scenario time ``t``; every line must parse."""
    wall = wall_time(settings, t)
    parsed = parse_query_gpu(printers[0].gpu_round(t, wall))
    assert parsed.skipped == 0 and len(parsed.gpus) == 8
    procs = parse_compute_apps(printers[1].process_round(t, wall)).processes
    return HostSample("ct200", wall, None, parsed.gpus, procs)
