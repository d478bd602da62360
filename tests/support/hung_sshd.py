"""A hung sshd on 127.0.0.1: it accepts every connection and never says a word (on a
real one each connection is a pre-auth session). It tells gpumon's reachability probes
(a TCP connect, closed at once, nothing sent) from its SSH attempts (the client's
version line, ``SSH-2.0-...``, sent first: RFC 4253 section 4.2) and counts both. For
tests/system/test_reconnect_wait.py and bench/bench_probes.py.

    async with HungSshd() as hung:
        ...  # point a host at 127.0.0.1 port hung.port
        hung.probes, hung.attempts
"""

from __future__ import annotations

import asyncio
import contextlib
import time

READ_S = 2.0  # a probe closes at once; an SSH client sends its version line at once


class HungSshd:
    def __init__(self) -> None:
        self.port = 0
        self.probes: list[float] = []  # time.monotonic() of each probe's connection
        self.attempts: list[float] = []  # ... and of each SSH attempt's
        self._server: asyncio.Server | None = None
        self._held: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> HungSshd:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._held):
            writer.close()
        await self._server.wait_closed()

    @property
    def connections(self) -> int:
        return len(self.probes) + len(self.attempts)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        at = time.monotonic()
        self._held.add(writer)
        try:
            first = b""
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(READ_S):
                    first = await reader.read(4)
            (self.attempts if first == b"SSH-" else self.probes).append(at)
            with contextlib.suppress(OSError):
                await reader.read()  # held, unanswered, until the client gives up
        finally:
            self._held.discard(writer)
            writer.close()
