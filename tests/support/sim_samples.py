"""The simulated CT200 sampled in process: its nvidia-smi output at a scenario time, read by
the real parsers into a ``HostSample`` (``gpumon.backends.sim.past``)."""

from __future__ import annotations

import io
from dataclasses import replace

from gpumon.backends.model import HostSample
from gpumon.backends.parsers.mig import parse_mig_records
from gpumon.backends.remote import mig
from gpumon.backends.sim import SimSettings, smi
from gpumon.backends.sim.past import Printers, sample_at, sim_printers

__all__ = ["sim_mig_sample", "sim_printers", "sim_sample"]


def sim_sample(printers: Printers, settings: SimSettings, t: float) -> HostSample:
    """The sample of host "ct200" at scenario time ``t``; every line must parse."""
    sample = sample_at(printers, settings, t, "ct200")
    assert sample.skipped_lines == 0 and len(sample.gpus) == 8
    return sample


def sim_mig_sample(settings: SimSettings, t: float) -> HostSample:
    """``sim_sample`` of scenario ``mig`` with its GPU instances, as the agent reads them
    where NVML is not usable: the simulator's ``nvidia-smi -L`` and ``-q`` through the
    agent's parser (``remote.mig.smi_instances``)."""
    frozen = replace(settings, frozen_at=t)

    def smi_out(*args: str) -> str:
        out = io.StringIO()
        assert smi.run(smi.parse_args(list(args)), frozen, out) == 0
        return out.getvalue()

    _, records = mig.smi_instances(smi_out("-L"), smi_out("-q"))
    return replace(sim_sample(sim_printers(settings), settings, t), mig=parse_mig_records(records))
