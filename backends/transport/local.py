"""``LocalTransport``: commands as child processes of gpumon itself (the ``local`` host)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence

from gpumon.backends.config.load import HostConfig

from .base import ProcessStream, Transport, TransportError, wrap_container


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
            lambda: kill_group(proc.pid),
            self._channels.release,
        )


def kill_group(pid: int) -> None:
    """SIGKILL to the process group that ``pid`` leads (already gone: nothing to do)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, 9)
