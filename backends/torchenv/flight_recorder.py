"""PyTorch's collective flight recorder as a running job has it set up: the variables of
its environment that turn it on and say where its dumps go (read from
``/proc/PID/environ`` on the target, read-only), and the dump files it already wrote.

Names and defaults as PyTorch's source has them (docs/formats.md 8): the dump file of a
rank is the prefix followed by the rank, ``TORCH_FR_DUMP_TEMP_FILE`` or the older
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, else the writer's default, which moved between
releases: ``$XDG_CACHE_HOME`` (else ``$HOME/.cache``) ``/torch/comm_lib_trace_rank_`` in
``torch/csrc/distributed/c10d/FlightRecorder.cpp`` at ad55c3b (2.13),
``$HOME/.cache/torch/nccl_trace_rank_`` and ``/tmp/nccl_trace_rank_`` before it.

A job that set a debug pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``, ``TORCH_FR_DEBUG_INFO_PIPE_FILE``
where a backend reads that name) dumps on demand: each rank made a FIFO ``STEM<rank>.pipe``
and writes its dump to its usual file once anything is written there (``DumpPipe`` in
``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp``, 2.5 onwards; ``ask_dumps``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpumon.backends import untrusted
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.torchenv.checks import Check
from gpumon.backends.transport.base import Transport, TransportError

__all__ = [
    "BUFFER_VARS",
    "DUMP_VARS",
    "FrSetup",
    "PipeAnswer",
    "ask_dumps",
    "default_prefixes",
    "job_setups",
    "readiness_checks",
]

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # entries per rank
DUMP_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")  # the prefix
ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
# The debug pipe's stem: NCCL's name first (every release since 2.2), then the backends'
# newer common one (ProcessGroupXCCL's DumpPipe reads it); the pipe is STEM<rank>.pipe.
PIPE_VARS = ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DEBUG_INFO_PIPE_FILE")
_READ = (*BUFFER_VARS, *DUMP_VARS, ON_TIMEOUT, *PIPE_VARS, "HOME", "XDG_CACHE_HOME", "RANK")

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

    @property
    def rank(self) -> int | None:
        """The process's global rank (``RANK``, as torchrun sets it); None: not a rank."""
        value = self.env.get("RANK", "").strip()
        return int(value) if value.isdigit() else None

    @property
    def pipe(self) -> str | None:
        """The debug pipe this rank reads (``STEM<rank>.pipe``): PyTorch makes it only
        where the recorder is on, a stem is set, and for the default group's rank (the
        global one, ``RANK``); None otherwise."""
        stem = next((v for n in PIPE_VARS if (v := self.env.get(n))), None)
        if stem is None or not self.on or self.rank is None:
            return None
        return f"{stem}{self.rank}.pipe"


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


# The on-demand dump (argv[1]: seconds to wait, argv[2]: JSON [{"pipe", "dumps"}]): write
# one byte to each rank's FIFO (a file that is no FIFO is never written: it could be
# anything), then wait until one of its dump files is new (another inode, size or mtime
# than before) and its size held for one poll (torch's writer is no atomic rename).
# One line of JSON: {"PIPE": {"dump": PATH} | {"error": ...}}.
_ASK = """
import json, os, stat, sys, time
wait, asks, out, before, pending = float(sys.argv[1]), json.loads(sys.argv[2]), {}, {}, {}
def mark(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
for ask in asks:
    pipe = ask["pipe"]
    for d in ask["dumps"]:
        before[d] = mark(d)
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        out[pipe] = {"error": "no rank reads it" if e.errno == 6 else (e.strerror or str(e))}
        continue
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            out[pipe] = {"error": "not a named pipe: not written"}
            continue
        os.write(fd, b"1")
        pending[pipe] = ask["dumps"]
    except OSError as e:
        out[pipe] = {"error": e.strerror or str(e)}
    finally:
        os.close(fd)
deadline, sizes = time.monotonic() + wait, {}
while pending and time.monotonic() < deadline:
    time.sleep(0.1)
    for pipe, dumps in list(pending.items()):
        for d in dumps:
            now = mark(d)
            if now is None or now == before[d]:
                continue
            if sizes.get(d) == now[1] and now[1] > 0:
                out[pipe] = {"dump": d}
                del pending[pipe]
                break
            sizes[d] = now[1]
for pipe in pending:
    out[pipe] = {"error": "no dump within %g s" % wait}
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class PipeAnswer:
    """What one rank's debug pipe gave: the dump file it wrote, or why none."""

    rank: int
    pipe: str
    dump: str | None
    error: str | None = None


