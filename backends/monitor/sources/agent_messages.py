"""What the monitor does with the agent's messages (``remote.protocol``), and the options
it starts the agent with: one table (``handlers``) for every way the agent runs, its own
process over a transport (``AgentSource``) or one round in gpumon's own process
(``monitor.oneshot``: ``snapshot local``). No asyncio here: the in-process one-shot runs
without an event loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
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
from gpumon.backends.parsers.vllm_filter import VLLM_METRICS_LINE_FILTER
from gpumon.backends.remote import protocol

from .base import Sink

__all__ = [
    "Handler",
    "agent_options",
    "command",
    "connected",
    "dispatch",
    "handlers",
    "host_load",
    "python_usable",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=protocol.Message)
Handler = Callable[[dict[str, Any]], bool]  # a decoded line -> "it held GPU data"


def agent_options(
    sink: Sink,
    *,
    kmsg: str | None = None,
    device_files: bool | None = None,
    proc: str | None = None,
) -> protocol.AgentOptions:
    """What the agent of ``sink``'s host is asked to read: the GPU and process fields,
    its logs, the kernel log (``kmsg``: where the transport's machine has it), who holds
    the device files (``device_files``), the SGLang and vLLM servers (found in ``proc``).
    ``kmsg``, ``device_files`` and ``proc`` left out: ``AgentOptions``' own (the machine
    gpumon runs on)."""
    workloads = sink.workloads
    where: dict[str, Any] = {"kmsg": kmsg, "device_files": device_files, "proc": proc}
    return protocol.AgentOptions(
        fields=list(AGENT_FIELDS),
        process_fields=list(PROCESS_FIELDS),
        nvidia_smi=sink.host.nvidia_smi,
        interval=sink.interval,
        logs=list(workloads.log_specs()),
        kernel=sink.host.kernel_log,
        http=list(workloads.http_targets()),
        sglang_discover=workloads.discover(),
        vllm_discover=workloads.discover_vllm(),
        vllm_filter=VLLM_METRICS_LINE_FILTER,
        **{name: value for name, value in where.items() if value is not None},
    )


def connected(sink: Sink, hello: protocol.Hello) -> None:
    """The agent said ``hello`` (one gpumon accepts): the host is connected, its samples
    read as the Hello says (NVML or nvidia-smi)."""
    source = SampleSource(hello.source) if hello.source in set(SampleSource) else None
    sink.ingest_status(ConnState.CONNECTED, source=source, error=None)
    if hello.note:
        log.info("%s: %s", sink.name, hello.note)


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
                _quiet(lambda m: sink.ingest_server_info(m, command=command(m))),
            ),
        ]
    )


def command(m: protocol.ServerInfo) -> str | None:
    """The server's command line as a shell line, its secrets masked (``--api-key ****``,
    the rules of ``masking``, which the bundle's scrubbing shares) before anything keeps
    it; None: not sent."""
    return masked_shell_line(m.argv) if m.argv else None


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
