"""``DirectSmiSource``: a target without a usable Python. ``nvidia-smi --query-gpu ...
-lms N`` is streamed directly and the process list is polled beside it; there is no
agent, so no logs, kernel log or SGLang metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from gpumon.backends import untrusted
from gpumon.backends.model import ConnState
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.parsers.nvidia_smi import (
    SAMPLE_FIELDS,
    classify_smi_failure,
    compute_apps_args,
    fields_for_help,
    query_gpu_args,
)
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError

from .base import DIRECT_SMI, Capabilities, Sink
from .connection import TransportSource
from .link import LinkWatch

if TYPE_CHECKING:
    from gpumon.backends.remote.agent import LongLine

__all__ = ["PROCESS_POLL_MIN_S", "DirectSmiSource"]

log = logging.getLogger(__name__)

PROCESS_POLL_MIN_S = 2.0  # each poll is a process start on the target


class DirectSmiSource(TransportSource):
    """Streams nvidia-smi's loop output; a new interval restarts the loop at that rate
    (the loop's own ``-lms`` cannot be changed while it runs)."""

    def __init__(self, transport: Transport, *, reconnect: bool = True) -> None:
        super().__init__(transport, reconnect=reconnect)
        self._restart = asyncio.Event()
        self.fields: tuple[str, ...] = SAMPLE_FIELDS  # what this driver's nvidia-smi knows
        self._names_cut: set[str] = set()  # GPUs whose long name was cut (said once each)
        self._dropped_said = False  # a long line that is no GPU row was said this session

    @property
    def capabilities(self) -> Capabilities:
        return DIRECT_SMI

    def set_interval(self, seconds: float) -> None:
        if self.stream is not None:
            self._restart.set()

    async def _open(self, sink: Sink) -> ProcessStream:
        ms = max(int(sink.interval * 1000), 100)
        argv = [sink.host.nvidia_smi, *query_gpu_args(self.fields, loop_ms=ms)]
        return await self.open_stream(argv)

    async def _probe_fields(self, sink: Sink) -> tuple[str, ...]:
        """The fields this nvidia-smi knows (``fields_for_help``): before R535 there is no
        ``clocks_event_reasons.*``, and one unknown field fails the whole query. Probed
        each session (a driver upgrade comes with a reconnect); no answer: all of them."""
        try:
            res = await self.transport.run([sink.host.nvidia_smi, "--help-query-gpu"], timeout=15)
        except TransportError:
            return SAMPLE_FIELDS
        if res.exit_code != 0:
            return SAMPLE_FIELDS
        return fields_for_help(res.stdout, SAMPLE_FIELDS) or SAMPLE_FIELDS

    async def session(self, sink: Sink) -> bool:
        self._restart.clear()
        self._dropped_said = False
        self.fields = fields = await self._probe_fields(sink)
        stream = await self._open(sink)
        sink.ingest_status(ConnState.CONNECTED, source=SampleSource.SMI_DIRECT, error=None)
        procs = asyncio.create_task(self._poll_processes(sink))
        # The agent's own row handling, imported here: every agent session builds this
        # source, and a host with Python never runs it (the agent's modules stay unloaded).
        from gpumon.backends.remote import agent as shipped

        index = fields.index("index") if "index" in fields else 1
        batcher = shipped.RowBatcher(index, len(fields))
        got_data = False
        tail: list[str] = []
        link = LinkWatch(self.transport, sink)  # a quiet stream has its link probed

        def flush() -> None:
            nonlocal got_data
            if rows := batcher.flush():
                got_data |= sink.ingest_gpu_rows(rows, fields)

        try:
            while True:
                if self._restart.is_set():  # a new interval: the loop again at that rate
                    self._restart.clear()
                    flush()
                    await self.close_stream(grace=0.0)  # nvidia-smi never reads stdin
                    stream = await self._open(sink)
                    link.heard()  # the new loop's quiet counts from its start
                try:
                    async with asyncio.timeout(shipped.BATCH_QUIET_S):
                        line = await stream.readline()
                except TimeoutError:
                    flush()
                    link.check()
                    continue
                if not line:
                    break
                link.heard()
                if len(line) > shipped.LINE_MAX_BYTES:  # the agent's bound, said as it says it
                    kept = self._long_row(sink, shipped.LongLine(line.rstrip(b"\n")), fields)
                    if kept is None:
                        continue
                    line = kept
                text = untrusted.printable_text(line.decode("utf-8", "replace"))
                tail = [*tail[-19:], text.rstrip("\n")]
                if rows := batcher.feed(text):
                    got_data |= sink.ingest_gpu_rows(rows, fields)
            flush()
        finally:
            procs.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await procs
        if (hung := link.lost()) is not None:
            sink.ingest_error(hung)
        elif not got_data:
            await stream.close()
            failure = classify_smi_failure("\n".join(tail), stream.exit_code)
            if failure is not None:
                sink.ingest_smi_failure(failure)
        return got_data

    def _long_row(self, sink: Sink, line: LongLine, fields: tuple[str, ...]) -> bytes | None:
        """A line over the agent's bound, as the agent takes it: the GPU row with its
        name cut (said once per GPU), else dropped (said once per session)."""
        from gpumon.backends.remote import agent as shipped

        kept = shipped.shorten_row(line, fields)
        if kept is None:
            if not self._dropped_said:
                self._dropped_said = True
                sink.ingest_note(shipped.long_line_note(line.size))
            return None
        row, index = kept
        if index not in self._names_cut:
            self._names_cut.add(index)
            sink.ingest_note(shipped.name_cut_note(index, line.size))
        return row.encode()

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