async def ask_dumps(
    transport: Transport, python: str, setups: Sequence[FrSetup], wait_s: float
) -> list[PipeAnswer]:
    """Ask every rank of ``setups`` that has a debug pipe for a dump now, and wait up to
    ``wait_s`` for the files (its usual dump file: ``prefixes()``). Empty where no rank
    has a pipe. Raises RuntimeError (the script failed), TimeoutError, TransportError."""
    ranks = {s.pipe: s for s in setups if s.error is None and s.pipe is not None}
    if not ranks:
        return []
    asks = [
        {"pipe": pipe, "dumps": [f"{p}{s.rank}" for p in s.prefixes()]} for pipe, s in ranks.items()
    ]
    argv = [python, "-c", _ASK, f"{max(wait_s, 0.0):.3f}", json.dumps(asks)]
    result = await transport.run(argv, timeout=wait_s + 5.0)
    if result.exit_code is None:
        raise TimeoutError
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise RuntimeError(
            "cannot write to the debug pipes: " + (said[-1] if said else f"exit {result.exit_code}")
        )
    found = untrusted.loads(result.stdout)
    out = []
    for pipe, s in ranks.items():
        item = found.get(pipe) if isinstance(found, dict) else None
        rank = s.rank if s.rank is not None else -1
        if not isinstance(item, dict):
            out.append(PipeAnswer(rank, pipe, None, "not answered"))
        elif isinstance(item.get("dump"), str):
            out.append(PipeAnswer(rank, pipe, item["dump"]))
        else:
            out.append(PipeAnswer(rank, pipe, None, str(item.get("error", "not answered"))))
    return sorted(out, key=lambda a: a.rank)


def env_line(name: str, value: str) -> str:
    """The line to add to the job's ``env`` table in the config."""
    return f"{name} = {json.dumps(value)}"


def dump_dirs(setups: Sequence[FrSetup]) -> list[str]:
    """The folders the dumps go to (each process's prefix's folder), once each."""
    return list(dict.fromkeys(os.path.dirname(s.prefixes()[0]) or "." for s in setups))


# --- the doctor: is each running job ready to leave evidence? -------------------------

ROOM_MIN = 1 << 30  # bytes free where the dumps go: a rank's dump is MBs, a folder is shared
# Each folder (argv[1:]): its free bytes, or why not (one line of JSON).
_ROOM = """
import json, os, sys
out = {}
for d in sys.argv[1:]:
    try:
        st = os.statvfs(d)
        out[d] = {"free": st.f_bavail * st.f_frsize, "writable": os.access(d, os.W_OK)}
    except OSError as e:
        out[d] = {"error": e.strerror or type(e).__name__}
print(json.dumps(out))
"""


async def readiness_checks(transport: Transport, host: HostConfig, python: str) -> list[Check]:
    """For each running job of ``host``: whether its flight recorder is on, dumps on a
    timeout, where and with what room; and whether py-spy is there for its stacks. Each
    with the line to add to the job's ``env``. Never raises: what cannot be read is said."""
    from gpumon.backends.actions.jobs import JobError, job_status

    out = []
    for job in host.jobs:
        name = f"{job.name} evidence"
        try:
            status = await job_status(transport, job)
            setups = (
                await job_setups(transport, python, status.pids, 20.0) if status.running else []
            )
        except (JobError, TransportError, RuntimeError, TimeoutError) as e:
            out.append(Check(name, "warning", f"cannot read {job.name}'s processes: {e}"))
            continue
        if not status.running:
            out.append(Check(name, "n/a", f"{job.name} is {status.describe()}"))
            continue
        out += await _job_checks(transport, host, job, setups, python)
    out.append(await _py_spy_check(transport, host))
    return out


def _table(host: HostConfig, job: JobConfig) -> str:
    return f"[hosts.{host.name}.jobs.{job.name}.env]"


