"""The simulated CT200 sampled in process: its nvidia-smi output at a scenario time, read by
the real parsers into a ``HostSample`` (``gpumon.backends.sim.past``)."""

from __future__ import annotations

from gpumon.backends.model import HostSample
from gpumon.backends.sim import SimSettings
from gpumon.backends.sim.past import Printers, sample_at, sim_printers

__all__ = ["sim_printers", "sim_sample"]


def sim_sample(printers: Printers, settings: SimSettings, t: float) -> HostSample:
    """The sample of host "ct200" at scenario time ``t``; every line must parse."""
    sample = sample_at(printers, settings, t, "ct200")
    assert sample.skipped_lines == 0 and len(sample.gpus) == 8
    return sample
