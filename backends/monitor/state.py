"""HostMonitor: keeps one machine's state current from one long-lived stream.

The monitor owns the connection (with reconnects), the latest sample, the bounded
histories and the host-level error. The UI and the CLI read from it; nothing else talks
to the machine for monitoring. While disconnected the last values stay, and
``stale_s()`` says how old they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.actions.job_watch import JobWatch
from gpumon.backends.alerts.engine import AlertEngine
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import ConnState, GpuHistory, GpuProcess, HostSample, HostStatus, Source
from gpumon.backends.parsers.nvidia_smi import (
    PROCESS_FIELDS,
    QUERY_FIELDS,
    classify_smi_failure,
    compute_apps_args,
    parse_compute_apps,
    parse_query_gpu,
    query_gpu_args,
)
from gpumon.backends.recording.recorder import FlightRecorder
from gpumon.backends.remote.agent import RowBatcher, bootstrap_argv
from gpumon.backends.transport.base import ProcessStream, Transport, TransportError
from gpumon.backends.workloads.watch import Workloads

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 30.0
HISTORY_S = 3600.0  # the detail view's longest window
HELLO_TIMEOUT_S = 20.0

Listener = Callable[["HostMonitor"], None]


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: attempt 1 -> ~1 s, doubling, at most 30 s."""
    base: float = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0 ** max(attempt - 1, 0))
    return base * rng.uniform(0.5, 1.0)


