"""``TransportSource``: a source on a machine's Transport. It owns the connection loop:
connect, run one session, close, and reconnect with capped exponential backoff; while
disconnected the monitor keeps its last values (they go stale).

While it waits to retry, the source probes the machine cheaply (``Transport.reachable``:
a TCP connect for SSH). A machine seen down and then up again has come back: the wait
ends at once and the backoff starts over. A machine that stays down, or that answers but
whose sessions keep failing, keeps the full backoff. The probes back off too
(``ProbeSchedule``): every ``PROBE_S`` for an outage's first ``PROBE_FAST_S`` (a restarted
sshd, a reboot: fresh data within seconds of the return), then as the reconnects do, to
one every ``PROBE_CAP_S``; the reconnects themselves come every ``BACKOFF_CAP_S`` at
most. Each probe is a connection to the host's sshd, and where it accepts and never
answers (a hung sshd) a pre-auth session there: 637 in 15 minutes with 1 s probes."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from gpumon.backends.backoff import backoff_s
from gpumon.backends.model import ConnState
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import Sink, Source

__all__ = [
    "BACKOFF_CAP_S",
    "BACKOFF_FIRST_S",
    "PROBE_CAP_S",
    "PROBE_FAST_S",
    "PROBE_S",
    "ProbeSchedule",
    "TransportSource",
    "backoff_delay",
]

BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 30.0
PROBE_S = 1.0  # one TCP connect a second while a machine is down: fast to see it return,
PROBE_FAST_S = 120.0  # for an outage's first two minutes (an sshd restart, a reboot);
PROBE_CAP_S = 60.0  # then doubling, as the reconnects, to one a minute


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: attempt 1 -> ~1 s, doubling, at most 30 s."""
    base = backoff_s(attempt - 1, first=BACKOFF_FIRST_S, cap=BACKOFF_CAP_S)
    return base * rng.uniform(0.5, 1.0)


@dataclass
class ProbeSchedule:
    """When an outage's next reachability probe is due (the event loop's clock): every
    ``PROBE_S`` for its first ``fast_s``, then ``backoff_s`` from twice that, doubling
    with each probe, at most ``cap_s``. The outage runs from the first wait after a
    failed session until a session delivers data."""

    fast_s: float = PROBE_FAST_S
    cap_s: float = PROBE_CAP_S
    began: float | None = None  # when the outage began (None: none now)
    due: float = 0.0  # when the next probe may go
    slowed: int = 0  # probes made after the first ``fast_s``

    def begin(self, now: float) -> None:
        """A wait to retry starts at ``now``: the outage's first starts it."""
        if self.began is None:
            self.began, self.due, self.slowed = now, now, 0

    def end(self) -> None:
        """A session delivered: the next outage probes fast again."""
        self.began = None

    def probed(self, at: float) -> None:
        """A probe went at ``at``: the next one is due a gap later."""
        if self.began is None or at - self.began < self.fast_s:
            gap = PROBE_S
        else:
            gap = backoff_s(self.slowed, first=2 * PROBE_S, cap=self.cap_s)
            self.slowed += 1
        self.due = at + gap


class TransportSource(Source):
    """Sessions over ``transport``, reconnecting after each (``reconnect=False``: one
    session, then the monitor is FAILED with the reason; so too after a ``final`` error,
    such as a name that never resolved)."""

    def __init__(self, transport: Transport, *, reconnect: bool = True) -> None:
        self.transport: Transport = transport
        self.reconnect = reconnect
        self._stream: ProcessStream | None = None
        self._rng = random.Random()
        self.probes = ProbeSchedule()

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
                    self.probes.end()
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
        answering again during the wait (it came back: retry now). Probes as
        ``self.probes`` has them due (the schedule runs on across the outage's waits)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        self.probes.begin(loop.time())
        seen_down = False
        while (now := loop.time()) < deadline:
            if self.probes.due > now:
                await asyncio.sleep(min(self.probes.due, deadline) - now)
                continue
            self.probes.probed(now)
            up = await self.transport.reachable(timeout=min(PROBE_S, deadline - now))
            if up is None:  # the transport cannot tell: the plain backoff
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
                return False
            if up and seen_down:
                return True
            seen_down = seen_down or not up
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
