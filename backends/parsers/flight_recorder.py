"""PyTorch's collective flight-recorder dumps -> the rank that never arrived.

A dump is one rank's file (``PREFIX<rank>``), a pickle of a dict that PyTorch's
``FlightRecorder::dump`` writes (``torch/csrc/distributed/c10d/FlightRecorder.cpp``;
its ``version`` "2.10" in torch 2.13.0 and 2.14.1, read by PyTorch's own analyzer in
``torch/distributed/flight_recorder/components/loader.py``: ``entries``, ``version``,
``pg_config``). What is read (docs/formats.md 8.1):

- ``entries``: one dict per collective in the ring buffer: ``collective_seq_id`` (per
  process group), ``profiling_name`` (``gloo:all_reduce``, ``nccl:all_reduce``),
  ``process_group`` (``(name, desc)``: ``("0", "default_pg")``), ``input_sizes``,
  ``input_dtypes``, ``time_created_ns`` (epoch ns), ``timeout_ms``, ``retired`` (the
  watchdog is done with it: completed, or ended by an error), ``state``;
- ``pg_status``: per process group name, ``last_enqueued_collective``,
  ``last_completed_collective`` (and ``last_started_collective``, -1 where the backend
  does not time starts: Gloo);
- ``pg_config``: per group ``ranks`` as a string (``"[0, 1, 2, 3]"``); Gloo's dumps key
  the default group by ``""``, not by the name its entries give, and other groups have
  ``"[]"``: PyTorch's analyzer fails on them (``KeyError``), so gpumon reads them itself.

Dumps come from the watched machine: they are unpickled by ``_Restricted``, which refuses
every global (a dump holds only dicts, lists, tuples, strings, numbers, booleans and None),
so a file made to run code on load cannot. Parsing never raises for a bad dump: it is
said as unreadable, with why.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumon.backends.parsers.processes import index_ranges
from gpumon.backends.parsers.units import duration_words

__all__ = [
    "Collective",
    "FrReport",
    "RankDump",
    "RankRow",
    "analyze",
    "rank_ranges",
    "read_dump",
]

DUMP_MAX = 256 << 20  # bytes: a 2000-entry buffer with stacks is a few MB


class _Restricted(pickle.Unpickler):
    """Plain data only: any global (a class, a function to call) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: the dump names {module}.{name}")


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective of a rank's ring buffer: ``op`` without its backend
    (``all_reduce``), ``pg`` the process group's name and ``pg_desc`` its description,
    ``seq`` its sequence number in that group, ``sizes`` its input shapes."""

    seq: int
    op: str
    pg: str
    pg_desc: str
    sizes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    created_ns: int | None = None
    timeout_ms: int | None = None
    retired: bool = False

    def words(self) -> str:
        """``all_reduce #17``."""
        return f"{self.op} #{self.seq}"

    def size_words(self) -> str:
        """``65536 Float``, ``[8, 4096] BFloat16``: the inputs as the dump gives them."""
        parts = []
        for i, shape in enumerate(self.sizes):
            dims = str(shape[0]) if len(shape) == 1 else "[" + ", ".join(map(str, shape)) + "]"
            dtype = self.dtypes[i] if i < len(self.dtypes) else ""
            parts.append(f"{dims} {dtype}".strip())
        return ", ".join(parts)

    def group_words(self) -> str:
        """``0 (default_pg)``."""
        return f"{self.pg} ({self.pg_desc})" if self.pg_desc else self.pg


