"""The accounting's SQLite database (``$XDG_STATE_HOME/gpumon/usage.sqlite3``), and the
thread that writes it.

One table, ``usage``: a row per resolution (``res``: 60 or 3600 s), host, period start
(``t``, epoch seconds), GPU and owner (container, user, job), holding sums: the seconds
watched, GPU-seconds used and held idle, joules, MiB-seconds held and
utilisation-seconds (``account.SUMS``). Minute rows are kept ``MINUTES_KEPT_S`` (48 h),
then summed into hour rows, kept ``HOURS_KEPT_S`` (90 days); older ones are deleted. Each
write is one transaction (``UsageStore.write``), the roll-up and pruning at most once an
hour. The bound is in docs/usage.md (``bench/bench_usage.py`` measures it).

The recorders write from ``UsageWriter``'s thread, never the event loop's; ``gpumon
usage`` reads with ``UsageStore.totals``. Several gpumon runs may open the file (WAL,
a 10 s busy timeout).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpumon.backends.paths import open_state_db
from gpumon.backends.usage.account import MINUTE, SUMS, Key

__all__ = [
    "DIMENSIONS",
    "HOUR",
    "HOURS_KEPT_S",
    "MINUTES_KEPT_S",
    "UsageStore",
    "UsageWriter",
]

log = logging.getLogger(__name__)

HOUR = 3600
MINUTES_KEPT_S = 48 * HOUR
HOURS_KEPT_S = 90 * 24 * HOUR
# What ``gpumon usage --by`` groups by: a column of the table each.
DIMENSIONS = ("container", "user", "job", "gpu")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage (
    res INTEGER NOT NULL, host TEXT NOT NULL, t INTEGER NOT NULL, gpu INTEGER NOT NULL,
    container TEXT NOT NULL, user TEXT NOT NULL, job TEXT NOT NULL,
    {", ".join(f"{s} REAL NOT NULL" for s in SUMS)},
    estimated INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (res, host, t, gpu, container, user, job)
) WITHOUT ROWID
"""
_KEY = "res, host, t, gpu, container, user, job"
_ADD = ", ".join(f"{s} = {s} + excluded.{s}" for s in SUMS)
_UPSERT = (
    f"INSERT INTO usage ({_KEY}, {', '.join(SUMS)}, estimated) "
    f"VALUES ({', '.join('?' * (7 + len(SUMS) + 1))}) "
    f"ON CONFLICT ({_KEY}) DO UPDATE SET {_ADD}, estimated = max(estimated, excluded.estimated)"
)
_ROLL_UP = (
    f"INSERT INTO usage ({_KEY}, {', '.join(SUMS)}, estimated) "
    f"SELECT {HOUR}, host, t - t % {HOUR}, gpu, container, user, job, "
    f"{', '.join(f'sum({s})' for s in SUMS)}, max(estimated) "
    f"FROM usage WHERE res = {MINUTE} AND t < ? "
    f"GROUP BY host, t - t % {HOUR}, gpu, container, user, job "
    f"ON CONFLICT ({_KEY}) DO UPDATE SET {_ADD}, estimated = max(estimated, excluded.estimated)"
)


class UsageStore:
    """The database at ``path`` (made, with its folder, on first open)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_state_db(path)
        self._db.execute(_SCHEMA)
        self._rolled_at: float | None = None

    def close(self) -> None:
        self._db.close()

    def write(
        self, host: str, rows: Sequence[tuple[Key, list[float]]], estimated: bool, now: float
    ) -> None:
        """Add ``rows`` (``Tally.take``'s minute rows of ``host``) in one transaction;
        then, at most once an hour of ``now``, roll minutes older than
        ``MINUTES_KEPT_S`` up into hours and delete hours older than ``HOURS_KEPT_S``."""
        flag = int(estimated)
        with self._transaction():
            self._db.executemany(
                _UPSERT,
                ((MINUTE, host, k[0], k[1], k[2], k[3], k[4], *sums, flag) for k, sums in rows),
            )
            if self._rolled_at is None or now - self._rolled_at >= HOUR:
                self._rolled_at = now
                self._roll_up(now)

    def _roll_up(self, now: float) -> None:
        # whole hours only: an hour's minutes move together, so an hour row never
        # stands beside minutes of its own hour
        cutoff = int(now - MINUTES_KEPT_S) // HOUR * HOUR
        self._db.execute(_ROLL_UP, (cutoff,))
        self._db.execute(f"DELETE FROM usage WHERE res = {MINUTE} AND t < ?", (cutoff,))
        self._db.execute(f"DELETE FROM usage WHERE res = {HOUR} AND t < ?", (now - HOURS_KEPT_S,))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def totals(
        self, host: str, since: float, by: Iterable[str]
    ) -> list[tuple[tuple[str | int, ...], list[float], bool]]:
        """Per group of ``by`` (``DIMENSIONS``), the sums of ``host``'s rows from
        ``since`` on (a row counts whole when its period starts at or after ``since``),
        largest GPU time first; with whether any energy in it was estimated."""
        columns = [c for c in by if c in DIMENSIONS]
        group = ", ".join(columns)
        sums = ", ".join(f"sum({s})" for s in SUMS)
        select = f"SELECT {group + ', ' if group else ''}{sums}, max(estimated) FROM usage "
        where = "WHERE host = ? AND t >= ? "
        order = f"GROUP BY {group} " if group else ""
        rows = self._db.execute(select + where + order, (host, since)).fetchall()
        out = []
        for row in rows:
            if row[len(columns)] is None:  # no row at all: sum() of nothing
                continue
            keys = tuple(row[: len(columns)])
            values = [float(v) for v in row[len(columns) : len(columns) + len(SUMS)]]
            out.append((keys, values, bool(row[-1])))
        out.sort(key=lambda r: (-r[1][0], [str(k) for k in r[0]]))
        return out

    def hosts(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT host FROM usage ORDER BY host")]

    def row_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM usage").fetchone()[0])


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


_Batch = tuple[str, list[tuple[Key, list[float]]], bool, float]  # host, rows, estimated, now


class UsageWriter:
    """The one thread that writes the database: ``put`` hands it a batch (from the event
    loop, without waiting); ``close`` writes what is queued and ends it. A write that
    fails (a full disk, a locked file past its timeout) is logged and dropped: the
    monitoring goes on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()  # None: stop
        self._thread = threading.Thread(target=self._run, name="gpumon-usage", daemon=True)
        self._thread.start()
        self.failures = 0

    def put(
        self, host: str, rows: list[tuple[Key, list[float]]], estimated: bool, now: float
    ) -> None:
        if rows:
            self._queue.put((host, rows, estimated, now))

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        store: UsageStore | None = None
        while True:
            item = self._queue.get()
            if item is None:
                break
            host, rows, estimated, now = item
            try:
                if store is None:
                    store = UsageStore(self.path)
                store.write(host, rows, estimated, now)
            except (OSError, sqlite3.Error) as e:
                self.failures += 1
                log.warning(
                    "usage: %d rows of %s not written to %s: %s", len(rows), host, self.path, e
                )
        if store is not None:
            store.close()
