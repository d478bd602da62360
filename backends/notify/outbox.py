"""The persistent outbox: every message waits in a local SQLite file until its receiver
took it, so nothing is lost while a receiver (or gpumon) is down.

One row per event, in the order the events happened, per notifier. A notifier delivers its
rows oldest first, per host (``due_batch``): the due rows of one host that follow each
other go out as one message (the storm grouping), a failed delivery backs the whole
notifier off (``retry_first_s`` doubling up to ``retry_max_s``, or the receiver's
``Retry-After``), and nothing behind a failed row overtakes it. Delivered rows are kept
(the newest ``KEEP_SENT``) for ``gpumon notify status``.

The same file keeps the open incidents (``incidents``), so a restarted ``gpumon watch``
neither re-pages an incident it already paged nor forgets to resolve it. The file lives
in ``$XDG_STATE_HOME/gpumon/outbox.sqlite3`` (``paths.outbox_file``); more than one gpumon
process may open it (WAL mode, a busy timeout). Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.paths import open_state_db

__all__ = ["KEEP_SENT", "Outbox", "OutboxRow"]

KEEP_SENT = 1000
_SCAN = 500  # rows looked at per notifier to find the next due batch
BATCH_MAX = 100  # events in one message (after an outage: the backlog in several)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notifier TEXT NOT NULL,
    host TEXT NOT NULL,
    created REAL NOT NULL,
    not_before REAL NOT NULL,
    event TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    sent_at REAL,
    rejected REAL
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (notifier, sent_at, id);
CREATE TABLE IF NOT EXISTS notifiers (
    name TEXT PRIMARY KEY,
    retry_at REAL NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    last_ok REAL,
    last_error TEXT,
    last_error_at REAL
);
CREATE TABLE IF NOT EXISTS incidents (key TEXT PRIMARY KEY, event TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    notifier: str
    host: str
    created: float
    not_before: float
    event: IncidentEvent
    attempts: int
    last_error: str | None
    sent_at: float | None


def _event_from(text: str) -> IncidentEvent:
    # The events quote the target (alert messages): read back as the target's text.
    return IncidentEvent(**untrusted.loads(text))


def _not_before(row: OutboxRow) -> float:
    return row.not_before


def _dump(event: IncidentEvent) -> str:
    return json.dumps(asdict(event), separators=(",", ":"))


class Outbox:
    """The outbox file at ``path`` (created with its folder on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_state_db(path)
        self._db.executescript(_SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(outbox)")}
        if "rejected" not in columns:  # a file from before refused messages were set aside
            self._db.execute("ALTER TABLE outbox ADD COLUMN rejected REAL")

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, *args: Any) -> Iterator[OutboxRow]:
        for r in self._db.execute(sql, args):
            yield OutboxRow(r[0], r[1], r[2], r[3], r[4], _event_from(r[5]), r[6], r[7], r[8])

    # --- writing ------------------------------------------------------------------------
    def add(self, notifier: str, event: IncidentEvent, now: float, not_before: float) -> int:
        """Queue ``event`` for ``notifier``; it may go out from ``not_before`` on."""
        cur = self._db.execute(
            "INSERT INTO outbox (notifier, host, created, not_before, event) VALUES (?,?,?,?,?)",
            (notifier, event.host, now, not_before, _dump(event)),
        )
        return int(cur.lastrowid or 0)

    def mark_sent(self, notifier: str, ids: list[int], now: float) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "UPDATE outbox SET sent_at = ?, attempts = attempts + 1 WHERE id = ?",
                [(now, i) for i in ids],
            )
            self._db.execute(
                "INSERT INTO notifiers (name, last_ok) VALUES (?, ?) ON CONFLICT(name) "
                "DO UPDATE SET last_ok = excluded.last_ok, retry_at = 0, failures = 0",
                (notifier, now),
            )
            self._db.execute(
                "DELETE FROM outbox WHERE sent_at IS NOT NULL AND id NOT IN "
                "(SELECT id FROM outbox WHERE sent_at IS NOT NULL ORDER BY id DESC LIMIT ?)",
                (KEEP_SENT,),
            )

    def mark_failed(
        self, notifier: str, ids: list[int], error: str, now: float, retry_at: float
    ) -> int:
        """Record a failed delivery; returns the notifier's failures in a row."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                [(error, i) for i in ids],
            )
            self._db.execute(
                "INSERT INTO notifiers (name, retry_at, failures, last_error, last_error_at) "
                "VALUES (?, ?, 1, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "retry_at = excluded.retry_at, failures = failures + 1, "
                "last_error = excluded.last_error, last_error_at = excluded.last_error_at",
                (notifier, retry_at, error, now),
            )
        row = self._db.execute("SELECT failures FROM notifiers WHERE name = ?", (notifier,))
        return int(row.fetchone()[0])

    def mark_rejected(self, notifier: str, ids: list[int], error: str, now: float) -> None:
        """The receiver refused these rows' message itself: they leave the queue (kept
        with ``rejected`` set, for ``notify status``) and the notifier is not backed off."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?, rejected = ?, "
                "sent_at = ? WHERE id = ?",
                [(error, now, now, i) for i in ids],
            )
            self._db.execute(
                "INSERT INTO notifiers (name, last_error, last_error_at) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET last_error = excluded.last_error, "
                "last_error_at = excluded.last_error_at",
                (notifier, f"refused, set aside: {error}", now),
            )

    # --- reading ------------------------------------------------------------------------
    def retry_at(self, notifier: str) -> float:
        """When ``notifier`` may try again after failures (0: now)."""
        row = self._db.execute("SELECT retry_at FROM notifiers WHERE name = ?", (notifier,))
        found = row.fetchone()
        return float(found[0]) if found else 0.0

    def failures(self, notifier: str) -> int:
        row = self._db.execute("SELECT failures FROM notifiers WHERE name = ?", (notifier,))
        found = row.fetchone()
        return int(found[0]) if found else 0

    def pending(self, notifier: str | None = None) -> list[OutboxRow]:
        """Undelivered rows, oldest first (of one notifier, or all)."""
        if notifier is None:
            sql = "SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY id"
            return list(self._rows(sql))
        sql = "SELECT * FROM outbox WHERE notifier = ? AND sent_at IS NULL ORDER BY id"
        return list(self._rows(sql, notifier))

    def sent(self, notifier: str | None = None, limit: int = 20) -> list[OutboxRow]:
        """The newest delivered rows, newest first."""
        if notifier is None:
            sql = "SELECT * FROM outbox WHERE sent_at IS NOT NULL ORDER BY id DESC LIMIT ?"
            return list(self._rows(sql, limit))
        sql = (
            "SELECT * FROM outbox WHERE notifier = ? AND sent_at IS NOT NULL "
            "ORDER BY id DESC LIMIT ?"
        )
        return list(self._rows(sql, notifier, limit))

    def due_batch(
        self,
        notifier: str,
        now: float,
        due: Callable[[OutboxRow], float] | None = None,
    ) -> tuple[list[OutboxRow], float | None]:
        """The next message for ``notifier``: the consecutive due rows of the host whose
        oldest row is oldest among the hosts that have one due. Returns (rows, None), or
        ([], when the next row falls due) / ([], None) when nothing waits. ``due``: when
        a row falls due on ``now``'s clock (None: its ``not_before``, the wall clock's;
        the hub keeps its own on the monotonic clock)."""
        when = due if due is not None else _not_before
        sql = "SELECT * FROM outbox WHERE notifier = ? AND sent_at IS NULL ORDER BY id LIMIT ?"
        by_host: dict[str, list[OutboxRow]] = {}
        for row in self._rows(sql, notifier, _SCAN):
            by_host.setdefault(row.host, []).append(row)
        next_due: float | None = None
        for rows in by_host.values():  # insertion order: the host with the oldest row first
            first = when(rows[0])
            if first <= now:
                batch = []
                for row in rows[:BATCH_MAX]:
                    if when(row) > now:
                        break
                    batch.append(row)
                return batch, None
            next_due = first if next_due is None else min(next_due, first)
        return [], next_due

    def status(self) -> list[dict[str, Any]]:
        """Per notifier seen in the file: pending count, failures, last success and error."""
        out = []
        names = [r[0] for r in self._db.execute("SELECT DISTINCT notifier FROM outbox")]
        known = {r[0]: r for r in self._db.execute("SELECT * FROM notifiers")}
        for name in sorted(set(names) | set(known)):
            pending = self._db.execute(
                "SELECT COUNT(*), MIN(created) FROM outbox WHERE notifier = ? AND sent_at IS NULL",
                (name,),
            ).fetchone()
            sent = self._db.execute(
                "SELECT COUNT(*) FROM outbox WHERE notifier = ? AND sent_at IS NOT NULL "
                "AND rejected IS NULL",
                (name,),
            ).fetchone()
            refused = self._db.execute(
                "SELECT COUNT(*) FROM outbox WHERE notifier = ? AND rejected IS NOT NULL", (name,)
            ).fetchone()
            state = known.get(name)
            out.append(
                {
                    "notifier": name,
                    "pending": int(pending[0]),
                    "oldest_pending": pending[1],
                    "sent_kept": int(sent[0]),
                    "rejected": int(refused[0]),
                    "failures": int(state[2]) if state else 0,
                    "retry_at": float(state[1]) if state and state[1] else None,
                    "last_ok": state[3] if state else None,
                    "last_error": state[4] if state else None,
                    "last_error_at": state[5] if state else None,
                }
            )
        return out

    # --- open incidents -----------------------------------------------------------------
    def save_incident(self, event: IncidentEvent) -> None:
        if event.event == "resolve":
            self._db.execute("DELETE FROM incidents WHERE key = ?", (event.key,))
        elif event.event != "test":
            self._db.execute(
                "INSERT OR REPLACE INTO incidents (key, event) VALUES (?, ?)",
                (event.key, _dump(event)),
            )

    def open_incidents(self) -> list[IncidentEvent]:
        return [_event_from(r[0]) for r in self._db.execute("SELECT event FROM incidents")]
