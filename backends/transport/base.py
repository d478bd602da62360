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
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gpumon.backends.config.load import HostConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.untrusted import printable_bounded, printable_text

# OpenSSH's default MaxSessions is 10; stay below it so a stock sshd never refuses a channel.
MAX_CHANNELS = 8
REAP_S = 10.0  # how long a killed process may take to be reaped (seconds on a loaded machine)
# Every read of a machine's output is bounded: a log of 256 MB with no newline must not
# become 256 MB (and more) in gpumon. A line longer than LINE_MAX is cut (the agent's
# largest messages are far below it); ``run`` keeps at most RUN_MAX_BYTES of stdout.
LINE_MAX = 4 << 20
RUN_MAX_BYTES = 16 << 20
READ_BYTES = 1 << 16  # read from a stream at a time
STDERR_LINE_MAX = 2000  # characters of one stderr line kept for the error messages
STDERR_LINES = 20


class TransportError(GpumonError):
    """A machine could not be reached or refused us; the message is for the user."""

    def __init__(self, message: str, *, permanent: bool = False, final: bool = False) -> None:
        # The message often quotes the machine (an SSH disconnect reason, a tool's error).
        super().__init__(printable_text(message))
        self.permanent = permanent  # retrying will not help without a change (auth, host key)
        # Nothing to retry: the machine was never reached and cannot be (its name does not
        # resolve on the first try); the source stops (FAILED) instead of retrying forever.
        self.final = final


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished command. ``stdout`` and ``stderr`` came from the machine and have been
    made printable (``untrusted.printable_text``) by the transport. ``cut``: stdout was
    longer than the run's ``max_bytes`` and is only its start (the command was then
    ended: ``exit_code`` None) or, with ``keep_end``, its end."""

    exit_code: int | None
    stdout: str
    stderr: str
    cut: bool = False


def wrap_container(argv: Sequence[str], container: int | None) -> list[str]:
    """``argv`` as run inside Proxmox container ``container`` (``pct exec`` needs no shell)."""
    if container is None:
        return list(argv)
    return ["pct", "exec", str(container), "--", *argv]


class Transport(abc.ABC):
    """Runs argv lists on one machine. Implementations must be safe to call concurrently."""

    #: Why the Python environment of this machine must not be changed (no torch swap);
    #: None: it may be, with the usual checks.
    python_env_locked: ClassVar[str | None] = None

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self._channels = asyncio.Semaphore(MAX_CHANNELS)
        self.host_proc_root = "/proc"  # the host side's /proc (the simulator has its own)
        # The kernel log the agent reads for Xid / OOM-killer lines (the simulator's own
        # file; a test's): another file is read line by line as lines are appended.
        self.kernel_log_path = "/dev/kmsg"
        # Whether the agent, inside a container, lists who holds /dev/nvidiaN from this
        # machine's /proc (the simulator's CT200 is not the machine it runs on).
        self.device_files = True
        # The target's /proc, where the agent's discovery finds the servers by their
        # command lines (the simulator's CT200 has its own).
        self.proc_root = "/proc"

    @property
    def label(self) -> str:
        return self.host.describe()

    @property
    def own_python(self) -> str | None:
        """An interpreter to try first for the agent when the host names none: None, but
        for the local machine outside a container gpumon's own (``LocalTransport``)."""
        return None

    async def connect(self) -> None:  # noqa: B027 - optional for transports with no session
        """Open the session (no-op for local); raises TransportError."""

    async def close(self) -> None:  # noqa: B027
        """Close the session; streams opened on it end. ``connect`` may follow."""

    async def reachable(self, timeout: float) -> bool | None:
        """Whether the machine answers at all now (a cheap probe, no session), within
        ``timeout`` seconds; None: this transport cannot tell (local, simulator)."""
        return None

    def probe_link(self) -> bool:
        """The session's stream has been quiet too long: find out now whether its link
        still answers, closing it (its streams end) when it does not. False: this
        transport has no link to probe (local, simulator); nothing is done."""
        return False

    def link_answered(self) -> None:  # noqa: B027 - only for transports that probe
        """Data came again after ``probe_link``: the probing ends."""

    def link_lost(self) -> bool:
        """The session's link was closed under it (a probe went unanswered, the peer
        hung up), as opposed to a stream that ended by itself."""
        return False

    async def dispose(self) -> None:
        """Final shutdown: close, and release whatever the transport set up for itself."""
        await self.close()

    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float = 30.0,
        on_host: bool = False,
        max_bytes: int = RUN_MAX_BYTES,
        keep_end: bool = False,
    ) -> RunResult:
        """Run a command to completion; a timeout kills it and reports exit code None.
        ``on_host``: on the container's host itself (``open_host_stream``).

        At most ``max_bytes`` of stdout are kept (and shown: escapes count). Past them the
        command is ended and its start kept, or with ``keep_end`` it is read to its end
        and its end kept (a log's tail); either way ``cut`` says so. A run that is
        cancelled or times out kills the command at once (no grace: its stdin was closed
        at the start)."""
        opened = self.open_host_stream(argv) if on_host else self.open_stream(argv)
        stream = await opened
        out = bytearray()
        cut = False
        code = None
        try:
            if input:
                stream.write(input)
            await stream.close_stdin()
            async with asyncio.timeout(timeout):
                while chunk := await stream.read(READ_BYTES):
                    out += chunk
                    if len(out) > max_bytes:
                        cut = True
                        if not keep_end:
                            del out[max_bytes:]
                            break
                        del out[: len(out) - max_bytes]  # the start goes: O(1) for bytearray
                if not cut or keep_end:
                    code = await stream.wait()
        except TimeoutError:
            code = None
        finally:
            await stream.close(grace=0.0)
        text = out.decode("utf-8", "replace")
        del out
        stdout, shortened = printable_bounded(text, max_bytes, keep_end=keep_end)
        return RunResult(code, stdout, stream.stderr_tail(), cut or shortened)

    @abc.abstractmethod
    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        """Start ``argv`` (wrapped for the container) and return its stream."""

    async def open_host_stream(self, argv: Sequence[str]) -> ProcessStream:
        """Start ``argv`` on the machine that holds the container (the Proxmox host),
        outside ``pct exec``: the host-side process collector and its ``kill``. Where no
        container is configured that is the machine itself. Raises TransportError where
        the transport cannot reach the host side."""
        if self.host.container is None:
            return await self.open_stream(argv)
        raise TransportError(f"{self.label}: commands cannot reach the container's host")


