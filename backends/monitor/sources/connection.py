"""``TransportSource``: a source on a machine's Transport. It owns the connection loop:
connect, run one session, close, and reconnect with capped exponential backoff; while
disconnected the monitor keeps its last values (they go stale)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import random
from collections.abc import Sequence

from gpumon.backends.model import ConnState
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import Sink, Source

__all__ = ["BACKOFF_CAP_S", "BACKOFF_FIRST_S", "TransportSource", "backoff_delay"]

BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 30.0


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: attempt 1 -> ~1 s, doubling, at most 30 s."""
    base: float = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0 ** max(attempt - 1, 0))
    return base * rng.uniform(0.5, 1.0)


class TransportSource(Source):
    """Sessions over ``transport``, reconnecting after each (``reconnect=False``: one
    session, then the monitor is FAILED with the reason)."""

    def __init__(self, transport: Transport, *, reconnect: bool = True) -> None:
        self.transport: Transport = transport
        self.reconnect = reconnect
        self._stream: ProcessStream | None = None
        self._rng = random.Random()

    @property
    def label(self) -> str:
        return self.transport.label

    @abc.abstractmethod
    async def session(self, sink: Sink) -> bool:
        """One connected session until its stream ends; True when it delivered GPU data.
        Raises TransportError (its message becomes the host's error)."""

    async def run(self, sink: Sink) -> None:
        attempt = 0
        while True:
            state = ConnState.CONNECTING if attempt == 0 else ConnState.RECONNECTING
            sink.ingest_status(state, error=sink.status.error, attempt=attempt)
            permanent = False
            try:
                await self.transport.connect()
                got_data = await self.session(sink)
                error = sink.status.error or "stream ended"
                if got_data:
                    attempt = 0
            except TransportError as e:
                error, permanent = str(e), e.permanent
            except OSError as e:
                error = f"connection failed: {e}"
            finally:
                await self.close_stream()
            with contextlib.suppress(Exception):
                await self.transport.close()
            attempt += 1
            if not self.reconnect:
                sink.ingest_status(ConnState.FAILED, error=error, attempt=attempt)
                return
            delay = BACKOFF_CAP_S if permanent else backoff_delay(attempt, self._rng)
            sink.ingest_status(
                ConnState.RECONNECTING,
                error=error,
                attempt=attempt,
                next_retry_at=sink.clock() + delay,
            )
            await asyncio.sleep(delay)

    async def open_stream(self, argv: Sequence[str]) -> ProcessStream:
        """The session's stream (closed when the session ends, or by ``close_stream``)."""
        self._stream = await self.transport.open_stream(argv)
        return self._stream

    @property
    def stream(self) -> ProcessStream | None:
        return self._stream

    async def close_stream(self, grace: float = 3.0) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.close(grace)

    async def close(self) -> None:
        await self.close_stream()
        with contextlib.suppress(Exception):
            await self.transport.dispose()
