"""How gpumon runs commands on a machine: one ``Transport`` interface, three implementations.

- ``SshTransport``: a real host over SSH (asyncssh), one connection per host with
  multiplexed channels, host keys verified.
- ``LocalTransport``: the machine gpumon runs on (child processes, no SSH).
- ``SimTransport``: the built-in simulated machine: a local transport whose PATH holds the
  simulator's stand-in ``nvidia-smi``, so its output goes through the real agent and parsers.

Commands are argv lists, never strings. When a Proxmox container is configured every
command is wrapped as ``pct exec ID -- argv...``; for SSH the argv is then joined with
``shlex.join`` so the remote shell sees each word exactly once.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import HostConfig
from .config_workloads import JobConfig, SglangConfig
from .untrusted import printable_text

# OpenSSH's default MaxSessions is 10; stay below it so a stock sshd never refuses a channel.
MAX_CHANNELS = 8


class TransportError(Exception):
    """A machine could not be reached or refused us; the message is for the user."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        # The message often quotes the machine (an SSH disconnect reason, a tool's error).
        super().__init__(printable_text(message))
        self.permanent = permanent  # retrying will not help without a change (auth, host key)


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished command. ``stdout`` and ``stderr`` came from the machine and have been
    made printable (``untrusted.printable_text``) by the transport."""

    exit_code: int | None
    stdout: str
    stderr: str


def wrap_container(argv: Sequence[str], container: int | None) -> list[str]:
    """``argv`` as run inside Proxmox container ``container`` (``pct exec`` needs no shell)."""
    if container is None:
        return list(argv)
    return ["pct", "exec", str(container), "--", *argv]


class Transport(abc.ABC):
    """Runs argv lists on one machine. Implementations must be safe to call concurrently."""

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self._channels = asyncio.Semaphore(MAX_CHANNELS)

    @property
    def label(self) -> str:
        return self.host.describe()

    async def connect(self) -> None:  # noqa: B027 - optional for transports with no session
        """Open the session (no-op for local); raises TransportError."""

    async def close(self) -> None:  # noqa: B027
        """Close the session; streams opened on it end. ``connect`` may follow."""

    async def dispose(self) -> None:
        """Final shutdown: close, and release whatever the transport set up for itself."""
        await self.close()

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0
    ) -> RunResult:
        """Run a command to completion; a timeout kills it and reports exit code None."""
        stream = await self.open_stream(argv)
        try:
            if input:
                stream.write(input)
            await stream.close_stdin()
            chunks: list[bytes] = []
            async with asyncio.timeout(timeout):
                while line := await stream.readline():
                    chunks.append(line)
            code = await stream.wait()
        except TimeoutError:
            code = None
        finally:
            await stream.close()
        stdout = printable_text(b"".join(chunks).decode("utf-8", "replace"))
        return RunResult(code, stdout, stream.stderr_tail())

    @abc.abstractmethod
    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        """Start ``argv`` (wrapped for the container) and return its stream."""


class ProcessStream:
    """A running process: read its stdout by line, write its stdin; SSH and local alike."""

    def __init__(
        self,
        stdout: Any,
        stdin: Any,
        stderr: Any,
        waiter: Any,
        terminate: Any,
        release: Any,
    ) -> None:
        self._stdout = stdout
        self._stdin = stdin
        self._waiter = waiter
        self._terminate = terminate
        self._release = release
        self._stderr_lines: list[str] = []
        self._exit: int | None = None
        self._closed = False
        self._stderr_task = asyncio.ensure_future(self._drain_stderr(stderr))

    async def _drain_stderr(self, stderr: Any) -> None:
        with contextlib.suppress(Exception):
            while line := await stderr.readline():
                text = printable_text(line.decode("utf-8", "replace").rstrip("\r\n"))
                self._stderr_lines = [*self._stderr_lines[-19:], text]

    async def readline(self) -> bytes:
        """The next stdout line including its newline; ``b""`` at end of stream.

        The bytes are the machine's own: the caller makes them printable
        (``untrusted.printable_text`` / ``untrusted.loads``) before anything shows them."""
        try:
            line: bytes = await self._stdout.readline()
        except (ConnectionError, OSError, EOFError):
            return b""
        except Exception as e:  # asyncssh raises its own errors for a broken channel
            if type(e).__module__.startswith("asyncssh"):
                return b""
            raise
        return line

    def write(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self._stdin.write(data)

    async def close_stdin(self) -> None:
        with contextlib.suppress(Exception):
            self._stdin.write_eof()

    async def wait(self) -> int | None:
        with contextlib.suppress(Exception):
            self._exit = await self._waiter()
        return self._exit

    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr (for error messages)."""
        return "\n".join(self._stderr_lines)

    @property
    def exit_code(self) -> int | None:
        return self._exit

    async def close(self) -> None:
        """Close stdin (the agent then exits by itself), reap it, release the channel."""
        if self._closed:
            return
        self._closed = True
        await self.close_stdin()
        try:
            async with asyncio.timeout(3.0):
                await self.wait()
        except TimeoutError:
            with contextlib.suppress(Exception):
                self._terminate()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self._stderr_task
        self._stderr_task.cancel()
        self._release()