class ProcessStream:
    """A running process: read its stdout by line, write its stdin; SSH and local alike.

    Reads are bounded whatever the machine sends: ``readline`` cuts a line longer than
    ``line_max`` (``lines_cut`` counts them), and the stderr kept for error messages is
    its last STDERR_LINES lines of at most STDERR_LINE_MAX characters each."""

    def __init__(
        self,
        stdout: Any,
        stdin: Any,
        stderr: Any,
        waiter: Any,
        terminate: Any,
        release: Any,
        *,
        line_max: int = LINE_MAX,
        reap_s: float = REAP_S,
    ) -> None:
        self._stdout = stdout
        self._stdin = stdin
        self._waiter = waiter
        self._terminate = terminate
        self._release = release
        self.line_max = line_max
        self.reap_s = reap_s  # how long a killed process is waited for
        self.lines_cut = 0  # lines longer than line_max, cut to it
        self._buffer = bytearray()  # read from stdout, not yet returned
        self._searched = 0  # bytes of _buffer known to hold no newline
        self._dropping = False  # the rest of a cut line is read and dropped
        self._eof = False
        self._stderr_lines: list[str] = []
        self._exit: int | None = None
        self._reaped = False  # the waiter returned: the process is gone
        self._closed = False
        self._stderr_task = asyncio.ensure_future(self._drain_stderr(stderr))

    async def _drain_stderr(self, stderr: Any) -> None:
        partial = b""
        with contextlib.suppress(Exception):
            while chunk := await stderr.read(READ_BYTES):
                *lines, partial = (partial + chunk).split(b"\n")
                partial = partial[: 4 * STDERR_LINE_MAX]  # a line without end: its start
                for line in lines[-STDERR_LINES:]:
                    self._keep_stderr(line)
        if partial:
            self._keep_stderr(partial)

    def _keep_stderr(self, line: bytes) -> None:
        text = printable_text(line.decode("utf-8", "replace").rstrip("\r"))
        if len(text) > STDERR_LINE_MAX:
            text = text[:STDERR_LINE_MAX] + " [cut]"
        self._stderr_lines = [*self._stderr_lines[-(STDERR_LINES - 1) :], text]

    async def _fill(self) -> bool:
        """Read more of stdout into the buffer; False at its end (or a broken stream)."""
        if self._eof:
            return False
        try:
            chunk: bytes = await self._stdout.read(READ_BYTES)
        except (ConnectionError, OSError, EOFError):
            chunk = b""
        except Exception as e:  # asyncssh raises its own errors for a broken channel
            if not type(e).__module__.startswith("asyncssh"):
                raise
            chunk = b""
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    async def read(self, size: int = READ_BYTES) -> bytes:
        """Up to ``size`` bytes of stdout as they come; ``b""`` at its end."""
        if not self._buffer and not await self._fill():
            return b""
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        self._searched = 0
        return data

    async def readline(self) -> bytes:
        """The next stdout line including its newline; ``b""`` at end of stream. A line
        longer than ``line_max`` comes as its first ``line_max`` bytes and a newline, the
        rest of it is dropped, and ``lines_cut`` counts it.

        The bytes are the machine's own: the caller makes them printable
        (``untrusted.printable_text`` / ``untrusted.loads``) before anything shows them."""
        while True:
            end = self._buffer.find(b"\n", self._searched)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._searched = 0
                if self._dropping:  # the end of a cut line
                    self._dropping = False
                    continue
                return line
            if self._dropping:
                self._buffer.clear()
            elif len(self._buffer) > self.line_max:
                line = bytes(self._buffer[: self.line_max]) + b"\n"
                self._buffer.clear()
                self._dropping = True
                self.lines_cut += 1
                return line
            self._searched = len(self._buffer)
            if not await self._fill():
                line = b"" if self._dropping else bytes(self._buffer)
                self._buffer.clear()
                self._searched = 0
                self._dropping = False
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
            self._reaped = True
        return self._exit

    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr (for error messages)."""
        return "\n".join(self._stderr_lines)

    @property
    def exit_code(self) -> int | None:
        return self._exit

    async def close(self, grace: float = 3.0) -> None:
        """Close stdin (the agent then exits by itself), reap it, release the channel.

        A process that does not exit within ``grace`` seconds of its stdin closing is
        killed; a program that ignores stdin (nvidia-smi's loop) is best closed with
        ``grace=0``. A close that is itself cancelled (an app shutting down) kills and
        reaps it too: a child left running outlives the event loop, and its transport
        then fails in ``__del__`` ("Event loop is closed")."""
        if self._closed:
            return
        self._closed = True
        await self.close_stdin()
        try:
            async with asyncio.timeout(grace):
                await self.wait()
        except TimeoutError:
            pass
        finally:
            if not self._reaped:
                with contextlib.suppress(Exception):
                    self._terminate()
                with contextlib.suppress(Exception):  # reap it: killed, it is gone soon
                    async with asyncio.timeout(self.reap_s):
                        await self.wait()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self._stderr_task
        self._stderr_task.cancel()
        self._release()


def ssh_command(argv: Sequence[str], container: int | None) -> str:
    """The one string an SSH server hands to the remote shell for ``argv``."""
    return shlex.join(wrap_container(argv, container))
