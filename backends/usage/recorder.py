"""``UsageRecorder``: a monitor's samples into the accounting, a minute at a time.

A monitor listener: each new sample is split among its GPUs' holders (``Tally``) with
the dashboard's owners (``gpu_owned_by``); once a minute of sample time, the finished
minutes go to the ``UsageWriter``'s thread as one batch (the event loop never waits on
SQLite); ``close`` hands over the rest (a run that stops loses nothing it accounted).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gpumon.backends.paths import host_file_name
from gpumon.backends.usage.account import MINUTE, Tally, gap_for
from gpumon.backends.workloads.owners import gpu_owned_by

if TYPE_CHECKING:
    from gpumon.backends.model import HostSample
    from gpumon.backends.monitor.state import HostMonitor
    from gpumon.backends.usage.store import UsageWriter

__all__ = ["FLUSH_S", "HostLease", "UsageRecorder"]

FLUSH_S = float(MINUTE)  # sample time between two batches


class HostLease:
    """Which of the dashboards watching a host accounts for it: the one that holds
    ``FOLDER/usage-locks/HOST.lock`` (flock, kept while it runs; the database's folder,
    so a test's own database has its own locks). Two dashboards on one host without a
    ``gpumon watch`` counted its GPU time twice; the other one stands by, and takes the
    lease at its next batch once the first has gone (the kernel drops a dead process's
    lock)."""

    def __init__(self, folder: Path, host: str) -> None:
        self.path = folder / "usage-locks" / f"{host_file_name(host)}.lock"
        self._file: IO[str] | None = None

    def held(self) -> bool:
        """Whether this run holds the lease, taking it when it is free."""
        if self._file is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = self.path.open("a+")
        except OSError:
            return True  # no lock to be had here: account, as before there was one
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._file = f
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None


class UsageRecorder:
    """Accounts ``monitor``'s samples into ``writer``. ``standby``: while it says True,
    what is accounted is dropped at each batch (the dashboard while a ``gpumon watch``
    records the same hosts: one of them counts); ``lease``: likewise while another
    dashboard holds the host's (``HostLease``)."""

    def __init__(
        self,
        monitor: HostMonitor,
        writer: UsageWriter,
        standby: Callable[[], bool] | None = None,
        lease: HostLease | None = None,
    ) -> None:
        self.monitor = monitor
        self.writer = writer
        self.standby = standby
        self.lease = lease
        self.tally = Tally(monitor.host.alerts, monitor.host.container)
        self._seen: HostSample | None = None
        self._batched_at: float | None = None
        self.accounted_s = 0.0

    def __call__(self, monitor: HostMonitor) -> None:
        sample = monitor.latest
        if sample is None or sample is self._seen:
            return  # a change of state without a new sample
        self._seen = sample
        w = monitor.workloads
        watched = monitor.host.container
        owners = gpu_owned_by(sample, w.jobs, w.sglang, watched, w.vllm_gpus(sample))
        processes = sample.processes or monitor.processes
        self.accounted_s += self.tally.add(sample, processes, owners, gap_for(monitor.interval))
        if self._batched_at is None:
            self._batched_at = sample.time
        elif sample.time - self._batched_at >= FLUSH_S:
            self._batched_at = sample.time
            self.batch(before=sample.time)

    def batch(self, before: float | None = None) -> None:
        """Hand the minutes finished before ``before`` (all: None) to the writer."""
        rows = self.tally.take(before)
        if self.standby is not None and self.standby():
            if self.lease is not None:
                self.lease.release()  # the watch counts: a dashboard after it may
            return
        if self.lease is not None and not self.lease.held():
            return
        now = self._seen.time if self._seen is not None else 0.0
        self.writer.put(self.monitor.name, rows, self.tally.estimated, now)

    def close(self) -> None:
        """Every row not yet handed over goes to the writer; the lease goes."""
        self.batch()
        if self.lease is not None:
            self.lease.release()
