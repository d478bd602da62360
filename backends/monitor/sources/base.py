"""What every source of a monitor's data is: a ``Source`` feeds one monitor through its
ingestion interface (``Sink``, which ``HostMonitor`` implements) and says what it can do
(``Capabilities``), so nothing else has to ask what kind of host or source it is."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpumon.backends.alerts.facts import NO_FACTS, AlertFacts
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import ConnState, GpuProcess, Health, HostLoad, HostSample, HostStatus
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.parsers.nvidia_smi import SmiFailure
from gpumon.backends.workloads.watch import Workloads

if TYPE_CHECKING:  # asyncio's: not imported where no source runs (``monitor.oneshot``)
    from gpumon.backends.remote import protocol
    from gpumon.backends.transport.base import Transport

__all__ = ["AGENT", "DIRECT_SMI", "REPLAY", "Capabilities", "Sink", "Source"]


# Asked field by field, never compared nor printed: no generated __eq__, __hash__ or
# __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Capabilities:
    """What a source can do; the UI and the session ask these, not the host's kind."""

    actions: bool  # commands reach the machine: job restart / stop / start, doctor, swap
    processes: bool  # GPU compute processes are reported
    logs: bool  # logs (OOM lines, job progress), the kernel log, SGLang metrics are read
    interval: bool  # the sampling interval can be changed


AGENT = Capabilities(actions=True, processes=True, logs=True, interval=True)
DIRECT_SMI = Capabilities(actions=True, processes=True, logs=False, interval=True)
REPLAY = Capabilities(actions=False, processes=True, logs=False, interval=False)


class Sink(Protocol):
    """One monitor's typed ingestion interface: everything a source may tell it."""

    host: HostConfig
    interval: float
    status: HostStatus
    workloads: Workloads
    clock: Callable[[], float]

    @property
    def name(self) -> str: ...

    def ingest_gpu_rows(self, rows: Sequence[str], fields: Sequence[str]) -> bool:
        """One round of ``--query-gpu`` CSV rows; True when it held a GPU."""

    def ingest_sample(self, sample: HostSample) -> None: ...

    def ingest_process_rows(
        self,
        rows: Sequence[str],
        memory: Mapping[str, int] | None = None,
        usage: Sequence[Sequence[Any]] = (),
        usage_source: str = "",
        details: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """``--query-compute-apps`` CSV rows: the processes now; ``memory``: each GPU's
        used MiB (by UUID) read with them, where the source has it; ``usage``, its
        ``usage_source`` and ``details``: as ``protocol.Procs`` has them."""

    def ingest_processes(self, processes: tuple[GpuProcess, ...], at: float) -> None: ...

    def ingest_proc_records(
        self, source: str, records: Sequence[Mapping[str, Any]], at: float
    ) -> None:
        """Process records from ``/proc`` (``remote.host_procs``): ``host`` (the Proxmox
        host's collector) or ``device-files`` (the agent inside the container)."""

    def ingest_mig(self, records: Sequence[Mapping[str, Any]], error: str | None) -> None:
        """The GPU instances of the GPUs in MIG mode (``remote.mig``'s records)."""

    def ingest_minors(self, minors: Mapping[str, int]) -> None:
        """Each GPU's device minor (``/dev/nvidiaN``) by bus id, in any spelling."""

    def ingest_log(
        self,
        tag: str,
        path: str,
        lines: Sequence[str],
        *,
        backlog: bool,
        dropped: int = 0,
        skipped_bytes: int = 0,
        written: float | None = None,
        read_at: float | None = None,
    ) -> None:
        """New lines of a followed log (``tag``: ``job:NAME``, ``sglang`` or ``watch``);
        ``dropped``: lines the agent left out of a flood, ``skipped_bytes``: not read;
        ``written``: a backlog's file last written then (its mtime); ``read_at``: when
        the agent read them, by the target's clock (their stamps' clock)."""

    def ingest_log_problem(self, tag: str, path: str, problem: str | None) -> None:
        """A followed log cannot be read (``problem``: why), or can be again (None)."""

    def ingest_http(
        self,
        tag: str,
        status: int | None,
        body: str,
        error: str | None,
        *,
        at: float | None = None,
    ) -> None:
        """A fetch of a workload's URL (``tag``: ``sglang:PORT``), read at ``at`` by the
        target's clock where said (rates span the readings, not the arrivals)."""

    def ingest_kernel_lines(self, lines: Sequence[str]) -> None: ...

    def ingest_memory_events(self, text: str) -> None:
        """The container's cgroup ``memory.events`` text."""

    def ingest_note(self, text: str) -> None:
        """Something the user should know, said once."""

    def ingest_host_load(self, load: HostLoad) -> None:
        """The target's CPU, memory, load average and swap."""

    def ingest_first_round(self, part: str, ports: Sequence[int]) -> None:
        """A part of the agent finished its first round: ``logs`` (each followed log polled
        once) or ``discover`` (SGLang servers looked for; ``ports``: those found)."""

    def ingest_server_info(self, info: protocol.ServerInfo, *, command: str | None) -> None:
        """A discovered server as the agent sent it (its parallel sizes, the
        ``/dev/nvidiaN`` its process tree holds, its API server's PID) and its command
        line, its secrets masked (``command``; None: not known)."""

    def ingest_alert(
        self,
        kind: str,
        severity: Health,
        message: str,
        *,
        gpu: int | None,
        job: str | None,
        key: str,
        at: float,
        facts: AlertFacts = NO_FACTS,
    ) -> None:
        """An alert raised outside the rules (a recorded one, replayed, with its facts)."""

    def ingest_status(
        self,
        state: ConnState,
        *,
        error: str | None = None,
        attempt: int | None = None,
        next_retry_at: float | None = None,
        source: SampleSource | None = None,
    ) -> None:
        """The connection's state; ``error`` None clears the host's error."""

    def ingest_error(self, text: str) -> None:
        """A host error (nvidia-smi failed) without a change of state."""

    def ingest_smi_failure(self, failure: SmiFailure) -> None:
        """nvidia-smi failed (``failure.message`` becomes the host's error); a driver
        failure (``failure.driver``) is then the cause of the silence."""

    def count_skipped(self, lines: int) -> None:
        """Lines that were not messages (counted, never shown)."""


class Source(abc.ABC):
    """Where one monitor's data comes from. ``run(sink)`` feeds it until the source is
    done or cancelled (the monitor's ``stop``), then ``close()`` releases what it holds."""

    #: The connection to the machine, for actions (None: the source reaches no machine).
    transport: Transport | None = None

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """How the source reaches its data, for the header: ``ssh root@pve1``."""

    @abc.abstractmethod
    async def run(self, sink: Sink) -> None: ...

    def waiting_for(self, sink: Sink) -> list[str]:
        """The parts of this source beside the agent's stream that have not answered once
        yet, in words (``"host processes"``): a one-shot answer waits for them, bounded.
        None by default."""
        return []

    def set_interval(self, seconds: float) -> None:  # noqa: B027 - a source may not care
        """The monitor's interval changed to ``seconds`` (``capabilities.interval`` only)."""

    def probe(self, url: str, tag: str, timeout: float) -> None:  # noqa: B027
        """GET ``url`` on the target once; the answer comes as an HTTP result under
        ``tag`` (sources with an agent only; others ignore it)."""

    async def close(self) -> None:  # noqa: B027
        """Release the source's resources (after ``run`` ended or was cancelled)."""
