"""Files in the simulator's state dir (``GPUMON_SIM_DIR``) that change a running simulation.

``restarts.json`` holds ``{"restarts": [R, ...], "stops": [S, ...], "kills": [{"pid": P,
"at": K}, ...]}``: scenario times at which the drafter job was stopped (SIGTERM) or was
restarted (``scenario.drafter_run``), and which simulated process ``sim.kill`` killed when
(the foreign jupyter by its host PID, a vLLM server's API server by its PID in CT 200).
The restart action appends to it with ``record_restart``; a looping simulated nvidia-smi
picks the change up on its next round.

``kmsg`` is the simulated kernel log (``scenario.kernel_lines``) the demo's agent reads
instead of this machine's /dev/kmsg: ``write_kernel_log`` appends the lines due by a
scenario time that it does not hold yet (the transport at start: the past; the looping
nvidia-smi each round: what happens while it runs).

``ct-proc`` is CT 200's own ``/proc`` as far as the agent's server discovery reads it
(``host_proc.write_ct_proc_tree``); ``sim.kill`` takes a stopped server's processes out.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from gpumon.backends.sim.scenario import Kill, SimSettings, kernel_lines

RESTARTS_FILE = "restarts.json"
KERNEL_LOG_FILE = "kmsg"
CT_PROC_DIR = "ct-proc"


def kernel_log_path(settings: SimSettings) -> Path | None:
    """The simulated kernel log's file (None without a state dir)."""
    return Path(settings.state_dir, KERNEL_LOG_FILE) if settings.state_dir else None


def write_kernel_log(settings: SimSettings, t: float) -> None:
    """Append the kernel lines due by scenario time ``t`` that the file does not hold
    yet (a new file when there is none); nothing without a state dir."""
    path = kernel_log_path(settings)
    if path is None:
        return
    try:
        held = set(path.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        held = set()
    new = [line for line in kernel_lines(settings, t) if line not in held]
    if new or not path.exists():
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(f"{line}\n" for line in new))


class _State(NamedTuple):
    restarts: tuple[float, ...] = ()
    stops: tuple[float, ...] = ()
    kills: tuple[Kill, ...] = ()


def _times(items: object) -> tuple[float, ...]:
    """The finite numbers of a list, sorted; anything else means none."""
    if not isinstance(items, list):
        return ()
    numbers = [x for x in items if isinstance(x, int | float) and not isinstance(x, bool)]
    return tuple(sorted(float(x) for x in numbers if math.isfinite(x)))


def _kills(items: object) -> tuple[Kill, ...]:
    """``[{"pid": PID, "at": T}, ...]``, by time; an entry without both is left out."""
    if not isinstance(items, list):
        return ()
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        pid, at = item.get("pid"), _times([item.get("at")])
        if isinstance(pid, int) and not isinstance(pid, bool) and at:
            out.append(Kill(pid, at[0]))
    return tuple(sorted(out, key=lambda k: (k.at, k.pid)))


def _read(state_dir: str | None) -> _State:
    """What ``state_dir/restarts.json`` records; a missing, unreadable or malformed file
    (or key) means none. A bare list is the restarts."""
    if not state_dir:
        return _State()
    try:
        data = json.loads(Path(state_dir, RESTARTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return _State()
    if isinstance(data, list):
        data = {"restarts": data}
    if not isinstance(data, dict):
        return _State()
    restarts, stops = _times(data.get("restarts")), _times(data.get("stops"))
    return _State(restarts, stops, _kills(data.get("kills")))


def read_restarts(state_dir: str | None) -> tuple[float, ...]:
    """Restart times (scenario seconds, sorted) from ``state_dir/restarts.json``."""
    return _read(state_dir).restarts


def read_stops(state_dir: str | None) -> tuple[float, ...]:
    """Times (scenario seconds, sorted) at which the drafter was stopped."""
    return _read(state_dir).stops


def write_restarts(
    state_dir: str,
    restarts: tuple[float, ...],
    stops: tuple[float, ...] | None = None,
    kills: tuple[Kill, ...] | None = None,
) -> None:
    """Replace ``state_dir/restarts.json`` atomically (a running simulator may read it)."""
    state = _read(state_dir)
    stops = state.stops if stops is None else stops
    kills = state.kills if kills is None else kills
    path = Path(state_dir, RESTARTS_FILE)
    tmp = path.with_name(f".{RESTARTS_FILE}.{os.getpid()}.tmp")
    data = {
        "restarts": sorted(restarts),
        "stops": sorted(stops),
        "kills": [{"pid": k.pid, "at": k.at} for k in sorted(kills, key=lambda k: (k.at, k.pid))],
    }
    text = json.dumps(data) + "\n"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def with_state(settings: SimSettings) -> SimSettings:
    """``settings`` with ``restarts``, ``stops`` and ``kills`` as recorded in its state dir."""
    if not settings.state_dir:
        return settings
    now = _read(settings.state_dir)
    if now == (settings.restarts, settings.stops, settings.kills):
        return settings
    return replace(settings, restarts=now.restarts, stops=now.stops, kills=now.kills)


def record_restart(state_dir: str, at: float) -> tuple[float, ...]:
    """Add a restart at scenario time ``at``; returns all restarts now recorded."""
    restarts = tuple(sorted((*read_restarts(state_dir), at)))
    write_restarts(state_dir, restarts)
    return restarts


def record_stop(state_dir: str, at: float) -> None:
    """The drafter was stopped at scenario time ``at``: its GPUs release their memory."""
    state = _read(state_dir)
    write_restarts(state_dir, state.restarts, (*state.stops, at))


def record_kill(state_dir: str, pid: int, at: float) -> None:
    """The simulated process ``pid`` was killed at scenario time ``at`` (``sim.kill``): the
    foreign jupyter gives GPU 6 its memory back, a vLLM server is gone (``scenario``)."""
    state = _read(state_dir)
    write_restarts(state_dir, state.restarts, kills=(*state.kills, Kill(pid, at)))


def ct_proc_path(settings: SimSettings) -> Path | None:
    """CT 200's own ``/proc`` as the simulator writes it (``host_proc.write_ct_proc_tree``):
    in the state dir, where ``sim.kill`` takes a killed server's processes out of it
    (None without a state dir)."""
    return Path(settings.state_dir, CT_PROC_DIR) if settings.state_dir else None
