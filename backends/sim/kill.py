"""``kill`` on the simulated machine (the wrapper ``sim.wrapper`` puts on its PATH).

``kill [-s SIG | -SIG] PID``: the simulator's PIDs are made up, so a real ``kill`` must
never see them. The simulated processes it knows: the GPU processes by their host PID
(``scenario.compute_processes``) and the vLLM servers' API servers and engine cores by
their PID in CT 200 (``scenario.vllm_server_processes``, CT 200's /proc). Two of them can
be killed, the kill recorded in the state dir (``state.record_kill``: which PID, when):
the foreign jupyter (``scenario.JUPYTER_PID``: GPU 6 gets its memory back) and a vLLM
server's API server (``scenario.vllm_api_pid``, the PID its wedge's fix names: the server
is gone, its processes leave CT 200's /proc at once). ``-0`` says whether a simulated
process is alive. Anything else is refused as a real ``kill`` would refuse it: a live
process of the simulator's with "Operation not permitted", any other PID (one that
ended, one the simulator does not know) with "No such process". Settings come from
``GPUMON_SIM_*``.
"""

from __future__ import annotations

import os
import sys
import time

from gpumon.backends.sim.host_proc import remove_processes
from gpumon.backends.sim.scenario import (
    JUPYTER_PID,
    VLLM_GPUS,
    SimSettings,
    compute_processes,
    scenario_time,
    stopped_vllm_servers,
    vllm_api_pid,
    vllm_engine_pid,
)
from gpumon.backends.sim.state import ct_proc_path, record_kill, with_state

SIGNALS = {"0", "TERM", "KILL", "15", "9", "INT", "2"}


def alive_pids(settings: SimSettings, t: float) -> set[int]:
    """The PIDs of the simulated processes alive at scenario time ``t``: the GPU
    processes' host PIDs and, in scenario ``vllm``, each running server's API server and
    engine core by their PIDs in CT 200."""
    pids = {p.pid for p in compute_processes(settings, t)}
    if settings.scenario == "vllm":
        stopped = stopped_vllm_servers(settings, t)
        for k in range(len(VLLM_GPUS)):
            if k not in stopped:
                pids |= {vllm_api_pid(k), vllm_engine_pid(k)}
    return pids


def ended_by(settings: SimSettings, pid: int) -> tuple[int, ...] | None:
    """The processes a kill of ``pid`` (alive) ends, where the simulated machine lets it:
    the jupyter; a vLLM server's API server and its child, the engine core. None: refused."""
    if pid == JUPYTER_PID:
        return (pid,)
    if settings.scenario == "vllm":
        for k in range(len(VLLM_GPUS)):
            if pid == vllm_api_pid(k):
                return (pid, vllm_engine_pid(k))
    return None


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
    if pid not in alive_pids(settings, t):
        print(f"kill: ({pid}) - No such process", file=sys.stderr)
        return 1
    if sig == "0":
        return 0
    ended = ended_by(settings, pid)
    if ended is None or not settings.state_dir:
        print(f"kill: ({pid}) - Operation not permitted", file=sys.stderr)
        return 1
    record_kill(settings.state_dir, pid, t)
    proc = ct_proc_path(settings)
    if proc is not None:  # gone from CT 200's /proc at once, as a real exit is
        remove_processes(proc, ended)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
