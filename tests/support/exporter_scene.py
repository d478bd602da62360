"""One fixed scene for the exporter's golden page: the simulated CT200 of scenario ``mig`` at
scenario time 30 s (GPU 7 in MIG mode, its three GPU instances read as the agent reads
nvidia-smi's), seen 2 s later by a monitor on a frozen clock, with two OOM alerts on GPU 6
and a vLLM 0.34.0 server on port 8000 (its captured page, two engines making 200 tokens/s
each), with the accounting on: the scene's samples at 28 s and 30 s accounted (GPU 0's
energy counter rising 1200 J, measured; the others power x time). Shared by
``scripts/capture/exporter_golden.py`` (which writes the golden file) and the test that
compares the exporter's page with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from prometheus_client import generate_latest

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config import HostConfig
from gpumon.backends.exporter.metrics import (
    GpumonCollector,
    OomCounter,
    UsageCounts,
    registry_for,
)
from gpumon.backends.model import Health, HostSample
from gpumon.backends.monitor import demo_settings, make_monitor
from gpumon.backends.usage import Tally

from sim_samples import sim_mig_sample
from vllm_trackers import busy


def exporter_page() -> bytes:
    """The exporter's ``/metrics`` body for the scene, as ``MetricsServer`` serves it."""
    settings = demo_settings("mig", demo_time=30, frozen=True)
    sample = sim_mig_sample(settings, 30.0)
    now = [sample.time]  # the monitor's clock: the sample comes, then 2 s pass
    monitor = make_monitor(
        HostConfig(name="ct200", kind="local"), record=False, clock=lambda: now[0]
    )
    monitor.ingest_sample(sample)
    now[0] += 2.0
    monitor.workloads.vllm[8000] = busy(8000, now[0])
    ooms = OomCounter()
    ooms.attach(monitor)
    for _ in range(2):
        monitor.alerts.raise_alert("cuda_oom", Health.CRITICAL, "CUDA OOM", gpu=6, job="drafter")
    usage = _accounted(sim_mig_sample(settings, 28.0), sample)
    return generate_latest(registry_for(GpumonCollector(lambda: [monitor], ooms, usage)))


def _accounted(before: HostSample, after: HostSample) -> Callable[[], list[UsageCounts]]:
    """The accounting's counters after ``before`` and ``after`` (GPU 0 given an energy
    counter that rose 1200 J between them), as ``Runtime`` hands them to the exporter."""
    tally = Tally(AlertRules(), watched=200)
    for sample, mj in ((before, 4_000_000_000), (after, 4_001_200_000)):
        gpus = (replace(sample.gpus[0], energy_mj=mj), *sample.gpus[1:])
        sample = replace(sample, gpus=gpus)
        tally.add(sample, sample.processes, {}, 5.0)
    owners = {(o.container, o.user, o.job): s for o, s in tally.owner_s.items()}
    return lambda: [UsageCounts("ct200", tally.joules, owners)]