@dataclass(frozen=True, slots=True)
class RankDump:
    """One rank's dump: its ``entries`` oldest first, ``status`` per group name
    (``last_enqueued``, ``last_completed``), ``groups``: each group's ranks where the dump
    lists them."""

    rank: int
    version: str
    entries: tuple[Collective, ...]
    status: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def last(self, pg: str, *, completed: bool) -> Collective | None:
        """The rank's newest collective of group ``pg`` it entered (or, ``completed``,
        that finished: retired, or within the group's ``last_completed_collective``)."""
        done = self.status.get(pg, {}).get("last_completed")
        for entry in reversed(self.entries):
            if entry.pg != pg:
                continue
            if not completed:
                return entry
            if entry.retired or (done is not None and entry.seq <= done):
                return entry
        return None

    def entered(self, pg: str) -> int:
        """The sequence number of the group's newest collective this rank entered (0:
        none in its buffer)."""
        enqueued = self.status.get(pg, {}).get("last_enqueued")
        newest = self.last(pg, completed=False)
        return max(enqueued or 0, newest.seq if newest else 0)


def read_dump(data: bytes, rank: int) -> RankDump:
    """``data``, rank ``rank``'s dump file. Raises ValueError (what is wrong with it)."""
    if len(data) > DUMP_MAX:
        raise ValueError(f"{len(data)} bytes: larger than a dump ({DUMP_MAX >> 20} MiB)")
    try:
        raw = _Restricted(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as e:
        raise ValueError(f"not a flight-recorder dump: {e}") from None
    except (AttributeError, ImportError, KeyError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a flight-recorder dump: {type(e).__name__}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise ValueError("not a flight-recorder dump: no 'entries' list")
    entries = tuple(e for e in map(_entry_any, raw["entries"]) if e is not None)
    status: dict[str, dict[str, int]] = {}
    for name, item in _dict(raw.get("pg_status")).items():
        item = _dict(item)
        status[str(name)] = {
            key: value
            for key, source in (
                ("last_enqueued", "last_enqueued_collective"),
                ("last_completed", "last_completed_collective"),
            )
            if isinstance(value := item.get(source), int) and value >= 0
        }
    groups = {}
    for key, item in _dict(raw.get("pg_config")).items():
        ranks = _ranks(_dict(item).get("ranks"))
        if ranks:
            groups[str(key)] = ranks
    return RankDump(rank, str(raw.get("version", "")), entries, status, groups)


@dataclass(frozen=True, slots=True)
class RankRow:
    """A rank in the incident's table: its last completed and last entered collective of
    the stalled group; ``dump`` None where its dump is missing (``why``)."""

    rank: int
    last_completed: Collective | None
    last_entered: Collective | None
    dumped: bool = True
    why: str | None = None
    pid: int | None = None
    gpu: int | None = None


@dataclass(frozen=True, slots=True)
class FrReport:
    """What the dumps of a job's ranks say about its stalled collective: ``stuck`` the
    newest collective some rank entered and not every rank finished; ``absent`` the ranks
    that never entered it (their dumps end before it), ``waiting`` the ranks in it,
    ``undumped`` the ranks whose dump is missing or unreadable, ``waited_s`` how long the
    waiting ranks had been in it when they dumped (None: unknown)."""

    stuck: Collective | None
    absent: tuple[int, ...]
    waiting: tuple[int, ...]
    undumped: tuple[int, ...]
    rows: tuple[RankRow, ...]
    waited_s: float | None = None

    @property
    def blamed(self) -> tuple[int, ...]:
        """The ranks to look at: those that never entered, else those without a dump."""
        return self.absent or self.undumped

    def words(self, job: str) -> str:
        """``drafter stalled: rank 5 never entered all_reduce #288686 (ranks 0-4, 6-7
        waiting 600 s)``: the named rank with its GPU and PID where known."""
        if self.stuck is None:
            return f"{job}: the flight recorder shows no collective left waiting"
        waited = "" if self.waited_s is None else f" {duration_words(max(self.waited_s, 0.0))}"
        whom = f"{_plural('rank', self.waiting)} {rank_ranges(self.waiting)} waiting{waited}"
        if self.absent:
            named = "; ".join(self._who(r) for r in self.absent)
            out = f"{job} stalled: {named} never entered {self.stuck.words()} ({whom})"
        elif self.undumped:
            named = "; ".join(self._who(r) for r in self.undumped)
            last = f"{_plural('rank', self.waiting)} {rank_ranges(self.waiting)}"
            return f"{job} stalled: no dump from {named}; {last} last entered {self.stuck.words()}"
        else:
            out = f"{job} stalled: {self.stuck.words()} never completed ({whom})"
        if self.undumped:
            out += f"; no dump from {_plural('rank', self.undumped)} {rank_ranges(self.undumped)}"
        return out

    def detail(self) -> str:
        """The group, the sizes and the timeout: the line under the headline."""
        if self.stuck is None:
            return ""
        parts = [f"process group {self.stuck.group_words()}"]
        if self.stuck.sizes:
            parts.append(f"inputs {self.stuck.size_words()}")
        if self.stuck.timeout_ms is not None:
            parts.append(f"timeout {self.stuck.timeout_ms / 1000:g} s")
        return ", ".join(parts)

    def table(self) -> list[str]:
        """The per-rank table: last completed and last entered collective of each."""
        out = ["rank  pid      gpu  last completed        last entered"]
        for row in self.rows:
            pid = str(row.pid) if row.pid is not None else "?"
            gpu = str(row.gpu) if row.gpu is not None else "?"
            if not row.dumped:
                said = f"no dump ({row.why})" if row.why else "no dump"
                out.append(f"{row.rank:<5} {pid:<8} {gpu:<4} {said}")
                continue
            done = row.last_completed.words() if row.last_completed else "none"
            entered = row.last_entered.words() if row.last_entered else "none"
            out.append(f"{row.rank:<5} {pid:<8} {gpu:<4} {done:<21} {entered}")
        return out

    def _who(self, rank: int) -> str:
        row = next((r for r in self.rows if r.rank == rank), None)
        said = [f"GPU {row.gpu}"] if row and row.gpu is not None else []
        said += [f"PID {row.pid}"] if row and row.pid is not None else []
        return f"rank {rank}" + (f" ({', '.join(said)})" if said else "")


def analyze(
    dumps: Mapping[int, bytes],
    *,
    world: Sequence[int] | None = None,
    pids: Mapping[int, int] | None = None,
    gpus: Mapping[int, int] | None = None,
    at: Mapping[int, float] | None = None,
) -> FrReport:
    """The report of a job's dumps (rank -> bytes). ``world``: the ranks the job has
    (default: those its dumps' default group lists, else those that dumped); ``at``:
    when each rank's dump was written (epoch seconds, the file's time), for how long
    the waiting ranks waited."""
    read: dict[int, RankDump] = {}
    why: dict[int, str] = {}
    for rank, data in dumps.items():
        try:
            read[rank] = read_dump(data, rank)
        except ValueError as e:
            why[rank] = str(e)
    listed = sorted({r for d in read.values() for g in d.groups.values() for r in g})
    ranks = sorted(set(world or listed or read) | set(dumps))
    pids, gpus, at = pids or {}, gpus or {}, at or {}
    stuck = _stuck(read.values())
    rows = []
    for rank in ranks:
        dump = read.get(rank)
        if dump is None:
            missing = why.get(rank, "missing")
            rows.append(RankRow(rank, None, None, False, missing, pids.get(rank), gpus.get(rank)))
            continue
        pg = stuck.pg if stuck else _default_pg(dump)
        rows.append(
            RankRow(
                rank,
                dump.last(pg, completed=True) if pg is not None else None,
                dump.last(pg, completed=False) if pg is not None else None,
                pid=pids.get(rank),
                gpu=gpus.get(rank),
            )
        )
    undumped = tuple(r for r in ranks if r not in read)
    if stuck is None and undumped:
        # Every dump that came finished the same collective (Gloo retires one that timed
        # out as done): the rank without a dump is the one to look at, at the newest.
        stuck = max(
            (d.entries[-1] for d in read.values() if d.entries),
            key=lambda c: (c.created_ns or 0, c.seq),
            default=None,
        )
    if stuck is None:
        return FrReport(None, (), (), undumped, tuple(rows))
    absent = tuple(r for r, d in sorted(read.items()) if d.entered(stuck.pg) < stuck.seq)
    waiting = tuple(r for r, d in sorted(read.items()) if d.entered(stuck.pg) >= stuck.seq)
    waited = [
        at[r] - stuck_at.created_ns / 1e9
        for r in waiting
        if r in at and (stuck_at := _entry(read[r], stuck)) is not None and stuck_at.created_ns
    ]
    return FrReport(stuck, absent, waiting, undumped, tuple(rows), max(waited) if waited else None)


def _stuck(dumps: Iterable[RankDump]) -> Collective | None:
    """The newest collective some rank entered that not all of them finished: per group,
    the highest sequence number entered, where some rank entered less or did not
    complete it; the group whose such collective was created first (it blocks the rest)."""
    dumps = list(dumps)
    found: list[Collective] = []
    for pg in sorted({e.pg for d in dumps for e in d.entries}):
        entered = {d.rank: d.entered(pg) for d in dumps}
        top = max(entered.values(), default=0)
        head = next(
            (
                e
                for d in dumps
                if entered[d.rank] == top
                for e in d.entries
                if e.pg == pg and e.seq == top
            ),
            None,
        )
        if head is None:
            continue
        behind = any(v < top for v in entered.values())
        unfinished = any(
            (last := d.last(pg, completed=True)) is None or last.seq < top
            for d in dumps
            if entered[d.rank] == top
        )
        if behind or unfinished:
            found.append(head)
    if not found:
        return None
    return min(found, key=lambda c: c.created_ns or 0)


def _entry(dump: RankDump, like: Collective) -> Collective | None:
    return next((e for e in dump.entries if e.pg == like.pg and e.seq == like.seq), None)


def _default_pg(dump: RankDump) -> str | None:
    return dump.entries[-1].pg if dump.entries else None


def _entry_of(raw: Mapping[Any, Any]) -> Collective | None:
    seq = raw.get("collective_seq_id")
    if not isinstance(seq, int) or seq <= 0:  # p2p ops count p2p_seq_id: not a collective
        return None
    name = str(raw.get("profiling_name") or "?")
    op = name.split(":", 1)[1] if ":" in name else name
    group = raw.get("process_group")
    pg, desc = ("?", "")
    if isinstance(group, tuple | list) and group:
        pg, desc = str(group[0]), str(group[1]) if len(group) > 1 else ""
    sizes = tuple(
        tuple(int(n) for n in shape if isinstance(n, int))
        for shape in _list(raw.get("input_sizes"))
        if isinstance(shape, list | tuple)
    )
    dtypes = tuple(str(t) for t in _list(raw.get("input_dtypes")))
    created = raw.get("time_created_ns")
    timeout = raw.get("timeout_ms")
    return Collective(
        seq,
        op,
        pg,
        desc,
        sizes,
        dtypes,
        created if isinstance(created, int) else None,
        timeout if isinstance(timeout, int) else None,
        raw.get("retired") is True,
    )


def _entry_any(raw: object) -> Collective | None:
    return _entry_of(raw) if isinstance(raw, dict) else None


def _dict(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _ranks(value: object) -> tuple[int, ...]:
    """``"[0, 1, 2, 3]"`` (as the dump writes a group's ranks) -> (0, 1, 2, 3)."""
    if isinstance(value, list | tuple):
        return tuple(v for v in value if isinstance(v, int))
    if not isinstance(value, str):
        return ()
    out = []
    for part in value.strip().strip("[]").split(","):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
    return tuple(out)


def rank_ranges(ranks: Iterable[int]) -> str:
    """(0, 1, 2, 3, 4, 6, 7) -> ``0-4, 6, 7``."""
    return index_ranges(ranks, ", ")


def _plural(word: str, items: Sequence[int]) -> str:
    return word if len(items) == 1 else f"{word}s"
