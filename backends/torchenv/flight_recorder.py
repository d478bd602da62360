"""PyTorch's collective flight recorder as a running job has it set up: the variables of
its environment that turn it on and say where its dumps go (read from
``/proc/PID/environ`` on the target, read-only), and the dump files it already wrote.

Names and defaults as PyTorch's source has them (docs/formats.md 8): the dump file of a
rank is the prefix followed by the rank, ``TORCH_FR_DUMP_TEMP_FILE`` or the older
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, else the writer's default, which moved between
releases: ``$XDG_CACHE_HOME`` (else ``$HOME/.cache``) ``/torch/comm_lib_trace_rank_`` in
``torch/csrc/distributed/c10d/FlightRecorder.cpp`` at ad55c3b (2.13),
``$HOME/.cache/torch/nccl_trace_rank_`` and ``/tmp/nccl_trace_rank_`` before it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpumon.backends import untrusted
from gpumon.backends.transport.base import Transport

__all__ = [
    "BUFFER_VARS",
    "DUMP_VARS",
    "FrSetup",
    "default_prefixes",
    "job_setups",
]

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # entries per rank
DUMP_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")  # the prefix
ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
PIPE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
_READ = (*BUFFER_VARS, *DUMP_VARS, ON_TIMEOUT, PIPE, "HOME", "XDG_CACHE_HOME", "RANK")

# Each PID's variables of _READ (argv[1]: the names, comma-separated), one line of JSON:
# {"PID": {"NAME": "value", ...}} or {"PID": {"error": "..."}} (gone, not readable).
_ENVIRON = """
import json, sys
names, out = set(sys.argv[1].split(",")), {}
for pid in sys.argv[2:]:
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            raw = f.read(1 << 20)
    except OSError as e:
        out[pid] = {"error": e.strerror or type(e).__name__}
        continue
    env = {}
    for item in raw.split(b"\\0"):
        name, sep, value = item.partition(b"=")
        name = name.decode("utf-8", "replace")
        if sep and name in names:
            env[name] = value.decode("utf-8", "replace")
    out[pid] = env
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class FrSetup:
    """One process's flight-recorder setup, from its environment (``error``: unreadable)."""

    pid: int
    env: Mapping[str, str]
    error: str | None = None

    @property
    def buffer(self) -> tuple[str, int] | None:
        """(the variable, its entries) that sizes the ring buffer; None when unset."""
        for name in BUFFER_VARS:
            value = self.env.get(name)
            if value is not None:
                try:
                    return name, int(value)
                except ValueError:
                    return name, 0
        return None

    @property
    def on(self) -> bool:
        return (self.buffer or ("", 0))[1] > 0

    @property
    def dumps_on_timeout(self) -> bool:
        return self.env.get(ON_TIMEOUT, "").strip().lower() in {"1", "true", "yes", "y", "on"}

    @property
    def prefix(self) -> tuple[str, str] | None:
        """(the variable, the prefix) the job set; None: PyTorch's default applies."""
        for name in DUMP_VARS:
            value = self.env.get(name)
            if value:
                return name, value
        return None

    def prefixes(self) -> list[str]:
        """Where this process's dumps may be: its prefix, else every default PyTorch has."""
        chosen = self.prefix
        return [chosen[1]] if chosen else default_prefixes(self.env)


def default_prefixes(env: Mapping[str, str]) -> list[str]:
    """The default dump prefixes of PyTorch's releases, newest first, for a process with
    ``env`` (its HOME and XDG_CACHE_HOME; PyTorch reads HOME with /tmp as its default)."""
    home = env.get("HOME") or "/tmp"
    cache = env.get("XDG_CACHE_HOME") or f"{home}/.cache"
    out = [
        f"{cache}/torch/comm_lib_trace_rank_",
        f"{home}/.cache/torch/comm_lib_trace_rank_",
        f"{home}/.cache/torch/nccl_trace_rank_",
        "/tmp/nccl_trace_rank_",
    ]
    return list(dict.fromkeys(out))


async def job_setups(
    transport: Transport, python: str, pids: Sequence[int], timeout: float
) -> list[FrSetup]:
    """Each PID's setup, read by the target's ``python``. Raises RuntimeError (the script
    failed), TimeoutError, TransportError."""
    if not pids:
        return []
    argv = [python, "-c", _ENVIRON, ",".join(_READ), *map(str, pids)]
    result = await transport.run(argv, timeout=timeout)
    if result.exit_code is None:
        raise TimeoutError
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise RuntimeError(
            f"cannot read the job's environment with {python}: "
            + (said[-1] if said else f"exit {result.exit_code}")
        )
    found = untrusted.loads(result.stdout)
    out = []
    for pid in pids:
        item = found.get(str(pid)) if isinstance(found, dict) else None
        if not isinstance(item, dict):
            out.append(FrSetup(pid, {}, "not answered"))
        elif "error" in item:
            out.append(FrSetup(pid, {}, str(item["error"])))
        else:
            out.append(FrSetup(pid, {str(k): str(v) for k, v in item.items()}))
    return out


def env_line(name: str, value: str) -> str:
    """The line to add to the job's ``env`` table in the config."""
    return f"{name} = {json.dumps(value)}"


def dump_dirs(setups: Sequence[FrSetup]) -> list[str]:
    """The folders the dumps go to (each process's prefix's folder), once each."""
    return list(dict.fromkeys(os.path.dirname(s.prefixes()[0]) or "." for s in setups))
