"""HostMonitor: one machine's state, kept current by one Source.

The monitor holds the latest sample, the processes, the bounded histories, the
connection status, the alerts, the flight recorder and the workload trackers, and tells
its listeners after every change. Where the data comes from is its ``source`` (the agent
over a transport, nvidia-smi direct, a replay: ``monitor.sources``), which feeds it
through the ``ingest_*`` methods. The UI and the CLI read from the monitor; nothing else
talks to the machine for monitoring. While disconnected the last values stay, and
``stale_s()`` says how old they are. The monitor judges its own connection: a host it
cannot reach (``host_unreachable``), a connected one that sends nothing (``stale_data``)
and a driver that says why nothing comes (``driver_error``) are alerts like any other.

Two clocks: ``clock`` (the wall clock) dates what is said and recorded (samples, alerts);
every age and timeout is counted on ``ticks`` (monotonic) from when data was received, so
a wall-clock step (NTP, a clock set by hand) changes no verdict. The data's age
(``stale_s``) is its true age; a silence is judged on ``watch_clock()``, which leaves out
the spans gpumon itself did not run (SIGSTOP, a paused VM): ``CLOCK_MONOTONIC`` runs on
through a SIGSTOP, so afterwards every host would look silent for as long as gpumon was
stopped. Such a span is seen as a gap in gpumon's own tick (``SUSPENDED_AFTER_S``) and
left out, so each source has its usual time to answer before it is judged silent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.alerts.facts import NO_FACTS, AlertFacts
from gpumon.backends.config.load import HostConfig
from gpumon.backends.listeners import Listeners
from gpumon.backends.model import (
    ConnState,
    GpuHistory,
    GpuProcess,
    GpuRegistry,
    Health,
    HostLoad,
    HostSample,
    HostStatus,
    MigInstance,
    ProcessSource,
    bus_id_key,
)
from gpumon.backends.model import Source as SampleSource
from gpumon.backends.parsers.mig import parse_mig_records
from gpumon.backends.parsers.nvidia_smi import SmiFailure, parse_compute_apps, parse_query_gpu
from gpumon.backends.parsers.processes import (
    container_view,
    device_gpus,
    from_record,
    with_details,
    with_usage,
)
from gpumon.backends.recording.recorder import FlightRecorder
from gpumon.backends.workloads.engine import VLLM
from gpumon.backends.workloads.watch import LogSource, Workloads

from .sources.base import Source

if TYPE_CHECKING:
    # asyncio only where the monitor runs on an event loop (``start``, ``stop``, the
    # waits): ``snapshot local`` in process (``monitor.oneshot``) feeds it without one.
    import asyncio

    from gpumon.backends.remote import protocol
    from gpumon.backends.transport.base import Transport

__all__ = [
    "FIRST_ROUNDS_S",
    "HISTORY_S",
    "NO_DATA_FLOOR_S",
    "SUSPENDED_AFTER_S",
    "HostMonitor",
    "Listener",
    "ticks_for",
]

log = logging.getLogger(__name__)

HISTORY_S = 3600.0  # the detail view's longest window
# A connected stream silent for two of its periods says "no data" at once, but never
# sooner than this: a round's rows are batched until a 0.15 s pause (agent.BATCH_QUIET_S),
# nvidia-smi's -lms period is the interval plus its own query time (tens to hundreds of
# ms on a many-GPU box) and SSH adds its latency, so at a 0.1 s interval the gap between
# two healthy rounds reaches about 0.5 s; 1 s keeps a 2x margin over that.
NO_DATA_FLOOR_S = 1.0
LOG_FLOWS_KEPT = 64  # followed files whose counts are kept (a glob's rotated names come and go)
STOP_TIMEOUT_S = 10.0  # stop() waits this long for the source to close its connection
GAPS_KEPT = 9  # the stream's typical period is the median gap of the last rounds
# A one-shot answer (snapshot, check) and watch's first report wait this long after the
# first GPU sample for every other source's first round (``waiting_for``): the Proxmox
# host's process list takes an SSH channel and a host-side nvidia-smi, a rate two scrapes.
FIRST_ROUNDS_S = 10.0
# gpumon did not run (stopped, suspended, its event loop blocked) when its judging clock is
# read this much later than the watchdog's period after the previous reading: the watchdog
# reads it every period, so a later reading means nothing ran in between.
SUSPENDED_AFTER_S = 5.0

Listener = Callable[["HostMonitor"], None]


def ticks_for(clock: Callable[[], float]) -> Callable[[], float]:
    """The clock ages are judged on beside the wall clock ``clock``: the monotonic clock
    for the real wall clock, else ``clock`` itself (a test's or a replay's clock is both:
    it moves only when told to)."""
    return time.monotonic if clock is time.time else clock


# A counter per followed file, read field by field (never compared nor printed): no
# generated __eq__ or __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(slots=True, eq=False, repr=False)
class LogFlow:
    """What one followed log file sent so far (``snapshot --json``'s ``logs``)."""

    tag: str
    lines: int = 0
    lines_dropped: int = 0  # left out of floods by the agent (keyword lines and newest kept)
    bytes_skipped: int = 0  # skipped unread: written faster than the agent scans


class HostMonitor:
    """Watches one host. ``start()`` it inside a running event loop; ``stop()`` when done."""

    def __init__(
        self,
        host: HostConfig,
        source: Source,
        *,
        clock: Callable[[], float] = time.time,
        ticks: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
        history_s: float = HISTORY_S,
        record: bool = True,
        one_shot: bool = False,
    ) -> None:
        """``clock``: the wall clock that dates samples and alerts; ``ticks``: the one ages
        are judged on (``ticks_for(clock)`` when left out); ``sleep``: the watchdog's
        (tests pass a FakeClock's; left out, asyncio's); ``one_shot``: a one-shot
        command's (``check``, ``snapshot``): an incident an earlier run recorded is not
        recorded again."""
        self.host = host
        self.source = source
        self.clock = clock
        self._ticks = ticks if ticks is not None else ticks_for(clock)
        self._sleep = sleep
        self._unwatched_s = 0.0  # spans gpumon did not run (``watch_clock``)
        self._beat: float | None = None  # the last reading of ``_ticks`` while started
        self._stopped_at: float | None = None  # ``ticks`` when ``stop`` began
        self.interval = host.interval
        self.status = HostStatus(ConnState.CONNECTING, clock(), transport=source.label)
        self.latest: HostSample | None = None
        self.processes: tuple[GpuProcess, ...] = ()  # what the samples carry (see below)
        self.processes_time: float | None = None
        self.mig: tuple[MigInstance, ...] = ()  # the GPU instances of GPUs in MIG mode
        self.mig_error: str | None = None  # what of them could not be read
        self.mig_time: float | None = None  # when they came (None: never)
        self._memory_at_processes: tuple[tuple[int, int], ...] = ()  # HostSample's
        self._memory_with_processes: dict[str, int] = {}  # used MiB by UUID, with the list
        # The lists ``processes`` is made of: the driver's inside the container, the
        # device-file users there, and the Proxmox host's (which wins while it is fresh).
        self._driver_processes: tuple[GpuProcess, ...] = ()
        # each process's SM / memory-bandwidth % ([gpu, pid, sm, mem]) and who read them
        self._usage: tuple[Sequence[Any], ...] = ()
        self.usage_source = ""
        self._device_processes: tuple[GpuProcess, ...] = ()  # the GPUs they hold: ``_refs``
        self._minors: dict[str, int] = {}  # each GPU's /dev/nvidiaN by ``bus_id_key``
        self._refs = GpuRegistry()  # the GPUs of the newest sample, by every name
        self._gpu_ids: list[tuple[int, str | None, str | None, int | None]] = []  # _refs' GPUs
        self._host_processes: tuple[GpuProcess, ...] = ()
        self.host_processes_time: float | None = None
        self.host_load: HostLoad | None = None  # the target's CPU, RAM, load, swap
        self.histories: dict[int, GpuHistory] = {}
        self.skipped_lines = 0  # malformed lines dropped since start
        self.log_flow: dict[str, LogFlow] = {}  # per followed file: what came, what did not
        self.samples = 0
        # On ``watch_clock``: when the last round came, the first one (FIRST_ROUNDS_S),
        # the start (blind since then until the first round), the connection state's
        # start and the Proxmox host's last process list; on ``ticks``: when the newest
        # sample came (its age).
        self._latest_came: float | None = None
        self._last_data_at: float | None = None
        self._first_data_at: float | None = None
        self._started_at = self.watch_clock()
        self._state_since = self._started_at
        self._host_processes_at: float | None = None
        self._smi_failure: SmiFailure | None = None  # the last one since the last round
        self._gaps: deque[float] = deque(maxlen=GAPS_KEPT)
        self.listeners: Listeners[[HostMonitor]] = Listeners("monitor listener")
        self._history_s = history_s
        self._history_len = max(int(history_s / max(self.interval, 0.1)), 60)
        self._task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._updated: asyncio.Event | None = None  # made by the first wait_for_update
        self.alerts = AlertEngine(
            host.name,
            host.alerts,
            clock=clock,
            container=host.container,
            jobs={j.name: j.gpus for j in host.jobs},
        )
        self.alerts.interval_s = self.interval
        self.recorder = FlightRecorder(host.name, clock=clock)
        self.recorder.jobs = [{"name": j.name, "gpus": list(j.gpus)} for j in host.jobs]
        self.recorder.container = host.container
        if record:  # the flight recorder writes an incident's window on a critical alert
            self.alerts.add_listener(self.recorder.on_alert)
        if record and one_shot:  # ... once per incident across runs (a check a minute)
            self.recorder.per_incident()
        self.workloads = self._workloads()
        # The host's samples before a first live one (until its time), where a source
        # knows them: the simulator's idle scenario, whose story is a duration.
        self.past: Callable[[float], Sequence[HostSample]] | None = None

    # --- public ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.host.name

    @property
    def transport(self) -> Transport:
        """The connection to the machine, for actions; only where the source has one
        (``source.capabilities.actions``): a replay reaches no machine."""
        transport = self.source.transport
        if transport is None:
            raise LookupError(f"{self.name}: {self.source.label} reaches no machine")
        return transport

    def add_listener(self, listener: Listener) -> None:
        """``listener(monitor)`` runs on the event loop after every change of state."""
        self.listeners.add(listener)

    def watch_clock(self) -> float:
        """Now on the clock silences are judged by: ``ticks`` (monotonic), less the spans
        gpumon itself did not run while started. A reading more than
        ``SUSPENDED_AFTER_S`` past the watchdog's period after the previous one is such a
        span, beyond that period."""
        return self._now() - self._unwatched_s

    def _now(self) -> float:
        """``ticks`` now, noting a span gpumon did not run (``watch_clock``). A stopped
        monitor's clock stands at its stop: a one-shot judges the ages as they were when
        it stopped watching, not after the wait for the target's processes to end."""
        if self._stopped_at is not None:
            return self._stopped_at
        t = self._ticks()
        if self._beat is not None:
            gap = t - self._beat
            period = self._watchdog_period()
            if gap > period + SUSPENDED_AFTER_S:
                self._unwatched_s += gap - period
                log.info(
                    "%s: gpumon did not run for %.0f s (stopped or suspended): "
                    "not counted as the host's silence",
                    self.name,
                    gap,
                )
            self._beat = max(self._beat, t)
        return t

    def stale_s(self) -> float | None:
        """Age of the newest GPU sample in seconds, since it came (a span gpumon did not
        run included: the values on show are that old); None before the first."""
        if self.latest is None or self._latest_came is None:
            return None
        return max(self._now() - self._latest_came, 0.0)

    def age_s(self, sample: HostSample) -> float | None:
        """Seconds since ``sample`` came (the newest, or an older one on a paused screen:
        its distance from the newest on the samples' own stamps)."""
        newest = self.stale_s()
        if newest is None or self.latest is None:
            return None
        return newest + max(self.latest.time - sample.time, 0.0)

    def is_stale(self) -> bool:
        age = self.stale_s()
        return age is None or age > max(3 * self.interval, 3.0)

    def silence_limit(self) -> float:
        """How long a connected stream may be silent before the header says "no data":
        two of its periods (the interval, or the stream's typical gap when nvidia-smi is
        slower than asked), at least ``NO_DATA_FLOOR_S``."""
        import statistics  # with fractions and decimal: not on the one-shot's import path

        typical = statistics.median(self._gaps) if self._gaps else self.interval
        return max(2.0 * max(self.interval, typical), NO_DATA_FLOOR_S)

    def no_data(self) -> bool:
        """Connected, but no GPU data for longer than ``silence_limit()``: a hung link or a
        stuck sampler, seen from the data itself long before SSH keepalive gives up.
        Counted from the later of the last round and the session's start."""
        if self._last_data_at is None:
            return False
        silent = self.silent_s()
        return silent is not None and silent > self.silence_limit()

    def silent_s(self) -> float | None:
        """Seconds a connected host has sent no GPU data (counted from the later of the last
        round and the session's start); None while not connected."""
        if self.status.state != ConnState.CONNECTED:
            return None
        since = max(self._last_data_at or self._state_since, self._state_since)
        return max(self.watch_clock() - since, 0.0)

    def blind_s(self) -> float:
        """Seconds since the host last sent GPU data (or since the start, before any)."""
        since = self._last_data_at if self._last_data_at is not None else self._started_at
        return max(self.watch_clock() - since, 0.0)

    def driver_failure(self) -> SmiFailure | None:
        """The driver's own word on why no GPU data comes ("GPU is lost", no driver, a
        version mismatch: ``SmiFailure.driver``): the last nvidia-smi failure since the
        last round, while the host is connected or its last session ended with it (a host
        that then went down is unreachable, whatever its driver said before)."""
        failure = self._smi_failure
        if failure is None or not failure.driver:
            return None
        if self.status.state == ConnState.CONNECTED or self.status.error == failure.message:
            return failure
        return None

    def final_failure(self) -> SmiFailure | None:
        """The sampler's failure since the last round where running it again cannot help
        (``SmiFailure.final``): no nvidia-smi on the target at once; the driver's verdict
        once its ``driver_error`` alert is raised (it held past a blip's floor:
        ``AlertEngine.on_silence``), so a one-shot that stops then has the alert too."""
        failure = self._smi_failure
        if failure is None or not failure.final:
            return None
        if failure.driver and not any(a.kind == "driver_error" for a in self.alerts.active()):
            return None
        return failure

    def check_silence(self) -> None:
        """Raise, escalate or end the alerts about the connection now: ``stale_data`` /
        ``driver_error`` (connected, no GPU data) and ``host_unreachable`` (sessions keep
        failing). The watchdog calls this between samples and every change of the
        connection does; a sample ends them by itself. A stopped monitor keeps them as
        they were (a one-shot's verdict reads them after the stop)."""
        if self._judge_connection():
            self._notify()

    def _judge_connection(self) -> bool:
        """``check_silence`` without telling the listeners; True when the alerts changed.
        Ages on ``watch_clock``; the alerts are dated by the wall clock."""
        state = self.status.state
        if state == ConnState.STOPPED:
            return False
        at = self.clock()
        before = self.alerts.active()
        driver = self.driver_failure()
        if driver is not None:  # it answered: the driver says why nothing comes
            self.alerts.on_silence(
                self.blind_s(), self.interval, at, error=driver.message, driver=True
            )
            self.alerts.on_unreachable(0, None, None, at)
        elif state == ConnState.CONNECTED:
            silent = self.silent_s()
            self.alerts.on_silence(silent, self.interval, at, error=self.status.error)
            self.alerts.on_unreachable(0, None, None, at)
        else:
            self.alerts.on_silence(None, self.interval, at)
            self.alerts.on_unreachable(
                self.status.attempt,
                self.blind_s(),
                self.status.error,
                at,
                gave_up=state == ConnState.FAILED,
            )
        return self.alerts.active() != before

    def clear_state(self) -> None:
        """Forget every sample, history, alert and workload state, as before the first
        sample (a replay that rewinds plays into the same monitor again); listeners stay."""
        self.latest = None
        self.processes, self.processes_time = (), None
        self.mig, self.mig_error, self.mig_time = (), None, None
        self._refs, self._gpu_ids = GpuRegistry(), []
        self._memory_at_processes = ()
        self._memory_with_processes = {}
        self._usage, self.usage_source = (), ""
        self.histories.clear()
        self.samples = 0
        self.log_flow.clear()
        self._last_data_at = self._first_data_at = self._latest_came = None
        self._smi_failure = None
        self._gaps.clear()
        self.alerts.reset()
        self.workloads = self._workloads()
        self._notify()

    def _workloads(self) -> Workloads:
        """The workload trackers, judged on ``watch_clock`` as the silences are: a job's
        log or a server that fell silent while gpumon did not run has its usual time to
        answer (a replay reaches no machine, and its runs must not become the live
        baseline)."""
        workloads = Workloads(
            self.host,
            learn=self.source.capabilities.actions,
            clock=self.clock,
            ticks=self.watch_clock,
        )
        # the engine's idle GPUs name a torch swap before them from the audit log
        self.alerts.torch_swap = partial(workloads.swaps.latest, self.host.name)
        return workloads

    def start(self) -> asyncio.Task[None]:
        import asyncio

        loop = asyncio.get_running_loop()
        self._stopped_at = None
        self._started_at = self._state_since = self.watch_clock()
        self._beat = self._ticks()  # from now on a gap in the watchdog's tick is seen
        self._task = loop.create_task(self.source.run(self), name=self.name)
        self._watchdog = loop.create_task(self._watch_silence(), name=f"{self.name} watchdog")
        return self._task

    def _watchdog_period(self) -> float:
        return min(max(self.interval, 0.5), 5.0)

    async def _watch_silence(self) -> None:
        import asyncio

        sleep = self._sleep or asyncio.sleep
        while True:
            await sleep(self._watchdog_period())
            self.check_silence()

    async def stop(self) -> None:
        import asyncio

        self._stopped_at = self._now()
        self._beat = None
        for task in (self._watchdog, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await self.source.close()
        except TimeoutError:  # a transport that does not let go must not hang the exit
            log.warning("%s: the connection did not close within %g s", self.name, STOP_TIMEOUT_S)
        self.stopped()

    def stopped(self) -> None:
        """The end of ``stop`` once the source is closed: pending flight recordings
        written, the run ended, the state STOPPED. A monitor that was never started (fed
        in process: ``monitor.oneshot``) ends here."""
        if self._stopped_at is None:
            self._stopped_at = self._now()
        with contextlib.suppress(OSError):
            self.recorder.flush_now()
        self.recorder.end_run(self.alerts.active())
        self.ingest_status(ConnState.STOPPED, error=self.status.error)

    async def wait_for_update(self, timeout: float) -> bool:
        """Wait until the state changes; False on timeout."""
        import asyncio

        if self._updated is None:
            self._updated = asyncio.Event()
        self._updated.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._updated.wait()
        except TimeoutError:
            return False
        return True

    def set_interval(self, seconds: float) -> None:
        """Change the sampling interval; the source applies it at once where it can.

        Histories are resized so they still cover ``history_s`` at the new rate."""
        self.interval = min(max(seconds, 0.1), 3600.0)
        self.alerts.interval_s = self.interval
        self._gaps.clear()  # the old rate's gaps say nothing about the new one
        self._history_len = max(int(self._history_s / self.interval), 60)
        for hist in self.histories.values():
            hist.resize(self._history_len)
        if self.source.capabilities.interval:
            self.source.set_interval(self.interval)

    # --- ingestion: what sources tell the monitor (``sources.Sink``) -------------------
    def ingest_gpu_rows(self, rows: Sequence[str], fields: Sequence[str]) -> bool:
        """Parse one round of rows; True when it held a GPU (junk lines are only counted).
        A round without one GPU read is no sample, even where it names a GPU that cannot
        be read: that is nvidia-smi failing as a whole (the agent says so when the loop
        ends: a ``driver_error`` in the driver's words)."""
        parsed = parse_query_gpu(list(rows), fields=tuple(fields), minors=self._minors)
        self.skipped_lines += parsed.skipped
        if not parsed.gpus:
            return False
        ids = [(g.index, g.uuid, g.bus_id, g.minor) for g in parsed.gpus]
        if ids != self._gpu_ids:  # the GPUs changed: which GPU each device file is
            self._gpu_ids, self._refs = ids, GpuRegistry.of(parsed.gpus)
            if self._device_processes:
                self.processes = self._process_view()
        self.ingest_sample(
            HostSample(
                host=self.name,
                time=self.clock(),
                source=self.status.source,
                gpus=parsed.gpus,
                processes=self.processes,
                skipped_lines=parsed.skipped,
                memory_at_processes=self._memory_at_processes,
                unreadable=parsed.unreadable,
                mig=self.mig,
            )
        )
        return True

    def ingest_sample(self, sample: HostSample) -> None:
        """Take one complete sample: histories, alerts, flight recorder, listeners."""
        came_now = self._now()
        if self._first_data_at is None and self.past is not None:
            for past in self.past(sample.time):  # histories, alerts, recorder, as if watched
                self._histories_add(past)
                # as if each came that much before this one
                self.alerts.on_sample(past, came=came_now - max(sample.time - past.time, 0.0))
                self.recorder.record(past)
        self.latest = sample
        self.samples += 1
        now = self.clock()
        self._latest_came = came_now
        came = self.watch_clock()
        if self._last_data_at is not None and self.status.state == ConnState.CONNECTED:
            self._gaps.append(max(came - max(self._last_data_at, self._state_since), 0.0))
        self._last_data_at = came
        if self._first_data_at is None:
            self._first_data_at = came
        self._smi_failure = None  # data again: whatever failed before has passed
        self._histories_add(sample)
        self.recorder.record(sample)
        self.alerts.serving = self.workloads.serving_gpus(sample)
        self.alerts.on_sample(sample, came=came_now)
        # a sample comes without the process list (it arrives on its own): the newest one
        held = sample if sample.processes else replace(sample, processes=self.processes)
        self.workloads.judge_stalls(self.alerts, held, now, processes_known=self._processes_known)
        with contextlib.suppress(OSError):  # a full disk must not stop monitoring
            self.recorder.flush_due(sample.time)
        if self.status.error is not None or self.status.state != ConnState.CONNECTED:
            self.ingest_status(ConnState.CONNECTED, error=None)
        else:
            self._notify()

    def _histories_add(self, sample: HostSample) -> None:
        for gpu in sample.gpus:
            hist = self.histories.get(gpu.index)
            if hist is None:
                hist = self.histories[gpu.index] = GpuHistory(self._history_len)
            hist.append(sample.time, gpu)

    def ingest_process_rows(
        self,
        rows: Sequence[str],
        memory: Mapping[str, int] | None = None,
        usage: Sequence[Sequence[Any]] = (),
        usage_source: str = "",
        details: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._memory_with_processes = dict(memory or {})
        self._usage, self.usage_source = tuple(usage), usage_source
        procs = parse_compute_apps(list(rows)).processes
        self.ingest_processes(with_details(procs, details) if details else procs, self.clock())

    def ingest_processes(self, processes: tuple[GpuProcess, ...], at: float) -> None:
        self._driver_processes = processes
        self._set_processes(at)

    def ingest_mig(self, records: Sequence[Mapping[str, Any]], error: str | None) -> None:
        """The GPU instances of the GPUs in MIG mode (``remote.mig``'s records), read with
        the process list: the latest sample carries them from now on."""
        self.mig = parse_mig_records(records)
        self.mig_error = error
        self.mig_time = self.clock()
        if self.latest is not None:
            self.latest = replace(self.latest, mig=self.mig)
            self.alerts.on_mig(self.latest, came=self._now())
        self._notify()

    def ingest_minors(self, minors: Mapping[str, int]) -> None:
        """The agent's device minors (before the round they are for): the next sample's
        GPUs have them, and device-file users are on those GPUs."""
        self._minors = {k: m for bus, m in minors.items() if (k := bus_id_key(bus)) is not None}

    def ingest_proc_records(
        self, source: str, records: Sequence[Mapping[str, Any]], at: float
    ) -> None:
        watched = self.host.container
        procs = tuple(from_record(r, source, watched) for r in records)
        if source == ProcessSource.HOST:
            self._host_processes = procs
            self.host_processes_time = at
            self._host_processes_at = self.watch_clock()
        else:
            self._device_processes = procs
        self._set_processes(at)

    def host_side_fresh(self) -> bool:
        """Whether the Proxmox host's process list is current (it then replaces the
        container's own view)."""
        came = self._host_processes_at
        if came is None:
            return False
        limit = max(4.0 * max(self.interval, 3.0), 15.0)
        return self.watch_clock() - came <= limit

    def waiting_for(self) -> list[tuple[str, str]]:
        """The sources of this host that have not answered once yet, as (source, what did
        not come): the process list, the Proxmox host's (``source.waiting_for``), and
        where the source reads logs and URLs the followed logs' first poll, SGLang
        discovery's first round and each server's first two observations. Only sources
        that exist: ``local`` without logs or servers waits for its process list alone."""
        caps = self.source.capabilities
        out = []
        if caps.processes and self.processes_time is None:
            out.append(("processes", "no answer"))
        out += [(part, "no answer") for part in self.source.waiting_for(self)]
        if self._awaits_mig():
            out.append(("MIG instances", "no answer"))
        if caps.logs:
            out += self.workloads.waiting_for()
        return out

    def _awaits_mig(self) -> bool:
        """Whether a GPU is in MIG mode and the agent (which reads the instances with the
        process list; nvidia-smi streamed directly does not) has not sent them yet."""
        latest = self.latest
        agent = self.status.source in (SampleSource.AGENT_NVML, SampleSource.AGENT_SMI)
        if not agent or latest is None or self.mig_time is not None:
            return False
        return any(g.mig_mode for g in latest.gpus)

    def first_rounds_done(self) -> bool:
        """Whether a first report may be made: a GPU sample came and every source has
        answered once (``waiting_for``), or ``FIRST_ROUNDS_S`` passed since that sample."""
        if self._first_data_at is None:
            return False
        waited = self.watch_clock() - self._first_data_at
        return waited >= FIRST_ROUNDS_S or not self.waiting_for()

    def _process_view(self) -> tuple[GpuProcess, ...]:
        """The processes now: the Proxmox host's list while it is fresh, else the
        container's own view, its device-file users on the GPUs their device files are;
        each with its share of the GPU where the agent read one."""
        if self.host_side_fresh():
            procs = self._host_processes
        else:
            files = device_gpus(self._device_processes, self._refs)
            procs = container_view(self._driver_processes, files, self.host.container)
        if not self._usage:
            return procs
        gpus = () if self.latest is None else self.latest.gpus
        uuid_of = {str(g.index): g.uuid for g in gpus if g.uuid}
        return with_usage(procs, self._usage, uuid_of)

    def _set_processes(self, at: float) -> None:
        self.processes = self._process_view()
        self.processes_time = at
        if self.latest is not None:
            # the used memory read with the driver's list where the agent sent it (NVML),
            # else the newest sample's: a list taken between two samples of a growing job
            # must not show the growth as memory no process accounts for
            with_list = {} if self.host_side_fresh() else self._memory_with_processes
            self._memory_at_processes = tuple(
                (g.index, with_list.get(g.uuid or "", g.memory_used_mib))
                for g in self.latest.gpus
                if g.memory_used_mib is not None
            )
            self.latest = replace(
                self.latest,
                processes=self.processes,
                memory_at_processes=self._memory_at_processes,
            )
            # who else holds memory is judged on the new list now, not at the next sample
            self.alerts.on_processes(self.latest)
            self.workloads.judge_stalls(
                self.alerts, self.latest, at, processes_known=self._processes_known
            )
        self._notify()

    @property
    def _processes_known(self) -> bool:
        """Whether a process list came, the Proxmox host's too where it is awaited (it
        alone tells another container's process from the watched one's): before, no GPU
        is known to be held by whom."""
        return self.processes_time is not None and "host processes" not in (
            self.source.waiting_for(self)
        )

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
        source = LogSource.from_tag(tag)
        job = self.host.job(source.job) if source.job is not None else None
        now = self.clock()
        lines = list(lines)
        self._count_log_flow(tag, path, len(lines), dropped, skipped_bytes, now)
        # On the samples' clock (the target's), which a recording and its replay run on.
        at = now
        age = self.stale_s()
        if self.latest is not None and age is not None:
            at = self.latest.time + age
        self.recorder.record_log(tag, path, lines, at, backlog=backlog)
        self.workloads.on_log(tag, path, lines, now, backlog=backlog, read_at=read_at)
        gpus = job.gpus if job and job.gpus else None
        if source.sglang:  # the server's GPUs, where known: its incident folds them in
            gpus = self.workloads.log_gpus(path, self.latest)
        self.alerts.on_log_lines(
            path,
            lines,
            job=job.name if job else None,
            gpus=gpus,
            backlog=backlog,
            cuda_visible_devices=job.env.get("CUDA_VISIBLE_DEVICES") if job else None,
            written=written,
            engine=tag if tag == VLLM.name else None,
        )
        self.workloads.apply_alerts(
            self.alerts, now, self.latest.gpu_refs if self.latest is not None else None
        )
        self.workloads.judge_stalls(
            self.alerts, self.latest, now, processes_known=self._processes_known
        )
        if source.sglang:
            self._judge_hung(now)
        self._name_holders(now)
        self._notify()

    def _count_log_flow(
        self, tag: str, path: str, lines: int, dropped: int, skipped: int, now: float
    ) -> None:
        """Counts what a followed log sent and left out; a flood is said once per log (a
        note), bytes skipped unread are a warning: an OOM line there would be missed."""
        flow = self.log_flow.get(path)
        if flow is None:
            if len(self.log_flow) >= LOG_FLOWS_KEPT:  # rotated names: forget the oldest
                del self.log_flow[next(iter(self.log_flow))]
            flow = self.log_flow[path] = LogFlow(tag)
        flow.lines += lines
        flow.lines_dropped += dropped
        flow.bytes_skipped += skipped
        what = LogSource.from_tag(tag).what()
        if dropped:
            self.alerts.note(
                f"{what} {path} floods: only its OOM/error lines and "
                "the newest are read, the rest are counted as dropped"
            )
        if skipped:
            self.alerts.raise_alert(
                "log_flood",
                Health.WARNING,
                f"{what} {path} is written faster than gpumon can scan it: "
                f"{flow.bytes_skipped / 2**20:,.0f} MiB skipped unread; an OOM line there "
                "is missed",
                key=f"log_flood:{path}\n",
                at=now,
            )

    def log_flow_json(self) -> list[dict[str, object]]:
        """Per followed log: lines received, left out of floods, bytes skipped unread."""
        return [
            {
                "path": path,
                "tag": f.tag,
                "lines": f.lines,
                "lines_dropped": f.lines_dropped,
                "bytes_skipped": f.bytes_skipped,
            }
            for path, f in self.log_flow.items()
        ]

    def _name_holders(self, now: float) -> None:
        """A job that crashed on a GPU another container (or the host) held memory on says
        so in its verdict: "OOM on GPU 6 (GPU 6: 6.0 GiB held by CT 201 jupyter-lab)"."""
        for job in self.workloads.jobs.values():
            gpu = job.crash_gpu
            if gpu is None or gpu.index is None or job.crash_holder is not None:
                continue
            job.crash_holder = self.alerts.foreign_holder(gpu.index, now)

    def ingest_log_problem(self, tag: str, path: str, problem: str | None) -> None:
        """A watched log that cannot be read is a warning alert while it lasts: OOM
        watching there is off, and the header and the alert history say so."""
        key = f"log_unreadable:{path}\n"  # the newline ends the path for ``clear``
        if problem is None:
            self.alerts.clear(key)
        else:
            self.alerts.clear(key)  # a new reason replaces the old one
            what = LogSource.from_tag(tag).what()
            self.alerts.raise_alert(
                "log_unreadable",
                Health.WARNING,
                f"{what} {path} cannot be read ({problem}): its OOM and progress lines "
                "are not seen",
                key=key,
            )
        self._notify()

    def ingest_http(
        self,
        tag: str,
        status: int | None,
        body: str,
        error: str | None,
        *,
        at: float | None = None,
    ) -> None:
        now = self.clock()
        self.workloads.on_http(tag, status, body, error, now, at=at)
        self._judge_hung(now)
        self._notify()

    def _judge_hung(self, now: float) -> None:
        """``sglang_hung``, ``spec_accept_low`` and an unreadable page's ``sglang_error``
        for every server; the agent asks a hung one's ``/health_generate`` (once per
        ``hung_after_s``)."""
        probes = self.workloads.judge_hung(self.alerts, now, self.latest)
        probes += self.workloads.judge_vllm(self.alerts, now, self.latest)
        if probes:  # a server's tracker is imported with its first server (``Workloads``)
            from gpumon.backends.workloads.sglang import HEALTH_PROBE_TIMEOUT_S

            for url, tag in probes:
                self.source.probe(url, tag, HEALTH_PROBE_TIMEOUT_S)
        self.workloads.judge_spec(self.alerts, now)
        self.workloads.judge_pages(self.alerts, now, self.latest)

    def ingest_kernel_lines(self, lines: Sequence[str]) -> None:
        self.alerts.on_kernel_lines(list(lines))
        self._notify()

    def ingest_memory_events(self, text: str) -> None:
        self.alerts.on_memory_events(text)

    def ingest_note(self, text: str) -> None:
        self.alerts.note(text)
        self._notify()  # a note can end a wait (the host-side feed turned off)

    def ingest_first_round(self, part: str, ports: Sequence[int]) -> None:
        self.workloads.on_first_round(part, ports)
        self._notify()

    def ingest_server_info(self, info: protocol.ServerInfo, *, command: str | None) -> None:
        self.workloads.on_server_info(info, command=command)
        self._notify()

    def ingest_host_load(self, load: HostLoad) -> None:
        self.host_load = load  # the dashboard's host line reads it at its next redraw

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
        self.alerts.raise_alert(
            kind, severity, message, gpu=gpu, job=job, key=key, at=at, facts=facts
        )
        self._notify()

    def ingest_error(self, text: str) -> None:
        self.ingest_status(self.status.state, error=text)

    def ingest_smi_failure(self, failure: SmiFailure) -> None:
        self._smi_failure = failure
        self.ingest_error(failure.message)

    def count_skipped(self, lines: int) -> None:
        self.skipped_lines += lines

    def ingest_status(
        self,
        state: ConnState,
        *,
        error: str | None = None,
        attempt: int | None = None,
        next_retry_at: float | None = None,
        source: SampleSource | None = None,
    ) -> None:
        old = self.status
        if old.state != state:
            self._state_since = self.watch_clock()
        self.status = HostStatus(
            state=state,
            since=old.since if old.state == state else self.clock(),
            error=error,
            attempt=old.attempt if attempt is None else attempt,
            next_retry_at=next_retry_at,
            source=source if source is not None else old.source,
            transport=self.source.label,
        )
        self._judge_connection()  # a failed try, a lost or a new connection
        self._notify()

    def _notify(self) -> None:
        if self._updated is not None:
            self._updated.set()
        self.listeners.emit(self)