class LocalTransport(Transport):
    """Commands as child processes of gpumon itself."""

    def __init__(self, host: HostConfig, env: Mapping[str, str] | None = None) -> None:
        super().__init__(host)
        self.env = dict(env) if env is not None else None

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        full = wrap_container(argv, self.host.container)
        await self._channels.acquire()
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,
                limit=1 << 22,
            )
        except OSError as e:
            self._channels.release()
            raise TransportError(f"cannot run {full[0]}: {e.strerror or e}") from e
        return ProcessStream(
            proc.stdout,
            proc.stdin,
            proc.stderr,
            proc.wait,
            lambda: _kill_group(proc.pid),
            self._channels.release,
        )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, 9)


class SimTransport(LocalTransport):
    """The simulated CT200: a local transport with the simulator's nvidia-smi on PATH.

    In the ``training-oom`` scenario it also runs the simulated drafter job, which writes
    its progress log (``job_log``) and dies of CUDA OOM at the scenario's OOM time. The job
    is started like any gpumon job (``jobs.launch_job``, detached, PID record in
    ``job_state_dir``), so ``drafter_job()`` can be restarted; a restarted run records its
    restart in the simulator's state dir and the simulated GPUs fill up again.
    """

    job_launch_method = "setsid"  # never a tmux session on the user's own tmux server

    def __init__(self, host: HostConfig, settings: Any) -> None:
        from .sim.wrapper import write_job_wrapper, write_wrapper

        self.root = Path(tempfile.mkdtemp(prefix="gpumon-sim-"))
        bin_dir, state = self.root / "bin", self.root / "state"
        bin_dir.mkdir()
        state.mkdir()
        if settings.state_dir is None:
            settings = dataclasses.replace(settings, state_dir=str(state))
        self.settings = settings
        self.job_log = Path(settings.state_dir) / "drafter.log"
        self.job_state_dir = str(self.root / "jobs")
        write_wrapper(bin_dir, settings)
        self._job_wrapper = write_job_wrapper(bin_dir, settings)
        self._job_started = False
        self._servers: asyncio.subprocess.Process | None = None
        self.sglang_ports = _sglang_ports() if settings.scenario == "sglang" else ()
        env = dict(os.environ)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        super().__init__(host, env)

    @property
    def label(self) -> str:
        return f"simulator ({self.settings.scenario})"

    def drafter_job(self) -> JobConfig | None:
        """The simulated drafter as a restartable job (None outside ``training-oom``)."""
        if self.settings.scenario != "training-oom":
            return None
        from .sim.scenario import DRAFTER_GPUS

        return JobConfig(
            name="drafter",
            gpus=DRAFTER_GPUS,
            log=str(self.job_log),
            start=self._drafter_command("--restarted"),
            stop_timeout=5.0,
            verify_s=3.0,
        )

    def sglang_config(self) -> SglangConfig | None:
        """The simulated SGLang servers (``sglang`` scenario): one per GPU."""
        if not self.sglang_ports:
            return None
        log = str(Path(self.settings.state_dir) / "sglang-*.log")
        return SglangConfig(ports=self.sglang_ports, log=log, discover=False)

    def _drafter_command(self, *flags: str) -> str:
        return shlex.join([str(self._job_wrapper), "--log", str(self.job_log), *flags])

    async def connect(self) -> None:
        if self.sglang_ports and self._servers is None:
            self._servers = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gpumon.backends.sim.sglang_server",
                "--ports",
                ",".join(map(str, self.sglang_ports)),
                "--log",
                str(self.settings.state_dir),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env={**(self.env or {}), **self.settings.to_env()},
                start_new_session=True,
            )
        job = self.drafter_job()
        if job is not None and not self._job_started:
            from .jobs import JobError, launch_job

            self._job_started = True  # before the await: a second connect must not launch
            try:
                await launch_job(self, job, self._drafter_command())
            except JobError as e:
                raise TransportError(f"the simulated drafter did not start: {e}") from e

    async def dispose(self) -> None:
        """Stop the simulated servers and drafter and remove the simulator's files.

        (``close`` between reconnects keeps them: the machine does not vanish when a
        session ends.)"""
        servers, self._servers = self._servers, None
        if servers is not None and servers.returncode is None:
            _kill_group(servers.pid)
            await servers.wait()
        job = self.drafter_job()
        if job is not None and self._job_started:
            from .jobs import JobError, signal_job

            with contextlib.suppress(JobError, OSError):
                await signal_job(self, job, "KILL")
        shutil.rmtree(self.root, ignore_errors=True)


def _sglang_ports(count: int = 8, base: int = 30000) -> tuple[int, ...]:
    """SGLang's usual 30000-30007 when they are free here, else any free ports."""
    import socket

    def free(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) != 0

    if all(free(p) for p in range(base, base + count)):
        return tuple(range(base, base + count))
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return tuple(sorted(s.getsockname()[1] for s in socks))
    finally:
        for s in socks:
            s.close()


def ssh_command(argv: Sequence[str], container: int | None) -> str:
    """The one string an SSH server hands to the remote shell for ``argv``."""
    return shlex.join(wrap_container(argv, container))
