"""Stopping the demo's CT 201 jupyter-lab from a test, as the dashboard's K does.

On the training-oom demo the jupyter that holds 6 GiB of GPU 6 is the OOM's cause and
outlives the drafter: an auto-restart waits for it to go, since the drafter needs more
than it leaves, until it is stopped (the fix's first step, "stop jupyter-lab (the
dashboard's K)"). K runs the
demo machine's ``kill`` (``sim.kill``, written into the simulator's folder, which
``tempfile.mkdtemp`` makes): a test that points the watch's temporary folder at ``tmp``
runs that same ``kill`` here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpumon.backends.sim.scenario import JUPYTER_PID

__all__ = ["stop_the_holder"]


def stop_the_holder(tmp: Path) -> None:
    """Run the demo machine's ``kill`` of CT 201's jupyter (the one simulator under ``tmp``)."""
    [kill] = tmp.glob("gpumon-sim-*/bin/kill")
    done = subprocess.run([str(kill), str(JUPYTER_PID)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
