"""A GPU process's environment, read from ``/proc/PID/environ`` only when someone asks
(the detail view's ``e``) and scrubbed as a bundle is (``scrub.Scrubber``): the values of
variables whose names say they hold a secret, and the shapes of secrets anywhere. What an
on-call checks on a hung rank comes first: which GPUs it sees, NCCL's and PyTorch's
distributed settings, its rank."""

from __future__ import annotations

from collections.abc import Iterable

from gpumon.backends.model import GpuProcess
from gpumon.backends.transport.base import Transport, TransportError

from .scrub import Scrubber, env_secrets

__all__ = ["ENV_SHOWN", "environment_lines", "read_environment"]

# Shown: these names, and the names that start with these prefixes (in this order).
ENV_SHOWN = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "OMP_NUM_THREADS",
)
ENVIRON_MAX = 1 << 20  # the kernel's own bound on argv + environ is far below
_READ = 'tr "\\0" "\\n" < "$1"'  # one variable a line: the transport keeps no NUL


def _rank(name: str) -> int | None:
    for k, shown in enumerate(ENV_SHOWN):
        if name == shown or (shown.endswith("_") and name.startswith(shown)):
            return k
    return None


def environment_lines(lines: Iterable[str]) -> list[str]:
    """``NAME=value`` lines of the variables ``ENV_SHOWN`` names, in its order, scrubbed;
    how many others there are on the last line."""
    env: dict[str, str] = {}
    last = None
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name and " " not in name:
            env[name], last = value, name
        elif last is not None:  # a value with a newline in it
            env[last] += "\n" + line
    scrub = Scrubber.of(env_secrets(env))
    ranked = sorted((r, n) for n in env if (r := _rank(n)) is not None)
    out = [scrub.text(f"{n}={env[n]}").replace("\n", "\\n") for _, n in ranked]
    if not out:
        out.append("no CUDA_VISIBLE_DEVICES, NCCL_* or TORCH_* variable set")
    others = len(env) - len(ranked)
    if others:
        out.append(f"({others} other variable{'s' * (others != 1)} not shown)")
    return out


async def read_environment(
    transport: Transport,
    p: GpuProcess,
    *,
    host_access: bool,
    host_proc: str = "/proc",
    timeout: float = 10.0,
) -> list[str]:
    """``p``'s environment in lines to show (``environment_lines``), or one line saying
    why it could not be read. Read inside the watched container by its PID, else on the
    Proxmox host by its host PID where gpumon has host access."""
    if p.pid is not None:
        path, on_host = f"/proc/{p.pid}/environ", False
    elif p.host_pid is not None and host_access:
        path, on_host = f"{host_proc}/{p.host_pid}/environ", True
    else:
        return ["environment not readable from here: the process is not in this container"]
    argv = ["sh", "-c", _READ, "sh", path]
    try:
        res = await transport.run(argv, timeout=timeout, on_host=on_host, max_bytes=ENVIRON_MAX)
    except TransportError as e:
        return [f"environment not read: {e}"]
    if res.exit_code != 0:
        said = res.stderr.strip().splitlines()
        why = said[-1] if said else f"exit {res.exit_code}"
        return [f"environment not read: {why}"]
    return environment_lines(res.stdout.splitlines())
