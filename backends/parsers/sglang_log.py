"""SGLang scheduler stats lines ("Decode batch, ..." / "Prefill batch, ...") -> numbers.

Used when a server runs without ``--enable-metrics``. Every format from v0.5.3 to
v0.5.18 is accepted (docs/formats.md 6.6-6.9): an optional Ray tag, the ``[date time{.ms}
{DP0 TP0 ...}]`` prefix (also absent), ``batch.`` or ``batch,``, an optional ``[iter]``,
items split on ``", "`` with an optional trailing ``", "``, the graph flag under any
device name, and hybrid-model usage keys. Unknown items are kept, not errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpumon.backends.lazy import lazy_pattern

_RAY = lazy_pattern(r"^\(\w+ pid=\d+(?:, ip=[^)]*)?\)\s*")
_PREFIX = lazy_pattern(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d{3})?"
    r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (.*)$"
)
_MESSAGE = lazy_pattern(r"^(Decode|Prefill) batch(?: \[\d+\])?[.,] (.*?)(?:, ?)?$")
_GRAPH_KEYS = ("cuda graph", "cpu graph", "npu graph", "musa graph")
_USAGE_KEYS = (
    "token usage",
    "full token usage",
    "swa token usage",
    "mamba usage",
    "gpu token usage",
)
_TOKEN_KEYS = ("#token", "#full token", "#gpu token")
_INT_FIELDS = {
    "#running-req": "running",
    "#queue-req": "queued",
    "#new-seq": "new_seqs",
    "#new-token": "new_tokens",
    "#cached-token": "cached_tokens",
    "#pending-token": "pending_tokens",
}
_FLOAT_FIELDS = {
    "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput",
}
_MAX_LINE = 8192


@dataclass(frozen=True, slots=True)
class SglangLogStats:
    """One stats line. ``time`` is the server's local time text; ``ranks`` e.g. "DP6 TP6"
    (0.4.x always prints `` TP{n}``; 0.5.3-0.5.5 order DP TP EP PP, 0.5.6+ DP PP ... TP EP).

    ``token_usage`` is the largest of the usage items (normal, full, swa, mamba, gpu),
    ``tokens`` the KV slots in use (``#token`` or ``#full token``). ``extra`` keeps the
    items not read into fields, as (key, raw value).
    """

    kind: Literal["decode", "prefill"]
    time: str | None = None
    ranks: str = ""
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None
    tokens: int | None = None
    gen_throughput: float | None = None
    input_throughput: float | None = None
    new_seqs: int | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    pending_tokens: int | None = None
    cuda_graph: bool | None = None
    extra: tuple[tuple[str, str], ...] = ()

    def rank(self, name: str) -> int | None:
        """The number after ``name`` (``DP``, ``PP``, ``TP``, ...) in ``ranks``, or None."""
        for part in self.ranks.split():
            if part.startswith(name) and part[len(name) :].isdigit():
                return int(part[len(name) :])
        return None


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _float(text: str) -> float | None:
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def log_line_stamp(line: str) -> str | None:
    """The ``date time`` stamp of any server log line (``2026-11-29 14:32:00``), after an
    optional Ray tag; None when the line has none."""
    prefixed = _PREFIX.match(_RAY.sub("", line[:_MAX_LINE], count=1))
    return prefixed[1] if prefixed is not None else None


def parse_sglang_log_line(line: str) -> SglangLogStats | None:
    """The stats in one log line, or None for any other line (never raises).

    A value that does not parse leaves its field None; the rest of the line still counts.
    """
    if "batch" not in line or len(line) > _MAX_LINE:
        return None
    text = _RAY.sub("", line.rstrip("\r\n"), count=1)
    stamp: str | None = None
    ranks = ""
    prefixed = _PREFIX.match(text)
    if prefixed is not None:
        stamp, ranks, text = prefixed[1], prefixed[2].strip(), prefixed[3]
    message = _MESSAGE.match(text)
    if message is None:
        return None
    ints: dict[str, int | None] = {}
    floats: dict[str, float | None] = {}
    graph: bool | None = None
    tokens: int | None = None
    usage: list[float] = []
    extra: list[tuple[str, str]] = []
    for item in message[2].split(", "):
        key, sep, value = item.partition(": ")
        if not sep:
            extra.append((item, ""))
        elif key in _INT_FIELDS:
            ints[_INT_FIELDS[key]] = _int(value)
        elif key in _FLOAT_FIELDS:
            floats[_FLOAT_FIELDS[key]] = _float(value)
        elif key in _USAGE_KEYS:
            u = _float(value)
            if u is not None:
                usage.append(u)
        elif key in _TOKEN_KEYS:
            tokens = _int(value) if tokens is None else tokens
        elif key in _GRAPH_KEYS:
            graph = {"True": True, "False": False}.get(value.strip())
        else:
            extra.append((key, value))
    return SglangLogStats(
        kind="decode" if message[1] == "Decode" else "prefill",
        time=stamp,
        ranks=ranks,
        running=ints.get("running"),
        queued=ints.get("queued"),
        token_usage=max(usage) if usage else None,
        tokens=tokens,
        gen_throughput=floats.get("gen_throughput"),
        input_throughput=floats.get("input_throughput"),
        new_seqs=ints.get("new_seqs"),
        new_tokens=ints.get("new_tokens"),
        cached_tokens=ints.get("cached_tokens"),
        pending_tokens=ints.get("pending_tokens"),
        cuda_graph=graph,
        extra=tuple(extra),
    )


# SGLang's watchdog dump (python/sglang/srt/utils/watchdog.py, WatchdogRaw._watchdog_once,
# 0.5.23; docs/formats.md 6.11): ``{name} debug info:`` and its lines, the py-spy stacks of
# the schedulers (utils/cudacore_pyspy_dump_utils.py pyspy_dump_schedulers: ``Pyspy dump
# for PID {pid} ({cmd}):`` and py-spy's output, ``Pyspy failed ...``, ``No sglang scheduler
# processes found for py-spy dump.``), then ``{name} watchdog timeout
# (self.watchdog_timeout=300, self.soft=False)``; or ``{name} watchdog thread crashed: ...``.
_WATCHDOG_START = lazy_pattern(
    r"\w+ debug info:$|Pyspy dump for PID \d+ |Pyspy failed \(|All pyspy dump attempts "
    r"failed|No sglang scheduler processes found for py-spy dump"
)
_WATCHDOG_END = lazy_pattern(
    r"\w+ watchdog timeout \(self\.watchdog_timeout=|\w+ watchdog thread crashed: "
)
WATCHDOG_LINES_MAX = 2000  # one dump's lines kept (the log tail read has as many)


def watchdog_dumps(text: str) -> list[list[str]]:
    """The watchdog dumps in a SGLang server's log ``text``, each its lines (with their
    log prefix): from its ``debug info:`` or py-spy line to its ``watchdog timeout`` line;
    a dump the tail starts inside of begins at its first line here, one the log has not
    finished yet ends at the text's end."""
    dumps: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        message = _message(line)
        if current is None and (_WATCHDOG_START.search(message) or _WATCHDOG_END.search(message)):
            current = []
            dumps.append(current)
        if current is None:
            continue
        if len(current) < WATCHDOG_LINES_MAX:
            current.append(line)
        if _WATCHDOG_END.search(message):
            current = None
    return dumps


def _message(line: str) -> str:
    """``line`` without its Ray tag and ``[date time TP0]`` prefix."""
    line = _RAY.sub("", line, count=1)
    found = _PREFIX.match(line)
    return found[3] if found else line
