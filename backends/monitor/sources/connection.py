"""``TransportSource``: a source on a machine's Transport. It owns the connection loop:
connect, run one session, close, and reconnect with capped exponential backoff; while
disconnected the monitor keeps its last values (they go stale).

While it waits to retry, the source probes the machine cheaply every ``PROBE_S``
(``Transport.reachable``: a TCP connect for SSH). A machine seen down and then up again
has come back: the wait ends at once and the backoff starts over, so fresh data follows
within seconds of the host's return however long it was away. A machine that stays down,
or that answers but whose sessions keep failing, keeps the full backoff."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import random
from collections.abc import Sequence

from gpumon.backends.backoff import backoff_s
from gpumon.backends.model import ConnState
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import Sink, Source

__all__ = ["BACKOFF_CAP_S", "BACKOFF_FIRST_S", "PROBE_S", "TransportSource", "backoff_delay"]

BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 30.0
PROBE_S = 1.0  # one TCP connect a second while a machine is down: cheap, and fast to see


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: attempt 1 -> ~1 s, doubling, at most 30 s."""
    base = backoff_s(attempt - 1, first=BACKOFF_FIRST_S, cap=BACKOFF_CAP_S)
    return base * rng.uniform(0.5, 1.0)


class TransportSource(Source):
    """Sessions over ``transport``, reconnecting after each (``reconnect=False``: one
    session, then the monitor is FAILED with the reason; so too after a ``final`` error,
    such as a name that never resolved)."""

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
        attempt = 0  # sessions tried since the last good one (shown: "reconnecting #N")
        failures = 0  # what the backoff counts: reset by data and by the host's return
        while True:
            state = ConnState.CONNECTING if attempt == 0 else ConnState.RECONNECTING
            sink.ingest_status(state, error=sink.status.error, attempt=attempt)
            permanent = final = False
            try:
                await self.transport.connect()
                got_data = await self.session(sink)
                error = sink.status.error or "stream ended"
                if got_data:
                    attempt = failures = 0
            except TransportError as e:
                error, permanent, final = str(e), e.permanent, e.final
            except OSError as e:
                error = f"connection failed: {e}"
            finally:
                await self.close_stream()
            with contextlib.suppress(Exception):
                await self.transport.close()
            attempt += 1
            failures += 1
            if not self.reconnect or final:
                sink.ingest_status(ConnState.FAILED, error=error, attempt=attempt)
                return
            delay = BACKOFF_CAP_S if permanent else backoff_delay(failures, self._rng)
            sink.ingest_status(
                ConnState.RECONNECTING,
                error=error,
                attempt=attempt,
                next_retry_at=sink.clock() + delay,
            )
            if await self.wait_to_retry(delay):
                failures = 0

    async def wait_to_retry(self, delay: float) -> bool:
        """Sleep ``delay`` seconds, or less: True when the machine was seen down and then
        answering again during the wait (it came back: retry now)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        seen_down = False
        while (left := deadline - loop.time()) > 0:
            started = loop.time()
            up = await self.transport.reachable(timeout=min(PROBE_S, left))
            if up is None:  # the transport cannot tell: the plain backoff
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
                return False
            if up and seen_down:
                return True
            seen_down = seen_down or not up
            await asyncio.sleep(max(min(started + PROBE_S, deadline) - loop.time(), 0.0))
        return False

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
