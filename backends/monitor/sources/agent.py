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
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from gpumon.backends import untrusted
from gpumon.backends.masking import masked_shell_line
from gpumon.backends.model import ConnState, Health, HostLoad
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.parsers.nvidia_smi import (
    AGENT_FIELDS,
    PROCESS_FIELDS,
    QUERY_FIELDS,
    classify_smi_failure,
)
from gpumon.backends.parsers.vllm import VLLM_METRICS_LINE_FILTER
from gpumon.backends.remote import protocol
from gpumon.backends.remote.bootstrap import program_argv
from gpumon.backends.remote.doctor_probe_fs import GPUMON_CHECK
from gpumon.backends.transport.base import Transport, TransportError
from gpumon.backends.transport.prestart import AGENT_FLAGS, installed_argv

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
    "dispatch",
    "handlers",
]

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 20.0
M = TypeVar("M", bound=protocol.Message)
Handler = Callable[[dict[str, Any]], bool]  # a decoded line -> "it held GPU data"


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


def _route(message: type[M], handle: Callable[[M], bool]) -> tuple[str, Handler]:
    return message.TYPE, lambda raw: handle(message.from_wire(raw))


def _quiet(ingest: Callable[[M], object]) -> Callable[[M], bool]:
    """A handler for a message that carries no GPU data."""

    def handle(message: M) -> bool:
        ingest(message)
        return False

    return handle


def handlers(sink: Sink, on_hello: Callable[[protocol.Hello], bool]) -> dict[str, Handler]:
    """The dispatch table: wire type -> what the monitor does with it."""
    p = protocol

    def smi_error(m: protocol.SmiError) -> None:
        failure = classify_smi_failure(m.output, m.exit)
        if failure is None:
            sink.ingest_error(f"nvidia-smi failed (exit {m.exit})")
        else:
            sink.ingest_smi_failure(failure)

    def thread_died(m: protocol.ThreadDied) -> None:
        where = f" at {m.where}" if m.where else ""
        text = f"agent: its {m.thread} thread died ({m.error}{where}); it is started again"
        sink.ingest_error(text)
        key = f"agent_thread:{m.thread}:{m.error}"
        at = m.t if m.t > 0 else time.time()
        sink.ingest_alert("agent_error", Health.CRITICAL, text, gpu=None, job=None, key=key, at=at)

    return dict(
        [
            _route(p.Hello, on_hello),
            _route(p.Gpus, lambda m: sink.ingest_gpu_rows(m.rows, m.fields or QUERY_FIELDS)),
            _route(
                p.Procs,
                _quiet(
                    lambda m: sink.ingest_process_rows(
                        m.rows, m.memory, m.usage, m.usage_source, m.details
                    )
                ),
            ),
            _route(
                p.ProcRecords,
                _quiet(lambda m: sink.ingest_proc_records(m.source, m.records, sink.clock())),
            ),
            _route(p.Minors, _quiet(lambda m: sink.ingest_minors(m.minors))),
            _route(p.Mig, _quiet(lambda m: sink.ingest_mig(m.instances, m.error))),
            _route(p.SmiError, _quiet(smi_error)),
            _route(
                p.Log,
                _quiet(
                    lambda m: sink.ingest_log(
                        m.tag,
                        m.path,
                        m.lines,
                        backlog=m.backlog,
                        dropped=m.dropped,
                        skipped_bytes=m.skipped_bytes,
                        written=m.written,
                        read_at=m.t if m.t > 0 else None,
                    )
                ),
            ),
            _route(
                p.LogProblem, _quiet(lambda m: sink.ingest_log_problem(m.tag, m.path, m.problem))
            ),
            _route(
                p.Http,
                _quiet(lambda m: sink.ingest_http(m.tag, m.status, m.body, m.error, at=m.t)),
            ),
            _route(p.Kernel, _quiet(lambda m: sink.ingest_kernel_lines(m.lines))),
            _route(p.MemoryEvents, _quiet(lambda m: sink.ingest_memory_events(m.text))),
            _route(p.Note, _quiet(lambda m: sink.ingest_note(m.text))),
            _route(p.ThreadDied, _quiet(thread_died)),
            _route(p.HostStats, _quiet(lambda m: sink.ingest_host_load(host_load(m)))),
            _route(p.FirstRound, _quiet(lambda m: sink.ingest_first_round(m.part, m.ports))),
            _route(
                p.ServerInfo,
                _quiet(lambda m: sink.ingest_server_info(*server_info(m), command=command(m))),
            ),
        ]
    )


def command(m: protocol.ServerInfo) -> str | None:
    """The server's command line as a shell line, its secrets masked (``--api-key ****``,
    the rules of ``masking``, which the bundle's scrubbing shares) before anything keeps
    it; None: not sent."""
    return masked_shell_line(m.argv) if m.argv else None


def server_info(
    m: protocol.ServerInfo,
) -> tuple[str, int, dict[str, int], list[int], int | None]:
    sizes = {"tp": m.tp, "pp": m.pp, "dp": m.dp}
    pid = m.pid if m.pid > 0 else None
    return m.engine, m.port, {k: v for k, v in sizes.items() if v is not None}, m.minors, pid


def dispatch(sink: Sink, table: dict[str, Handler], line: bytes) -> bool:
    """One line of the agent's output through ``table``; True when it held GPU data.
    A line that is not a JSON object is counted as skipped; an unknown type is ignored
    (a newer agent's message)."""
    try:
        raw: Any = untrusted.loads(line)
    except ValueError:
        sink.count_skipped(1)
        return False
    if not isinstance(raw, dict):
        sink.count_skipped(1)
        return False
    handle = table.get(str(raw.get("type")))
    return handle(raw) if handle is not None else False


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
        workloads = sink.workloads
        options = protocol.AgentOptions(
            fields=list(AGENT_FIELDS),
            process_fields=list(PROCESS_FIELDS),
            nvidia_smi=sink.host.nvidia_smi,
            interval=sink.interval,
            logs=list(workloads.log_specs()),
            kernel=sink.host.kernel_log,
            kmsg=self.transport.kernel_log_path,
            device_files=self.transport.device_files,
            http=list(workloads.http_targets()),
            sglang_discover=workloads.discover(),
            vllm_discover=workloads.discover_vllm(),
            vllm_filter=VLLM_METRICS_LINE_FILTER,
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
        source = SampleSource(hello.source) if hello.source in set(SampleSource) else None
        sink.ingest_status(ConnState.CONNECTED, source=source, error=None)
        self._start_host_feed(sink)
        if hello.note:
            log.info("%s: %s", sink.name, hello.note)
        return False


class _TooOld(Exception):
    """The agent's Hello names a Python that the probe would have refused."""


def python_usable(version: str) -> bool:
    """Whether a Hello's ``python`` (``3.11.7``) is one the agent supports: 3.8 or
    later, what the probe asks (``sys.version_info >= (3, 8)``)."""
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return len(parts) == 2 and parts >= (3, 8)


def host_load(m: protocol.HostStats) -> HostLoad:
    """The agent's ``HostStats`` as the monitor's record."""
    load = m.load
    return HostLoad(
        time=m.t,
        cpu_pct=m.cpu_pct,
        cpus=m.cpus,
        mem_total_kib=m.mem_total_kib,
        mem_available_kib=m.mem_available_kib,
        swap_total_kib=m.swap_total_kib,
        swap_free_kib=m.swap_free_kib,
        load=(load[0], load[1], load[2]) if load is not None and len(load) == 3 else None,
    )
