"""Jobs on a target: detached launch, PID records, status, signals and log tails.

A job started by gpumon runs detached from gpumon and from the SSH connection: in a tmux
session ``gpumon-JOB`` when the target has tmux, else under ``setsid nohup`` (its parent
exits at once, so it is re-parented to init and is nobody's descendant). The launch writes
a PID record on the target, ``$XDG_STATE_HOME/gpumon/jobs/JOB.json`` (default
``~/.local/state/gpumon/jobs``), inside the container when one is configured, so a later
gpumon finds the job. Every command goes through the Transport as
``["sh", "-c", SCRIPT, "gpumon-job", ARG...]``, SCRIPT one of the POSIX sh scripts in
``backends/remote/jobs/``: values travel as positional arguments, never spliced into shell
text. Only the job's ``start``/``stop`` templates are shell text,
and parameter values are substituted into them shell-quoted (``job_params``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gpumon.backends import untrusted
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.remote.scripts import job_script
from gpumon.backends.transport.base import RunResult, Transport

LaunchMethod = Literal["auto", "tmux", "setsid"]

JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")  # as config_workloads allows
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOB = re.compile(r"[*?\[]")


class JobError(GpumonError):
    """A job operation that could not be done; ``str()`` is the whole message for the user."""


# --- where records live ---------------------------------------------------------------


def state_dir_for(transport: Transport) -> str:
    """The jobs directory on the target ("" = ``$XDG_STATE_HOME/gpumon/jobs`` there).

    A transport may set ``job_state_dir`` (the simulator keeps its records in its own dir).
    """
    return str(getattr(transport, "job_state_dir", "") or "")


def method_for(transport: Transport) -> LaunchMethod:
    """How to launch on this transport: ``auto`` (tmux when the target has it) unless the
    transport sets ``job_launch_method``."""
    method = getattr(transport, "job_launch_method", "auto")
    if method == "tmux":
        return "tmux"
    return "setsid" if method == "setsid" else "auto"


def session_name(job: str) -> str:
    """The tmux session of a job (tmux turns '.' and ':' in names into '_')."""
    return "gpumon-" + job.replace(".", "_").replace(":", "_")


def log_argument(job: JobConfig) -> str:
    """The log the launcher appends the job's output to: the job's ``log`` when it is a plain
    path, else "" (the target then uses ``JOB.log`` in the jobs directory)."""
    if job.log is None or _GLOB.search(job.log):
        return ""
    return job.log


def _check_name(job: JobConfig) -> None:
    if not JOB_NAME.fullmatch(job.name):
        raise JobError(f"job name {job.name!r}: letters, digits, '_', '.', '-' only")


def env_arguments(job: JobConfig) -> list[str]:
    """The job's ``env`` as NAME=VALUE arguments for the launch and stop scripts, which
    export them only where the job's command runs (a name may be any variable name, the
    scripts' own included). Raises JobError for a name that is not a variable name or a
    value with a NUL byte."""
    for name, value in job.env.items():
        if not ENV_NAME.fullmatch(name):
            raise JobError(f"job {job.name}: env name {name!r} is not a variable name")
        if "\x00" in value:
            raise JobError(f"job {job.name}: env {name} contains a NUL byte")
    return [f"{k}={v}" for k, v in job.env.items()]


def _sh(script: str, *args: str) -> list[str]:
    """``sh -c`` running the job script ``script`` (``backends/remote/jobs/SCRIPT.sh``)
    with ``args`` as its positional arguments."""
    return ["sh", "-c", job_script(script), "gpumon-job", *args]


# --- records and status ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the launch wrote on the target: the job's PID and its process group."""

    job: str
    pid: int
    pgid: int
    method: str  # "tmux" or "setsid"
    log: str
    started: float | None = None
    session: str | None = None  # the tmux session name
    token: str = ""

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        """Raises JobError when the text is not a record."""
        try:
            d = untrusted.loads(text)
            return cls(
                job=str(d["job"]),
                pid=int(d["pid"]),
                pgid=int(d["pgid"]),
                method=str(d.get("method") or "setsid"),
                log=str(d.get("log") or ""),
                started=float(d["started"]) if d.get("started") not in (None, "") else None,
                session=str(d["session"]) if d.get("session") else None,
                token=str(d.get("token") or ""),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise JobError(f"unreadable job record: {text[:200]!r}") from e


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job as the target sees it now."""

    job: str
    record: JobRecord | None = None  # None: gpumon never started it there
    alive: bool = False  # the recorded main process is running
    pids: tuple[int, ...] = ()  # live processes in its process group or session
    exit_code: int | None = None  # how the last run ended, when it has
    log_path: str = ""  # where the launcher appends its output
    log_size: int | None = None
    log_mtime: float | None = None
    tmux: bool = False  # the target has tmux (the next launch uses it)
    setsid: bool = False

    @property
    def running(self) -> bool:
        return self.alive or bool(self.pids)

    def describe(self) -> str:
        """``running (PID 123; PIDs 123 124)``, ``exited (code 1)``, ``not started by gpumon``."""
        if self.record is None:
            return "not started by gpumon"
        if self.running:
            lead = f"PID {self.record.pid}" if self.alive else "main process gone"
            return f"running ({lead}; PIDs {' '.join(map(str, self.pids))})"
        if self.exit_code is not None:
            return f"exited (code {self.exit_code})"
        return f"not running (last PID {self.record.pid})"


def parse_status(job: str, text: str) -> JobStatus:
    """The status script's ``key=value`` lines as a JobStatus."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key] = value
    record = JobRecord.from_json(kv["record"]) if kv.get("record") else None
    exit_code = None
    if record is not None and kv.get("exit"):
        code, _, rest = kv["exit"].partition(" ")
        if rest.split(" ")[-1] == record.token and code.lstrip("-").isdigit():
            exit_code = int(code)
    size = mtime = None
    if kv.get("logstat"):
        parts = kv["logstat"].split()
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            size, mtime = int(parts[0]), float(parts[1])
    return JobStatus(
        job=job,
        record=record,
        alive=kv.get("alive") == "1",
        pids=tuple(int(p) for p in kv.get("pids", "").split() if p.isdigit()),
        exit_code=exit_code,
        log_path=kv.get("log", ""),
        log_size=size,
        log_mtime=mtime,
        tmux=kv.get("tmux") == "1",
        setsid=kv.get("setsid") == "1",
    )


def _failure(what: str, res: RunResult) -> JobError:
    if res.exit_code is None:
        return JobError(f"{what}: no answer from the target (timed out)")
    text = (res.stderr or res.stdout).strip() or f"exit code {res.exit_code}"
    return JobError(f"{what}: {text}")


async def job_status(transport: Transport, job: JobConfig, timeout: float = 20.0) -> JobStatus:
    """Read the job's PID record and check its processes and log. Raises JobError or
    TransportError."""
    _check_name(job)
    argv = _sh("status", state_dir_for(transport), job.name, log_argument(job), job.workdir or "")
    res = await transport.run(argv, timeout=timeout)
    if res.exit_code != 0:
        raise _failure(f"cannot read the state of {job.name}", res)
    return parse_status(job.name, res.stdout)


async def launch_job(
    transport: Transport, job: JobConfig, command: str, timeout: float = 30.0
) -> JobRecord:
    """Start ``command`` (already rendered) detached on the target and return its record.

    Refuses (JobError) when the job is already running, its workdir is missing, the log
    cannot be written, or neither tmux nor setsid exists; the message carries the target's
    stderr. Raises TransportError when the target cannot be reached.
    """
    _check_name(job)
    argv = _sh(
        "launch",
        state_dir_for(transport),
        job.name,
        log_argument(job),
        job.workdir or "",
        command,
        method_for(transport),
        *env_arguments(job),
    )
    res = await transport.run(argv, timeout=timeout)
    if res.exit_code != 0:
        raise _failure(f"cannot start {job.name}", res)
    return JobRecord.from_json(res.stdout.strip().splitlines()[-1])


async def signal_job(
    transport: Transport, job: JobConfig, sig: str, timeout: float = 20.0
) -> tuple[int, ...]:
    """Send ``sig`` (``TERM``, ``KILL``) to the job's process group and each live member
    (checked on the target at that moment); returns the PIDs signalled (empty: none ran)."""
    _check_name(job)
    if sig not in ("TERM", "KILL", "INT", "HUP"):
        raise JobError(f"unsupported signal {sig}")
    res = await transport.run(
        _sh("signal", state_dir_for(transport), job.name, sig), timeout=timeout
    )
    if res.exit_code != 0:
        raise _failure(f"cannot signal {job.name}", res)
    for line in res.stdout.splitlines():
        if line.startswith("signalled="):
            return tuple(int(p) for p in line.partition("=")[2].split() if p.isdigit())
    return ()


async def run_stop_command(
    transport: Transport, job: JobConfig, command: str, status: JobStatus, timeout: float
) -> RunResult:
    """Run the job's rendered ``stop`` command in its workdir with its env, plus
    ``GPUMON_JOB`` and, when known, ``GPUMON_JOB_PID`` / ``GPUMON_JOB_PGID``."""
    extra = [f"GPUMON_JOB={job.name}"]
    if status.record is not None:
        extra += [f"GPUMON_JOB_PID={status.record.pid}", f"GPUMON_JOB_PGID={status.record.pgid}"]
    argv = _sh("stop", job.workdir or "", command, *env_arguments(job), *extra)
    return await transport.run(argv, timeout=timeout)


async def log_tail(transport: Transport, path: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``path`` on the target ("" when it cannot be read)."""
    if not path:
        return ""
    res = await transport.run(["tail", "-n", str(lines), "--", path], timeout=15.0)
    return res.stdout.rstrip("\n") if res.exit_code == 0 else ""


# What says a server job serves again, by its engine. SGLang's /health_generate answers 200
# once a token was generated, 503 when none came in its SGLANG_HEALTH_CHECK_TIMEOUT (20 s).
# vLLM has no such probe: its /health answers 200 once its engine core is up and 503 once
# it died (EngineDeadError: vllm/entrypoints/serve/instrumentator/health.py, vLLM's main
# as read for this; /health in api_server.py before), and V1's API server listens only
# after its engine core started.
SERVER_HEALTH = {"sglang": "/health_generate", "vllm": "/health"}


async def server_health(
    transport: Transport, port: int, timeout: float, path: str = SERVER_HEALTH["sglang"]
) -> tuple[int | None, str]:
    """GET ``path`` (``SERVER_HEALTH``) of the server on ``port`` on the target: (its HTTP
    status, "") or (None, why none came); only 200 says it serves."""
    url = f"http://127.0.0.1:{port}{path}"
    res = await transport.run(_sh("health", url, f"{timeout:g}"), timeout=timeout + 10.0)
    status, _, why = res.stdout.strip().partition(" ")
    if res.exit_code != 0 or not status.isdigit():
        return None, (res.stderr.strip() or f"exit code {res.exit_code}")[:200]
    return (None, why or "no answer") if status == "000" else (int(status), "")
