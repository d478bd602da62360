"""``DirectSmiSource``: a target without a usable Python. ``nvidia-smi --query-gpu ...
-lms N`` is streamed directly and the process list is polled beside it; there is no
agent, so no logs, kernel log or SGLang metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gpumon.backends import untrusted
from gpumon.backends.model import ConnState
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.parsers.nvidia_smi import (
    QUERY_FIELDS,
    classify_smi_failure,
    compute_apps_args,
    query_gpu_args,
)
from gpumon.backends.remote.agent import BATCH_QUIET_S, RowBatcher
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import DIRECT_SMI, Capabilities, Sink
from .connection import TransportSource

__all__ = ["PROCESS_POLL_MIN_S", "DirectSmiSource"]

log = logging.getLogger(__name__)

PROCESS_POLL_MIN_S = 2.0  # each poll is a process start on the target


class DirectSmiSource(TransportSource):
    """Streams nvidia-smi's loop output; a new interval restarts the loop at that rate
    (the loop's own ``-lms`` cannot be changed while it runs)."""

    def __init__(self, transport: Transport, *, reconnect: bool = True) -> None:
        super().__init__(transport, reconnect=reconnect)
        self._restart = asyncio.Event()

    @property
    def capabilities(self) -> Capabilities:
        return DIRECT_SMI

    def set_interval(self, seconds: float) -> None:
        if self.stream is not None:
            self._restart.set()

    async def _open(self, sink: Sink) -> ProcessStream:
        ms = max(int(sink.interval * 1000), 100)
        argv = [sink.host.nvidia_smi, *query_gpu_args(QUERY_FIELDS, loop_ms=ms)]
        return await self.open_stream(argv)

    async def session(self, sink: Sink) -> bool:
        self._restart.clear()
        stream = await self._open(sink)
        sink.ingest_status(ConnState.CONNECTED, source=SampleSource.SMI_DIRECT, error=None)
        procs = asyncio.create_task(self._poll_processes(sink))
        batcher = RowBatcher(QUERY_FIELDS.index("index"), len(QUERY_FIELDS))
        got_data = False
        tail: list[str] = []

        def flush() -> None:
            nonlocal got_data
            if rows := batcher.flush():
                got_data |= sink.ingest_gpu_rows(rows, QUERY_FIELDS)

        try:
            while True:
                if self._restart.is_set():  # a new interval: the loop again at that rate
                    self._restart.clear()
                    flush()
                    await self.close_stream(grace=0.0)  # nvidia-smi never reads stdin
                    stream = await self._open(sink)
                try:
                    async with asyncio.timeout(BATCH_QUIET_S):
                        line = await stream.readline()
                except TimeoutError:
                    flush()
                    continue
                if not line:
                    break
                text = untrusted.printable_text(line.decode("utf-8", "replace"))
                tail = [*tail[-19:], text.rstrip("\n")]
                if rows := batcher.feed(text):
                    got_data |= sink.ingest_gpu_rows(rows, QUERY_FIELDS)
            flush()
        finally:
            procs.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await procs
        if not got_data:
            await stream.close()
            failure = classify_smi_failure("\n".join(tail), stream.exit_code)
            if failure is not None:
                sink.ingest_error(failure.message)
        return got_data

    async def _poll_processes(self, sink: Sink) -> None:
        """The process list every ``max(2 s, interval)``. A poll the transport cannot run
        is said (once per reason) and the next one tried as usual."""
        argv = [sink.host.nvidia_smi, *compute_apps_args()]
        while True:
            try:
                res = await self.transport.run(argv, timeout=15.0)
            except TransportError as e:
                log.warning("%s: process list: %s", sink.name, e)
                sink.ingest_note(f"the GPU process list could not be read: {e}")
            else:
                if res.exit_code == 0:
                    sink.ingest_process_rows(res.stdout.splitlines())
            await asyncio.sleep(max(PROCESS_POLL_MIN_S, sink.interval))
