"""``gpumon snapshot local`` in gpumon's own process: the agent's own round
(``remote.agent.Agent.one_round``: its Hello, the GPUs, the process list, the host's load,
the kernel log, the logs' and discovery's first rounds) run here, without the agent's
process and without an event loop, its messages through the decoding and the table a
running agent's go through (``sources.agent_messages``) into a ``HostMonitor``. What is
read and how it is parsed is the agent's; only the process and the loop are saved (an
interpreter start, asyncio's import: most of the one-shot's time, issue 41).

Only where one round is the whole answer: the local host on gpumon's own interpreter,
outside a container (``in_process``), and after the round no source still owes its first
answer (a server found or configured: its rate takes two scrapes; the followed logs are
read in the round) and either a GPU sample came or no retry can bring one
(``HostMonitor.final_failure``: no nvidia-smi, the driver's verdict). Otherwise None, and
the caller runs the agent in its own process as for any host (``command_line``). The
dashboard and ``watch`` always run it in its process: a long-lived agent has its own.
"""

from __future__ import annotations

import io
import sys
import time

from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import ConnState
from gpumon.backends.remote import protocol

from .sources.agent_messages import agent_options, connected, dispatch, handlers
from .sources.base import AGENT, Capabilities, Sink, Source
from .state import HostMonitor

__all__ = ["OFF_PATH", "InProcessAgent", "in_process", "local_snapshot"]

# What a snapshot without servers, jobs or a decoded alert fact never uses and so does not
# import (each is imported where first needed): the flight recorder's parser with pickle,
# a job's trackers, verdicts, baselines and memory, the SGLang and vLLM servers' trackers
# and parsers, their config's classes, and `check`'s performance data. CI's import check
# (bench/bench_importtime.py --check) and the import-hygiene test fail if the one-shot
# imports any.
OFF_PATH = (
    "pickle",
    "gpumon.backends.parsers.flight_recorder",
    "gpumon.backends.parsers.collective",
    "gpumon.backends.parsers.progress",
    "gpumon.backends.workloads.trackers",
    "gpumon.backends.workloads.slow",
    "gpumon.backends.workloads.stall",
    "gpumon.backends.workloads.sglang",
    "gpumon.backends.workloads.vllm",
    "gpumon.backends.workloads.memory",
    "gpumon.backends.config.workloads",
    "gpumon.backends.monitor.perfdata",
    "gpumon.backends.parsers.sglang",
    "gpumon.backends.parsers.sglang_log",
    "gpumon.backends.parsers.vllm",
)


class InProcessAgent(Source):
    """The source of a monitor fed by ``local_snapshot``: the agent's capabilities and
    the local host's label, never run as a task (the round feeds the monitor itself)."""

    def __init__(self, host: HostConfig) -> None:
        self._label = host.describe()

    @property
    def capabilities(self) -> Capabilities:
        return AGENT

    @property
    def label(self) -> str:
        return self._label

    async def run(self, sink: Sink) -> None:
        raise NotImplementedError("fed in process by local_snapshot, not run")


def in_process(host: HostConfig) -> bool:
    """Whether ``host`` is this machine as gpumon's own interpreter sees it: the agent's
    process would run the installed agent on this interpreter (``transport.local``)."""
    python = host.python
    return host.kind == "local" and host.container is None and python in (None, sys.executable)


def local_snapshot(host: HostConfig) -> tuple[HostMonitor, float] | None:
    """The monitor after one round of the agent run here, stopped, and the moment the
    round was observed; None where one round is not the answer (see the module's doc)."""
    if not in_process(host):
        return None
    from gpumon.backends.remote.agent import Agent, Output

    monitor = HostMonitor(host, InProcessAgent(host), one_shot=True)
    # the session's first state, as ``TransportSource.run`` says it before the agent starts
    monitor.ingest_status(ConnState.CONNECTING, error=monitor.status.error, attempt=0)
    sent = io.StringIO()  # the lines the agent writes to its stdout
    agent = Agent(agent_options(monitor), Output(sent))
    complete = agent.one_round()

    def on_hello(hello: protocol.Hello) -> bool:
        connected(monitor, hello)  # the same agent's code: no version to check
        return False

    table = handlers(monitor, on_hello)
    for line in sent.getvalue().splitlines():
        dispatch(monitor, table, line.encode())
    if monitor.latest is None:
        answered = monitor.final_failure() is not None
    else:
        answered = complete and not monitor.waiting_for() and not monitor.workloads.rates_pending()
    if not answered:
        return None
    observed_at = time.time()
    monitor.stopped()
    return monitor, observed_at
