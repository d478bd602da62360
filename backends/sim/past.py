"""The simulated machine's past, sampled in process: its nvidia-smi output at a scenario
time read by the real parsers into a ``HostSample``.

The simulator is a pure function of scenario time, so what a dashboard running since the
scenario began would have seen can be had at once. ``past_samples`` gives it to a monitor
that starts late (``--demo-time``) for a story that is a duration (the ``idle`` scenario:
GPUs held and idle for minutes), so a one-shot ``check`` sees it as a dashboard would.
"""

from __future__ import annotations

from gpumon.backends.model import HostSample
from gpumon.backends.parsers import PROCESS_FIELDS, parse_compute_apps, parse_query_gpu
from gpumon.backends.parsers.nvidia_smi import SAMPLE_FIELDS
from gpumon.backends.sim import smi
from gpumon.backends.sim.scenario import SimSettings, scenario_time, wall_time

Printers = tuple[smi.Printer, smi.Printer]


def sim_printers(settings: SimSettings) -> Printers:
    """The GPU and the compute-process printers of the simulated nvidia-smi."""
    gpus = smi.parse_args(
        [f"--query-gpu={','.join(SAMPLE_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    procs = smi.parse_args(
        [f"--query-compute-apps={','.join(PROCESS_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    return smi.Printer(gpus, settings), smi.Printer(procs, settings)


def sample_at(printers: Printers, settings: SimSettings, t: float, host: str) -> HostSample:
    """The sample of ``host`` at scenario time ``t`` (its time: the wall time of ``t``)."""
    wall = wall_time(settings, t)
    parsed = parse_query_gpu(printers[0].gpu_round(t, wall), SAMPLE_FIELDS)
    procs = parse_compute_apps(printers[1].process_round(t, wall)).processes
    return HostSample(
        host,
        wall,
        None,
        parsed.gpus,
        procs,
        skipped_lines=parsed.skipped,
        unreadable=parsed.unreadable,
    )


def past_samples(
    settings: SimSettings, host: str, until: float, seconds: float, interval: float
) -> list[HostSample]:
    """Samples every ``interval`` over the ``seconds`` before local time ``until`` (not
    before scenario time 0), oldest first, ``until`` itself left out."""
    end = scenario_time(settings, until)
    step = max(interval, 0.1) * settings.speed
    count = int(min(seconds * settings.speed, end) / step)
    printers = sim_printers(settings)
    return [sample_at(printers, settings, end - k * step, host) for k in range(count, 0, -1)]
