"""``Quiet``: a monitor's source that reaches a machine (its jobs can be acted on) and feeds
nothing by itself; the test feeds the monitor (``ingest_*``) or raises its alerts."""

from __future__ import annotations

import asyncio

from gpumon.backends.monitor import Sink, Source
from gpumon.backends.monitor.sources import AGENT, Capabilities


class Quiet(Source):
    @property
    def capabilities(self) -> Capabilities:
        return AGENT

    @property
    def label(self) -> str:
        return "quiet"

    async def run(self, sink: Sink) -> None:
        await asyncio.Event().wait()
