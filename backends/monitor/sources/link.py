"""``LinkWatch``: a session's stream that goes quiet has its link probed.

A hung link (the serving sshd stopped, a NAT that drops the flow without a reset) sends
nothing and closes nothing: the idle SSH keepalive (``transport.ssh``) closes it only
after about 20 s. A session's stream is never quiet for long while its link works: the
agent sends a round every interval. So once nothing has come for ``quiet_s`` (a couple of
intervals, at least ``LINK_QUIET_MIN_S``), the transport probes the link
(``Transport.probe_link``: quick SSH keepalives): a link that answers goes on as before,
one that does not is closed within about 1.5 s, its stream ends, and the source connects
again at once; the old session's agent ends when its stdin closes, as after any drop.
"""

from __future__ import annotations

import asyncio

from gpumon.backends.transport.base import ProcessStream, Transport

from .base import Sink

__all__ = ["LINK_QUIET_MIN_S", "LINK_QUIET_ROUNDS", "LinkWatch"]

LINK_QUIET_ROUNDS = 2.0  # intervals without a line before the link is probed
LINK_QUIET_MIN_S = 2.0  # ... and never sooner: a short interval's jitter is no hang


class LinkWatch:
    """Reads a session's stream; probes its link when the stream has been quiet."""

    def __init__(self, transport: Transport, sink: Sink) -> None:
        self.transport = transport
        self.sink = sink
        self.last = asyncio.get_running_loop().time()  # the last line (or the start)
        self.probing_since: float | None = None  # when the probe started

    @property
    def quiet_s(self) -> float:
        return max(LINK_QUIET_ROUNDS * self.sink.interval, LINK_QUIET_MIN_S)

    def heard(self) -> None:
        """A line came: the link works (a probe under way is ended)."""
        self.last = asyncio.get_running_loop().time()
        if self.probing_since is not None:
            self.probing_since = None
            self.transport.link_answered()

    def check(self) -> float | None:
        """Probe the link if the stream has been quiet for ``quiet_s``; the seconds left
        until that is due (None: probing, or nothing to probe: wait for the stream)."""
        if self.probing_since is not None:
            return None
        now = asyncio.get_running_loop().time()
        left = self.last + self.quiet_s - now
        if left > 0:
            return left
        if self.transport.probe_link():
            self.probing_since = now
        return None

    async def readline(self, stream: ProcessStream) -> bytes:
        """The stream's next line (``b""`` at its end), probing the link meanwhile."""
        while True:
            left = self.check()
            try:
                async with asyncio.timeout(left):
                    line = await stream.readline()
            except TimeoutError:
                continue
            if line:
                self.heard()
            return line

    def lost(self) -> str | None:
        """What to say when the stream ended while its link was probed: the link did
        not answer (None: it ended otherwise)."""
        if self.probing_since is None or not self.transport.link_lost():
            return None
        quiet = self.probing_since - self.last
        return (
            f"no data from {self.sink.name} for {quiet:.0f} s and no answer to SSH "
            "keepalives: the link is hung; connecting again"
        )