async def _job_checks(
    transport: Transport, host: HostConfig, job: JobConfig, setups: Sequence[FrSetup], python: str
) -> list[Check]:
    read = [s for s in setups if s.error is None]
    if not read:
        why = "; ".join(f"PID {s.pid}: {s.error}" for s in setups) or "no process"
        return [Check(f"{job.name} flight recorder", "warning", f"environment unreadable: {why}")]
    table = _table(host, job)
    off = "" if job.evidence else " (and evidence = false in its config: set it true)"
    out = []
    # The ranks are what records: a launcher's shell (or torchrun's agent) without the
    # variables does not make a job's recorder off.
    on = [s for s in read if s.on]
    if on:
        name, size = on[0].buffer or ("", 0)
        pids = " ".join(str(s.pid) for s in on)
        out.append(Check(f"{job.name} flight recorder", "ok", f"on: {name}={size} (PIDs {pids})"))
    else:
        said = ", ".join(f"{b[0]}={b[1]}" for s in read if (b := s.buffer)) or "neither set"
        out.append(
            Check(
                f"{job.name} flight recorder",
                "warning",
                f"off in PIDs {' '.join(str(s.pid) for s in read)}: "
                f"TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE > 0 turns it on "
                f"({said}); a stalled collective then leaves no record of which rank "
                f"never arrived{off}",
                f"add to {table}: {env_line('TORCH_FR_BUFFER_SIZE', '2000')} (then restart it)",
            )
        )
    ranks = on or read
    if any(s.dumps_on_timeout for s in ranks):
        out.append(Check(f"{job.name} dump on timeout", "ok", f"{ON_TIMEOUT}=1"))
    else:
        out.append(
            Check(
                f"{job.name} dump on timeout",
                "warning",
                f"{ON_TIMEOUT} is not 1: a watchdog timeout writes no dump",
                f"add to {table}: {env_line(ON_TIMEOUT, '1')}",
            )
        )
    out.append(await _dump_room(transport, host, job, ranks, python))
    return out


async def _dump_room(
    transport: Transport, host: HostConfig, job: JobConfig, read: Sequence[FrSetup], python: str
) -> Check:
    name = f"{job.name} dump folder"
    first = read[0]
    chosen = first.prefix
    where = (
        f"{chosen[1]}RANK ({chosen[0]})"
        if chosen
        else f"{first.prefixes()[0]}RANK (PyTorch's default)"
    )
    folders = dump_dirs(read)
    prefix = env_line("TORCH_FR_DUMP_TEMP_FILE", f"/var/tmp/gpumon-fr/{job.name}_rank_")
    fix = f"add to {_table(host, job)}: {prefix} (a folder that exists, with room)"
    try:
        result = await transport.run([python, "-c", _ROOM, *folders], timeout=20.0)
        found = untrusted.loads(result.stdout) if result.exit_code == 0 else None
    except (TransportError, ValueError) as e:
        return Check(name, "warning", f"dumps go to {where}; its room is unknown: {e}")
    if not isinstance(found, dict):
        return Check(name, "warning", f"dumps go to {where}; its room is unknown")
    for folder in folders:
        item = found.get(folder) or {}
        if "error" in item:
            created = chosen is None  # PyTorch creates its default folder, not the user's
            if created:
                continue
            return Check(name, "problem", f"dumps go to {where}: {folder}: {item['error']}", fix)
        if not item.get("writable"):
            return Check(name, "problem", f"dumps go to {where}: {folder} is not writable", fix)
        free = int(item.get("free") or 0)
        if free < ROOM_MIN:
            return Check(
                name, "warning", f"dumps go to {where}: only {free >> 20} MiB free in {folder}", fix
            )
    room = ", ".join(
        f"{f}: {int(found[f]['free']) >> 30} GiB free"
        for f in folders
        if "free" in (found.get(f) or {})
    )
    return Check(name, "ok", f"dumps go to {where}" + (f"; {room}" if room else ""))


async def _py_spy_check(transport: Transport, host: HostConfig) -> Check:
    argv = ["sh", "-c", "command -v py-spy"]
    try:
        inside = await transport.run(argv, timeout=10.0)
    except TransportError as e:
        return Check("py-spy", "warning", f"cannot look for py-spy: {e}")
    if inside.exit_code == 0 and inside.stdout.strip():
        return Check(
            "py-spy", "ok", f"{inside.stdout.strip()}: a job's stacks are kept before a restart"
        )
    return Check(
        "py-spy",
        "warning",
        "not on the target: a restart keeps no Python stacks of the job (gpumon installs nothing)",
        "install it in the job's venv (pip install py-spy); in a container that forbids "
        "ptrace, give the container CAP_SYS_PTRACE",
    )
