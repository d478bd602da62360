"""``AgentSource``: gpumon's agent on the target, over the host's Transport.

Each session looks for a usable Python there (the host's ``python``, else gpumon's own
for ``local``, python3, python), ships the agent to it (``remote.bootstrap``) and
dispatches its messages (``remote.protocol``) to the monitor through one table. The first
choice is tried with the agent itself, no probe first; only when that gives no agent do
probes choose. gpumon's own interpreter runs the installed agent modules instead of a
shipped copy (``transport.prestart``, which may have started it already). Without a
usable Python the session streams nvidia-smi directly instead (``DirectSmiSource``), and
the source's capabilities are that one's until a later session finds a Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from functools import partial

from gpumon.backends.remote import protocol
from gpumon.backends.remote.bootstrap import program_argv
from gpumon.backends.remote.doctor_probe_fs import GPUMON_CHECK
from gpumon.backends.transport.base import Transport, TransportError
from gpumon.backends.transport.prestart import AGENT_FLAGS, installed_argv

from .agent_messages import (
    Handler,
    agent_options,
    command,
    connected,
    dispatch,
    handlers,
    host_load,
    python_usable,
)
from .base import AGENT, Capabilities, Sink
from .connection import TransportSource
from .direct import DirectSmiSource
from .host_procs import HostProcessFeed
from .link import LinkWatch

__all__ = [
    "AGENT_FLAGS",
    "HELLO_TIMEOUT_S",
    "AgentSource",
    "Handler",
    "agent_argv",
    "command",
    "dispatch",
    "handlers",
    "host_load",
    "python_usable",
]

HELLO_TIMEOUT_S = 20.0


def agent_argv(
    python: str, options: protocol.AgentOptions, *, installed: bool = False
) -> tuple[list[str], bytes]:
    """The argv that starts the agent with ``python`` and the bytes for its stdin: its
    source shipped (``remote.bootstrap``), or with ``installed`` (gpumon's own interpreter
    on its own machine) its installed modules run with their ``.pyc`` and the options
    sent as the first line (``transport.prestart``: the argv a prestarted agent has)."""
    if installed:
        line = json.dumps([options.to_json()]) + "\n"
        return installed_argv(python, "agent", AGENT_FLAGS), line.encode()
    return program_argv(python, "agent", args=[options.to_json()], flags=AGENT_FLAGS)


class AgentSource(TransportSource):
    """The agent's stream, reconnected as needed; nvidia-smi direct where no Python is."""

    def __init__(self, transport: Transport, *, reconnect: bool = True) -> None:
        super().__init__(transport, reconnect=reconnect)
        self.direct = DirectSmiSource(transport, reconnect=reconnect)
        self._direct_now = False  # this session streams nvidia-smi directly
        self.host_feed = HostProcessFeed(transport)  # the Proxmox host's view, beside
        self._feed: asyncio.Task[None] | None = None
        self._first_failed = False  # the first choice of Python gave no agent: probe first

    @property
    def capabilities(self) -> Capabilities:
        return self.direct.capabilities if self._direct_now else AGENT

    def waiting_for(self, sink: Sink) -> list[str]:
        """The Proxmox host's process list while it is wanted and has neither come nor
        been turned off (``HostProcessFeed.answered``)."""
        return ["host processes"] if self.host_feed.pending(sink) else []

    def set_interval(self, seconds: float) -> None:
        """The agent applies it at once (it restarts its own nvidia-smi loop)."""
        if self._direct_now:
            self.direct.set_interval(seconds)
        elif (stream := self.stream) is not None:
            stream.write(protocol.SetInterval(seconds).encode())

    def probe(self, url: str, tag: str, timeout: float) -> None:
        """The agent GETs ``url`` once in a thread of its own and sends the answer."""
        if not self._direct_now and (stream := self.stream) is not None:
            stream.write(protocol.Probe(url, tag, timeout).encode())

    async def session(self, sink: Sink) -> bool:
        try:
            first = self._candidates(sink)[0]
            if first != self.transport.own_python and not self._first_failed:
                # The agent on the first choice straight away: a working Python, the usual
                # case, costs no probe first (over SSH a channel and an interpreter
                # start). One that gives not a line (none there, too old) leaves the
                # choice to the probes, as without this, and is not tried first again.
                done = await self._agent_session(sink, first, first_try=True)
                if done is not None:
                    return done
                self._first_failed = True
                await self.close_stream()
            python = await self._find_python(sink)
            self._direct_now = python is None
            if python is None:
                self._start_host_feed(sink)
                return await self.direct.session(sink)
            return bool(await self._agent_session(sink, python))  # never None: probed
        finally:
            feed, self._feed = self._feed, None
            if feed is not None:
                feed.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await feed

    def _start_host_feed(self, sink: Sink) -> None:
        """The host-side collector, once the session's own stream is up (it must not
        slow the agent's start: the first samples come first)."""
        if self._feed is None:
            run = self.host_feed.run(sink)
            self._feed = asyncio.create_task(run, name=f"{sink.name} host procs")

    async def close_stream(self, grace: float = 3.0) -> None:
        await super().close_stream(grace)
        await self.direct.close_stream(grace)

    def _candidates(self, sink: Sink) -> list[str]:
        """The interpreters to try, in order: the host's ``python``, else gpumon's own
        (``local``), python3, python."""
        own = self.transport.own_python
        python = sink.host.python
        return [python] if python else [*([own] if own else []), "python3", "python"]

    async def _find_python(self, sink: Sink) -> str | None:
        own = self.transport.own_python
        for py in self._candidates(sink):
            if py == own:  # gpumon's own interpreter, running this: 3.8 or later for sure
                return py
            res = await self.transport.run(
                [py, "-c", "import sys; print(sys.version_info >= (3, 8))", GPUMON_CHECK],
                timeout=15.0,
            )
            if res.exit_code == 0 and res.stdout.strip() == "True":
                return py
        return None

    async def _agent_session(
        self, sink: Sink, python: str, *, first_try: bool = False
    ) -> bool | None:
        """The agent's session on ``python``; whether it delivered GPU data. With
        ``first_try`` (no probe has vouched for ``python``): None when the stream ended
        or the wait for it ran out before the agent's first line, or its Hello names a
        Python older than 3.8."""
        transport = self.transport
        options = agent_options(
            sink,
            kmsg=transport.kernel_log_path,
            device_files=transport.device_files,
            proc=transport.proc_root,
        )
        argv, data = agent_argv(python, options, installed=python == self.transport.own_python)
        stream = await self.open_stream(argv)
        stream.write(data)
        table = handlers(sink, partial(self._on_hello, sink, first_try))
        got_data = False
        link: LinkWatch | None = None  # from the first line on: a quiet stream is probed
        while True:
            if link is not None:
                line = await link.readline(stream)
            else:
                try:
                    async with asyncio.timeout(HELLO_TIMEOUT_S):
                        line = await stream.readline()
                except TimeoutError:
                    if first_try:  # a Python that hangs: the probes (with their timeout) judge
                        return None
                    raise TransportError(f"the agent on {sink.name} did not start") from None
                if not line and first_try:
                    return None
                link = LinkWatch(self.transport, sink)
            if not line:
                break
            try:
                got_data |= dispatch(sink, table, line)
            except _TooOld:
                return None
        if link is not None and (hung := link.lost()) is not None:
            sink.ingest_error(hung)
            return got_data
        tail = stream.stderr_tail()
        if not got_data and tail:
            sink.ingest_status(sink.status.state, error=f"agent failed: {tail.splitlines()[-1]}")
        return got_data

    def _on_hello(self, sink: Sink, first_try: bool, hello: protocol.Hello) -> bool:
        if first_try and not python_usable(hello.python):
            raise _TooOld(hello.python)
        problem = protocol.version_problem(hello)
        if problem is not None:  # retrying the same agent cannot help
            raise TransportError(f"{sink.name}: {problem}", permanent=True)
        connected(sink, hello)
        self._start_host_feed(sink)
        return False


class _TooOld(Exception):
    """The agent's Hello names a Python that the probe would have refused."""
