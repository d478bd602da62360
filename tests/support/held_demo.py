"""A demo whose scenario clock waits for the test (``--demo-hold``).

gpumon treats an event it reads live (the drafter's CUDA OOM in a poll of its log after
the first) apart from one found in the log's backlog at start (history: never restarted,
toasted or paged). A test that needs the event live used to start the demo a few seconds
before it and hope gpumon's first read came first; on a loaded machine it sometimes did
not. Held, the demo's clock (every part of the simulator: nvidia-smi, the drafter, the
SGLang servers, ``kill``) stays at its start time until the test has seen what it needs,
then runs on from there: the event comes as many scenario seconds after the release on a
loaded machine as on an idle one.

    held = HeldDemo(tmp_path)
    monitor = make_monitor(host, held.settings(demo_time=48, speed=2.0))
    ...
    await until(lambda: drafter_read(monitor), 60, "the drafter's log read")
    held.release()            # the OOM comes 6 s from now, read live
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from gpumon.backends.monitor import HostMonitor, demo_settings
from gpumon.backends.notify.hub import SETTLE_SAMPLES
from gpumon.backends.sim import SimSettings

__all__ = ["HeldDemo", "drafter_read", "exporter_read_drafter", "hub_counts"]


class HeldDemo:
    """The hold file of one demo (in ``folder``, the test's own) and its release."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "demo-go"

    def settings(
        self, demo_time: float, speed: float = 1.0, scenario: str = "training-oom"
    ) -> SimSettings:
        """A demo held at ``demo_time`` (``demo_settings``'s other arguments as given)."""
        return demo_settings(scenario, demo_time=demo_time, speed=speed, hold=str(self.file))

    @property
    def args(self) -> list[str]:
        """The command-line options that hold a ``gpumon`` command's demo on this file."""
        return ["--demo-hold", str(self.file)]

    def release(self) -> None:
        """Let the clock go: it runs on from its start time, from now."""
        self.file.touch(exist_ok=False)  # once: a second touch would move the release


def drafter_read(monitor: HostMonitor) -> bool:
    """gpumon has read the simulated drafter's log (its step is known): what the log gets
    from here on is read live, not as the backlog of the first read."""
    job = monitor.workloads.jobs.get("drafter")
    return job is not None and job.step is not None


def hub_counts(monitor: HostMonitor) -> bool:
    """The notify hub counts ``monitor``'s alerts now (``NotifyHub._settled``: its third
    sample came once every source answered; the hub's time-out only settles it sooner)."""
    return monitor.samples >= SETTLE_SAMPLES and monitor.first_rounds_done()


def exporter_read_drafter(port: int) -> bool:
    """The exporter of a ``gpumon watch`` on 127.0.0.1:``port`` says the demo drafter's
    step (``drafter_read`` from outside the process); False while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return False
    return 'gpumon_job_step{host="demo",job_name="drafter"}' in text
