"""``LocalTransport``: commands as child processes of gpumon itself (the ``local`` host)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from gpumon.backends.config.load import HostConfig

from . import prestart
from .base import ProcessStream, Transport, TransportError, wrap_container

STREAM_LIMIT = 1 << 22  # the pipe reader's buffer (ProcessStream bounds the lines)


class LocalTransport(Transport):
    """Commands as child processes of gpumon itself."""

    def __init__(self, host: HostConfig, env: Mapping[str, str] | None = None) -> None:
        super().__init__(host)
        self.env = dict(env) if env is not None else None

    @property
    def own_python(self) -> str | None:
        """gpumon's own interpreter: a pipx/venv install has nvidia-ml-py (a dependency)
        there, where ``python3`` on PATH usually lacks it. Not inside a container: the
        container has its own interpreters."""
        return sys.executable if self.host.container is None and sys.executable else None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as started for ``open_stream`` (inside the container, if any)."""
        return wrap_container(argv, self.host.container)

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        return await self._start(self.wrap(argv))

    async def open_host_stream(self, argv: Sequence[str]) -> ProcessStream:
        return await self._start(list(argv))

    async def _start(self, full: list[str]) -> ProcessStream:
        await self._channels.acquire()
        early = prestart.take(full) if self.env is None else None
        if early is not None:  # started before gpumon's imports (``prestart``): the same
            try:
                return await _adopt(early, self._channels.release)
            except BaseException:
                kill_group(early.pid)
                early.wait()
                self._channels.release()
                raise
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,
                limit=STREAM_LIMIT,
            )
        except OSError as e:
            self._channels.release()
            raise TransportError(f"cannot run {full[0]}: {e.strerror or e}") from e
        return ProcessStream(
            proc.stdout,
            proc.stdin,
            proc.stderr,
            proc.wait,
            lambda: kill_group(proc.pid),
            self._channels.release,
        )


async def _adopt(proc: subprocess.Popen[bytes], release: Any) -> ProcessStream:
    """A stream on a child that ``subprocess`` started before the event loop ran: its
    pipes as the loop's streams, its exit waited for in a thread."""
    loop = asyncio.get_running_loop()

    async def reader(pipe: Any) -> asyncio.StreamReader:
        stream = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), pipe)
        return stream

    stdout = await reader(proc.stdout)
    stderr = await reader(proc.stderr)
    pipe, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), proc.stdin
    )
    stdin = asyncio.StreamWriter(pipe, protocol, None, loop)

    async def wait() -> int:
        return await asyncio.to_thread(proc.wait)

    return ProcessStream(stdout, stdin, stderr, wait, lambda: kill_group(proc.pid), release)


def kill_group(pid: int) -> None:
    """SIGKILL to the process group that ``pid`` leads (already gone: nothing to do)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, 9)
