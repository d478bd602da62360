"""The simulated Proxmox host's ``/proc`` for the simulator's GPU PIDs.

The host-side collector (``remote.host_procs``) reads ``/proc/<pid>/`` of the PIDs that
nvidia-smi lists; the simulator's are made up, so ``write_proc_tree`` writes what a real
Proxmox host would show for each under a directory of its own (``proc`` option of the
collector): ``cgroup`` (``0::/lxc/<ct>/ns``), ``status`` (``NSpid`` host and inner PID,
``Uid`` 100000: root in an unprivileged CT), ``uid_map``, ``stat``, ``cmdline``, and the
``stat`` file with ``btime``.
"""

from __future__ import annotations

import shutil
from collections.abc import Container, Iterable, Sequence
from pathlib import Path

from gpumon.backends.sim.scenario import host_process, simulated_pids, vllm_server_processes

HOST_UID = 100000  # root inside an unprivileged container


def write_proc_tree(
    root: Path,
    boot_time: float,
    sglang_ports: Sequence[int] = (),
    vllm_ports: Sequence[int] = (),
) -> Path:
    """Write the tree under ``root`` (created); returns ``root``. ``sglang_ports``,
    ``vllm_ports``: the demo's servers' ports, which their commands name
    (``scenario.host_process``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  1 0 1 1 0 0 0 0 0 0\nbtime {int(boot_time)}\n")
    for pid in simulated_pids():
        proc = host_process(pid, sglang_ports, vllm_ports)
        if proc is None:
            continue
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "cgroup").write_text(f"0::/lxc/{proc.container}/ns/user.slice\n")
        (d / "status").write_text(
            f"Name:\t{proc.command.split()[0].rsplit('/', 1)[-1]}\n"
            f"Uid:\t{HOST_UID}\t{HOST_UID}\t{HOST_UID}\t{HOST_UID}\n"
            f"NSpid:\t{pid}\t{proc.pid}\n"
        )
        (d / "uid_map").write_text(f"         0     {HOST_UID}      65536\n")
        name = proc.command.split()[0].rsplit("/", 1)[-1]
        # utime stime grow with the PID so CPU % differs per process; starttime 100 s in
        fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "0", "0", "0", "0"]
        fields += ["0", "0", "0", "0", "20", "0", "1", "0", "10000", "100000000", "25600"]
        (d / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")
        (d / "cmdline").write_bytes(proc.command.replace(" ", "\0").encode() + b"\0")
    return root


def write_ct_proc_tree(
    root: Path, vllm_ports: Sequence[int] = (), stopped: Container[int] = ()
) -> Path:
    """CT 200's own ``/proc`` as far as the agent's server discovery reads it
    (``remote.agent.scan_server_processes``: ``cmdline`` and ``stat``'s PPID), under
    ``root`` (created): the vllm scenario's servers (``scenario.vllm_server_processes``)
    but those ``stopped`` (indexes); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for proc in vllm_server_processes(vllm_ports, stopped):
        d = root / str(proc.pid)
        d.mkdir(exist_ok=True)
        name = proc.argv[0].rsplit("/", 1)[-1][:15]  # the kernel's comm: 15 bytes
        fields = ["S", str(proc.ppid), str(proc.pid), str(proc.pid), "0", "-1", "4194560"]
        (d / "stat").write_text(f"{proc.pid} ({name}) " + " ".join(fields) + "\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in proc.argv) + b"\0")
    return root


def remove_processes(root: Path, pids: Iterable[int]) -> None:
    """``pids`` end: their directories leave the ``/proc`` under ``root`` (as a process's
    leaves the kernel's when it exits); one not there is no error."""
    for pid in pids:
        shutil.rmtree(root / str(pid), ignore_errors=True)