class HostMonitor:
    """Watches one host. ``start()`` it inside a running event loop; ``stop()`` when done."""

    def __init__(
        self,
        host: HostConfig,
        transport: Transport,
        *,
        clock: Callable[[], float] = time.time,
        history_s: float = HISTORY_S,
        reconnect: bool = True,
        record: bool = True,
    ) -> None:
        self.host = host
        self.transport = transport
        self.clock = clock
        self.interval = host.interval
        self.reconnect = reconnect
        self.status = HostStatus(ConnState.CONNECTING, clock(), transport=transport.label)
        self.latest: HostSample | None = None
        self.processes: tuple[GpuProcess, ...] = ()
        self.processes_time: float | None = None
        self.histories: dict[int, GpuHistory] = {}
        self.skipped_lines = 0  # malformed lines dropped since start
        self.samples = 0
        self._history_s = history_s
        self._history_len = max(int(history_s / max(self.interval, 0.1)), 60)
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._stream: ProcessStream | None = None
        self._rng = random.Random()
        self._updated = asyncio.Event()
        self.alerts = AlertEngine(host.name, host.alerts, clock=clock)
        self.recorder = FlightRecorder(host.name, clock=clock)
        if record:  # the flight recorder writes an incident's window on a critical alert
            self.alerts.add_listener(self.recorder.on_alert)
        self.workloads = Workloads(host)
        self.job_watch = JobWatch(self)

    # --- public ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.host.name

    def add_listener(self, listener: Listener) -> None:
        """``listener(monitor)`` runs on the event loop after every change of state."""
        self._listeners.append(listener)

    def stale_s(self, now: float | None = None) -> float | None:
        """Age of the newest GPU sample in seconds; None before the first one."""
        if self.latest is None:
            return None
        return max((now if now is not None else self.clock()) - self.latest.time, 0.0)

    def is_stale(self, now: float | None = None) -> bool:
        age = self.stale_s(now)
        return age is None or age > max(3 * self.interval, 3.0)

    def start(self) -> asyncio.Task[None]:
        self.job_watch.attach()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.job_watch.detach()
        await self._close_stream()
        with contextlib.suppress(Exception):
            await self.transport.dispose()
        with contextlib.suppress(OSError):
            self.recorder.flush_now()
        self._set_status(ConnState.STOPPED, error=self.status.error)

    async def wait_for_update(self, timeout: float) -> bool:
        """Wait until the state changes; False on timeout."""
        self._updated.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._updated.wait()
        except TimeoutError:
            return False
        return True

    def set_interval(self, seconds: float) -> None:
        """Change the sampling interval on the target (the agent applies it at once).

        Histories are resized so they still cover ``history_s`` at the new rate."""
        self.interval = min(max(seconds, 0.1), 3600.0)
        self._history_len = max(int(self._history_s / self.interval), 60)
        for hist in self.histories.values():
            hist.resize(self._history_len)
        stream = self._stream
        if stream is not None and self.status.source != Source.SMI_DIRECT:
            stream.write(json.dumps({"cmd": "interval", "seconds": self.interval}).encode() + b"\n")

    # --- connection loop ---------------------------------------------------------------
    async def _run(self) -> None:
        attempt = 0
        while True:
            state = ConnState.CONNECTING if attempt == 0 else ConnState.RECONNECTING
            self._set_status(state, error=self.status.error, attempt=attempt)
            permanent = False
            try:
                await self.transport.connect()
                got_data = await self._session()
                error = self.status.error or "stream ended"
                if got_data:
                    attempt = 0
            except TransportError as e:
                error, permanent = str(e), e.permanent
            except OSError as e:
                error = f"connection failed: {e}"
            finally:
                await self._close_stream()
            with contextlib.suppress(Exception):
                await self.transport.close()
            attempt += 1
            if not self.reconnect:
                self._set_status(ConnState.FAILED, error=error, attempt=attempt)
                return
            delay = BACKOFF_CAP_S if permanent else backoff_delay(attempt, self._rng)
            self._set_status(
                ConnState.RECONNECTING,
                error=error,
                attempt=attempt,
                next_retry_at=self.clock() + delay,
            )
            await asyncio.sleep(delay)

    async def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.close()

    async def _session(self) -> bool:
        """One connected session: agent if the target has Python, else nvidia-smi direct."""
        python = await self._find_python()
        if python is not None:
            return await self._agent_session(python)
        return await self._direct_session()

    async def _find_python(self) -> str | None:
        candidates = [self.host.python] if self.host.python else ["python3", "python"]
        for py in candidates:
            res = await self.transport.run(
                [py, "-c", "import sys; print(sys.version_info >= (3, 8))"], timeout=15.0
            )
            if res.exit_code == 0 and res.stdout.strip() == "True":
                return py
        return None

    async def _agent_session(self, python: str) -> bool:
        options = {
            "fields": list(QUERY_FIELDS),
            "process_fields": list(PROCESS_FIELDS),
            "nvidia_smi": self.host.nvidia_smi,
            "interval": self.interval,
            "logs": self.workloads.log_specs(),
            "kernel": self.host.kernel_log,
            "http": self.workloads.http_targets(),
            "sglang_discover": self.workloads.discover(),
        }
        argv, source = bootstrap_argv(python, options)
        stream = self._stream = await self.transport.open_stream(argv)
        stream.write(source)
        got_data = False
        timeout: float | None = HELLO_TIMEOUT_S
        while True:
            try:
                async with asyncio.timeout(timeout):
                    line = await stream.readline()
            except TimeoutError:
                raise TransportError(f"the agent on {self.name} did not start") from None
            if not line:
                break
            timeout = None
            got_data |= self._handle_agent_line(line)
        tail = stream.stderr_tail()
        if not got_data and tail:
            self._set_status(self.status.state, error=f"agent failed: {tail.splitlines()[-1]}")
        return got_data

    def _handle_agent_line(self, line: bytes) -> bool:
        try:
            msg: Any = untrusted.loads(line)
        except ValueError:
            self.skipped_lines += 1
            return False
        if not isinstance(msg, dict):
            self.skipped_lines += 1
            return False
        kind = msg.get("type")
        if kind == "hello":
            source = Source(msg["source"]) if msg.get("source") in set(Source) else None
            self._set_status(ConnState.CONNECTED, source=source, error=None)
            if msg.get("note"):
                log.info("%s: %s", self.name, msg["note"])
            return False
        if kind == "gpus":
            return self._on_gpu_rows(msg.get("rows", []), msg.get("fields") or QUERY_FIELDS)
        if kind == "procs":
            self._on_process_rows(msg.get("rows", []))
            return False
        if kind == "log":
            self._on_log(msg)
            return False
        if kind == "http":
            self.workloads.on_http(msg, self.clock())
            self._notify()
            return False
        if kind == "kernel":
            self.alerts.on_kernel_lines([str(x) for x in msg.get("lines", [])])
            self._notify()
            return False
        if kind == "memory_events":
            self.alerts.on_memory_events(str(msg.get("text", "")))
            return False
        if kind == "note":
            self.alerts.note(str(msg.get("text", "")))
            return False
        if kind == "smi_error":
            failure = classify_smi_failure(str(msg.get("output", "")), msg.get("exit"))
            text = failure.message if failure else f"nvidia-smi failed (exit {msg.get('exit')})"
            self._set_status(self.status.state, error=text)
            return False
        return False

    async def _direct_session(self) -> bool:
        """No usable Python on the target: stream nvidia-smi's loop output directly."""
        ms = max(int(self.interval * 1000), 100)
        argv = [self.host.nvidia_smi, *query_gpu_args(QUERY_FIELDS, loop_ms=ms)]
        stream = self._stream = await self.transport.open_stream(argv)
        self._set_status(ConnState.CONNECTED, source=Source.SMI_DIRECT, error=None)
        procs = asyncio.create_task(self._poll_processes_direct())
        batcher = RowBatcher(QUERY_FIELDS.index("index"), len(QUERY_FIELDS))
        got_data = False
        tail: list[str] = []
        try:
            while True:
                try:
                    async with asyncio.timeout(0.15):
                        line = await stream.readline()
                except TimeoutError:
                    if rows := batcher.flush():
                        got_data |= self._on_gpu_rows(rows, QUERY_FIELDS)
                    continue
                if not line:
                    break
                text = untrusted.printable_text(line.decode("utf-8", "replace"))
                tail = [*tail[-19:], text.rstrip("\n")]
                if rows := batcher.feed(text):
                    got_data |= self._on_gpu_rows(rows, QUERY_FIELDS)
            if rows := batcher.flush():
                got_data |= self._on_gpu_rows(rows, QUERY_FIELDS)
        finally:
            procs.cancel()
        if not got_data:
            await stream.close()
            failure = classify_smi_failure("\n".join(tail), stream.exit_code)
            if failure is not None:
                self._set_status(self.status.state, error=failure.message)
        return got_data

    async def _poll_processes_direct(self) -> None:
        argv = [self.host.nvidia_smi, *compute_apps_args()]
        while True:
            res = await self.transport.run(argv, timeout=15.0)
            if res.exit_code == 0:
                self._on_process_rows(res.stdout.splitlines())
            await asyncio.sleep(max(2.0, self.interval))

    # --- state updates ---------------------------------------------------------------
    def _on_log(self, msg: dict[str, Any]) -> None:
        tag = str(msg.get("tag", ""))
        path = str(msg.get("path", tag))
        lines = [str(x) for x in msg.get("lines", [])]
        job = self.host.job(tag[4:]) if tag.startswith("job:") else None
        now = self.clock()
        self.workloads.on_log(tag, path, lines, now)
        self.alerts.on_log_lines(
            path,
            lines,
            job=job.name if job else None,
            gpus=job.gpus if job and job.gpus else None,
            backlog=bool(msg.get("backlog")),
            cuda_visible_devices=job.env.get("CUDA_VISIBLE_DEVICES") if job else None,
        )
        self.workloads.apply_alerts(self.alerts, now)
        self._notify()

    def _on_gpu_rows(self, rows: list[str], fields: Any) -> bool:
        """Parse one round of rows; True when it held a GPU (junk lines are only counted)."""
        parsed = parse_query_gpu(rows, fields=tuple(fields))
        self.skipped_lines += parsed.skipped
        if not parsed.gpus:
            return False
        self.ingest(
            HostSample(
                host=self.name,
                time=self.clock(),
                source=self.status.source,
                gpus=parsed.gpus,
                processes=self.processes,
                skipped_lines=parsed.skipped,
            )
        )
        return True

    def ingest(self, sample: HostSample) -> None:
        """Take one complete sample: histories, alerts, flight recorder, listeners."""
        self.latest = sample
        self.samples += 1
        for gpu in sample.gpus:
            hist = self.histories.get(gpu.index)
            if hist is None:
                hist = self.histories[gpu.index] = GpuHistory(self._history_len)
            hist.append(sample.time, gpu)
        self.recorder.record(sample)
        self.alerts.on_sample(sample)
        with contextlib.suppress(OSError):  # a full disk must not stop monitoring
            self.recorder.flush_due(sample.time)
        if self.status.error is not None or self.status.state != ConnState.CONNECTED:
            self._set_status(ConnState.CONNECTED, error=None)
        else:
            self._notify()

    def _on_process_rows(self, rows: list[str]) -> None:
        parsed = parse_compute_apps(rows)
        self.processes = parsed.processes
        self.processes_time = self.clock()
        if self.latest is not None:
            self.latest = replace(self.latest, processes=self.processes)
        self._notify()

    def _set_status(
        self,
        state: ConnState,
        *,
        error: str | None = None,
        attempt: int | None = None,
        next_retry_at: float | None = None,
        source: Source | None = None,
    ) -> None:
        old = self.status
        self.status = HostStatus(
            state=state,
            since=old.since if old.state == state else self.clock(),
            error=error,
            attempt=old.attempt if attempt is None else attempt,
            next_retry_at=next_retry_at,
            source=source if source is not None else old.source,
            transport=self.transport.label,
        )
        self._notify()

    def _notify(self) -> None:
        self._updated.set()
        for listener in list(self._listeners):
            try:
                listener(self)
            except Exception:  # a broken listener must not stop monitoring
                log.exception("listener failed")
