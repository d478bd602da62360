"""``kill`` on the simulated machine (the wrapper ``sim.wrapper`` puts on its PATH).

``kill [-s SIG | -SIG] PID``: the simulator's GPU PIDs are made up, so a real ``kill``
must never see them. The foreign jupyter (``scenario.JUPYTER_PID``) can be killed: the
kill is recorded in the state dir (``state.record_kill``) and the simulated GPU 6 gets its
memory back. ``-0`` says whether a simulated process is alive. Anything else is refused
as a real ``kill`` would refuse it. Settings come from ``GPUMON_SIM_*``.
"""

from __future__ import annotations

import os
import sys
import time

from gpumon.backends.sim.scenario import (
    JUPYTER_PID,
    SimSettings,
    compute_processes,
    scenario_time,
)
from gpumon.backends.sim.state import record_kill, with_state

SIGNALS = {"0", "TERM", "KILL", "15", "9", "INT", "2"}


def main(argv: list[str]) -> int:
    args = list(argv)
    sig = "TERM"
    if args[:1] == ["-s"] and len(args) > 1:
        sig, args = args[1].upper().removeprefix("SIG"), args[2:]
    elif args and args[0].startswith("-") and args[0][1:]:
        sig, args = args[0][1:].upper().removeprefix("SIG"), args[1:]
    if sig not in SIGNALS or len(args) != 1 or not args[0].isdigit():
        print("usage: kill [-s SIGNAL | -SIGNAL] PID", file=sys.stderr)
        return 2
    pid = int(args[0])
    settings = with_state(SimSettings.from_env(os.environ))
    t = scenario_time(settings, time.time())
    if pid not in {p.pid for p in compute_processes(settings, t)}:
        print(f"kill: ({pid}) - No such process", file=sys.stderr)
        return 1
    if sig == "0":
        return 0
    if pid != JUPYTER_PID or not settings.state_dir:
        print(f"kill: ({pid}) - Operation not permitted", file=sys.stderr)
        return 1
    record_kill(settings.state_dir, t)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
