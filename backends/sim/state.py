"""Files in the simulator's state dir (``GPUMON_SIM_DIR``) that change a running simulation.

``restarts.json`` holds ``{"restarts": [R, ...]}``: scenario times at which the drafter job
was restarted (``scenario.drafter_run``). The restart action appends to it with
``record_restart``; a looping simulated nvidia-smi picks the change up on its next round.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

from .scenario import SimSettings

RESTARTS_FILE = "restarts.json"


def read_restarts(state_dir: str | None) -> tuple[float, ...]:
    """Restart times (scenario seconds, sorted) from ``state_dir/restarts.json``.

    The file holds ``{"restarts": [75.0, ...]}`` (a bare list also works). A missing,
    unreadable or malformed file means no restarts.
    """
    if not state_dir:
        return ()
    try:
        data = json.loads(Path(state_dir, RESTARTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    items = data.get("restarts") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return ()
    numbers = [x for x in items if isinstance(x, int | float) and not isinstance(x, bool)]
    return tuple(sorted(float(x) for x in numbers if math.isfinite(x)))


def write_restarts(state_dir: str, restarts: tuple[float, ...]) -> None:
    """Replace ``state_dir/restarts.json`` atomically (a running simulator may read it)."""
    path = Path(state_dir, RESTARTS_FILE)
    tmp = path.with_name(f".{RESTARTS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"restarts": sorted(restarts)}) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def with_state(settings: SimSettings) -> SimSettings:
    """``settings`` with ``restarts`` as recorded in its state dir (unchanged without one)."""
    if not settings.state_dir:
        return settings
    restarts = read_restarts(settings.state_dir)
    return settings if restarts == settings.restarts else replace(settings, restarts=restarts)


def record_restart(state_dir: str, at: float) -> tuple[float, ...]:
    """Add a restart at scenario time ``at``; returns all restarts now recorded."""
    restarts = tuple(sorted((*read_restarts(state_dir), at)))
    write_restarts(state_dir, restarts)
    return restarts
