"""Stalled-collective and torchrun elastic lines of a training log -> ``StallLine``.

The spellings are PyTorch's own (``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` and
``torch/distributed/elastic``; docs/formats.md quotes them):

- ``[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812,
  OpType=ALLREDUCE, NumelIn=.., NumelOut=.., Timeout(ms)=600000) ran for 600081
  milliseconds before timing out.`` -> rank, operation, sequence number, timeout;
- ``ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress ...``
  (the heartbeat monitor: the watchdog itself hangs in a CUDA/NCCL call);
- ``Received a dump signal due to a collective timeout from  rank 7 and we will try ...``
  (``"from " + " rank N"``: two spaces) or ``... from this local rank ...``;
- ``Some NCCL operations have failed or timed out. Due to the asynchronous nature ...``;
- torchrun: ``[default] Worker group FAILED. 3/3 attempts left; will restart worker group``
  and the ``Root Cause (first observed failure):`` block of ``ChildFailedError`` with its
  ``rank      : 3 (local_rank: 3)`` and ``exitcode  : -6 (pid: 4121)`` lines.

``CollectiveScanner`` keeps the state of the Root Cause block across lines. Parsing never
raises; a line that is none of these gives None.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.backends.lazy import lazy_pattern

__all__ = ["KEEP_WORDS", "CollectiveScanner", "StallLine"]

# Literal words (for the agent's keep pattern under a log flood) that every line above has.
KEEP_WORDS = (
    "collective operation timeout",
    "watchdog got stuck",
    "dump signal due to a collective",
    "NCCL operations have failed",
    "attempts left; will restart",
    "first observed failure",
    "rank      :",
    "exitcode  :",
)

_WATCHDOG = lazy_pattern(
    r"Watchdog caught collective operation timeout: "
    r"Work\w*\((?P<work>[^)]*(?:\([^)]*\)[^)]*)*)\) ran for (?P<ran>\d+) milliseconds"
)
_FIELD = lazy_pattern(r"(\w+(?:\(ms\))?)=([^,]*)")
_STUCK = lazy_pattern(r"watchdog got stuck for (?P<s>\d+) seconds")
_RANK_PREFIX = lazy_pattern(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]|\[rank(?P<lower>\d+)\]")
_DUMP = lazy_pattern(
    r"Received a dump signal due to a collective timeout from\s+"
    r"(?:rank\s+(?P<rank>\d+)|(?P<local>this local rank))"
)
_FAILED_OPS = "Some NCCL operations have failed or timed out"
_RESTART = lazy_pattern(
    r"Worker group (?P<state>[A-Z]+)\. (?P<left>\d+)/(?P<max>\d+) attempts left; "
    r"will restart worker group"
)
_ROOT = "Root Cause (first observed failure)"
_ROOT_RANK = lazy_pattern(r"^\s*rank\s+:\s*(?P<rank>\d+)")
_ROOT_EXIT = lazy_pattern(r"^\s*exitcode\s+:\s*(?P<code>-?\d+)")
_ROOT_LINES = 12  # the block's fields follow its header within this many lines


@dataclass(frozen=True, slots=True)
class StallLine:
    """What one line says. ``kind``: ``timeout`` (a collective timed out: a stall),
    ``restart`` (torchrun restarts the worker group), ``root_cause`` (the first failure
    of a ``ChildFailedError``). Fields not on the line are None."""

    kind: str
    rank: int | None = None
    op: str | None = None
    seq: int | None = None
    timeout_s: float | None = None
    attempts_left: int | None = None
    max_restarts: int | None = None
    exit_code: int | None = None
    text: str = ""  # in words, for a message


class CollectiveScanner:
    """Reads a job log's lines in order; ``scan(line)`` is the ``StallLine`` it completes."""

    def __init__(self) -> None:
        self._root_left = 0  # lines of a Root Cause block still to read
        self._root_rank: int | None = None

    def scan(self, line: str) -> StallLine | None:
        if self._root_left:
            return self._root_line(line)
        if "ollective" in line or "NCCL" in line or "atchdog" in line:
            return _timeout(line)
        m = _RESTART.search(line)
        if m is not None:
            left, most = int(m["left"]), int(m["max"])
            return StallLine(
                "restart",
                attempts_left=left,
                max_restarts=most,
                text=f"torchrun restarts the worker group ({left}/{most} attempts left)",
            )
        if _ROOT in line:
            self._root_left, self._root_rank = _ROOT_LINES, None
        return None

    def _root_line(self, line: str) -> StallLine | None:
        self._root_left -= 1
        m = _ROOT_RANK.match(line)
        if m is not None:
            self._root_rank = int(m["rank"])
            return None
        m = _ROOT_EXIT.match(line)
        if m is None:
            return None
        self._root_left = 0
        code, rank = int(m["code"]), self._root_rank
        who = f"rank {rank}" if rank is not None else "a rank"
        return StallLine(
            "root_cause",
            rank=rank,
            exit_code=code,
            text=f"first failure: {who} exited with {code}{_signal_name(code)}",
        )


def _timeout(line: str) -> StallLine | None:
    m = _WATCHDOG.search(line)
    if m is not None:
        fields = dict(_FIELD.findall(m["work"]))
        seq = _int(fields.get("SeqNum"))
        op = fields.get("OpType") or None
        ms = _int(fields.get("Timeout(ms)"))
        rank = _prefix_rank(line)
        timeout = ms / 1000.0 if ms is not None else int(m["ran"]) / 1000.0
        what = f"{op or 'a collective'}" + (f" #{seq}" if seq is not None else "")
        return StallLine(
            "timeout",
            rank=rank,
            op=op,
            seq=seq,
            timeout_s=timeout,
            text=f"{_who(rank)} timed out in {what} after {timeout:.0f} s",
        )
    m = _STUCK.search(line)
    if m is not None:
        rank = _prefix_rank(line)
        who = f"rank {rank}'s" if rank is not None else "the"
        return StallLine(
            "timeout",
            rank=rank,
            timeout_s=float(m["s"]),
            text=f"{who} NCCL watchdog stuck for {m['s']} s",
        )
    m = _DUMP.search(line)
    if m is not None:
        rank = _prefix_rank(line) if m["local"] else int(m["rank"])
        who = f"rank {rank}" if rank is not None else "a rank"
        return StallLine("timeout", rank=rank, text=f"a collective of {who} timed out")
    if _FAILED_OPS in line:
        rank = _prefix_rank(line)
        who = f" on rank {rank}" if rank is not None else ""
        return StallLine("timeout", rank=rank, text=f"NCCL operations failed or timed out{who}")
    return None


def _prefix_rank(line: str) -> int | None:
    """The rank of PyTorch's ``[rank3]:`` / ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` prefix."""
    m = _RANK_PREFIX.search(line)
    if m is None:
        return None
    return int(m["rank"] or m["lower"])


def _who(rank: int | None) -> str:
    return f"rank {rank}" if rank is not None else "a rank"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _signal_name(code: int) -> str:
    """torchrun's negative exit code is the signal that killed the rank."""
    names = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM"}
    return f" ({names[code]})" if code in names else ""
