"""What an alert says, as typed facts: set by the rule that raises it, read by every
output that says the alert (the incident's headline and fixes, the strip, notify's
story of an automatic restart, the JSON), and never parsed back out of its message.

An alert's ``message`` is its human text: what the history, a recording and the JSON's
``message`` show. Its ``facts`` are what the other outputs render from: the GPU by every
name it goes by (``GpuRef``), the SGLang server's port, the Xid and what NVIDIA says to do
about it, the bytes a CUDA allocation tried and the bytes the GPU had free, who else held
memory on the GPU (``Held``), the advice of a health fact, what the automatic restart
decided (``Restart``), a job's rate and its baseline. Each field is None (or empty) where
the rule that raised the alert does not know it or its kind has none: never a 0 that was
not reported.

Facts travel with the alert into a recording and the snapshot JSON (``to_json``) and come
back from them (``from_json``); a recording written before facts existed gives empty
facts, and its alerts are said by their stored message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from types import UnionType
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin, get_type_hints

from gpumon.backends.model import GpuRef
from gpumon.backends.parsers.processes import holder_words
from gpumon.backends.parsers.units import duration_words

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from gpumon.backends.parsers.flight_recorder import Collective, FrReport

__all__ = [
    "SWAP_WINDOW_S",
    "AlertFacts",
    "Held",
    "Holder",
    "IdleCost",
    "Restart",
    "TorchSwap",
    "XidFacts",
    "clock_words",
    "duration_words",
    "size_words",
]

MIB = 1024 * 1024
_T = TypeVar("_T", bound="DataclassInstance")
# A torch swap this long before a job went slow or idle still explains it, where no
# baseline run dates what the job ran on before (a configured rate, an idle job).
SWAP_WINDOW_S = 86400.0


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding memory on a GPU, as the host's process list names it:
    ``container`` as the list says it (``201`` for a Proxmox CT, ``docker:3f2a…``; None:
    the host itself), ``pid`` the host's PID, ``program`` its short name."""

    container: str | None
    pid: int | None
    program: str | None

    def __str__(self) -> str:
        """``CT 201 jupyter-lab``, ``host python3``."""
        return holder_words(self.container, self.program)


@dataclass(frozen=True, slots=True)
class Held:
    """Memory that another container or the host holds on a GPU (a ``foreign_process``):
    ``mib`` in all, its biggest holder and how many ``others`` hold some too."""

    mib: float
    holder: Holder
    others: int = 0

    def __str__(self) -> str:
        """``6.0 GiB held by CT 201 jupyter-lab`` (``and 2 more``): as the headline says it."""
        more = f" and {self.others} more" if self.others else ""
        return f"{self.mib / 1024:.1f} GiB held by {self.holder}{more}"


@dataclass(frozen=True, slots=True)
class XidFacts:
    """An Xid as the kernel line and gpumon's Xid table say it: its ``code``, its
    ``meaning`` in a few words, NVIDIA's ``action`` (Xid 154: the one its line names;
    None: nothing to do) and ``whose``: what the GPU is to the host, where said
    (``running sglang``, ``not a GPU of this host: CT 201's``)."""

    code: int
    meaning: str
    action: str | None = None
    whose: str | None = None


@dataclass(frozen=True, slots=True)
class Restart:
    """What gpumon's automatic restart of a job decided or met (``auto_restart``):

    - ``due``: restart ``attempt`` of ``attempts`` in ``delay_s``;
    - ``gave_up``: too many in its window, a person restarts it;
    - ``not_started``: the restart could not start (``why``: the error);
    - ``ended``: the restart ran and did not succeed (``why``: its status and words)."""

    step: str
    attempt: int | None = None
    attempts: int | None = None
    delay_s: float | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True)
class TorchSwap:
    """A swap of the host's torch before a job went slow or idle: ``was`` -> ``to`` as
    torch names itself (``2.11.0+cu128``), at epoch ``at``, ``by`` whom (``gpumon``: its
    own swap, from the audit log)."""

    was: str
    to: str
    at: float
    by: str = "gpumon"

    def words(self, now: float) -> str:
        """``torch cu128 -> cu130 at 05:31 (swap by gpumon)``: only the variants when the
        version stayed; the date too when ``now`` is a day or more after it."""
        was, to = self.was, self.to
        base_was, _, var_was = was.partition("+")
        base_to, _, var_to = to.partition("+")
        if base_was == base_to and var_was and var_to:
            was, to = var_was, var_to
        return f"torch {was} -> {to} at {clock_words(self.at, now)} (swap by {self.by})"

    @property
    def variant(self) -> str | None:
        """The CUDA variant it swapped from (``cu128``: what ``w`` swaps back to); None
        where its version has no local tag."""
        return self.was.partition("+")[2] or None


@dataclass(frozen=True, slots=True)
class IdleCost:
    """What GPUs held and idle have cost so far (``gpu_idle_held``): ``gpus`` idle for
    ``seconds`` (the shortest run among them), ``kwh`` drawn meanwhile (power x time: an
    estimate; None where none reports its power), and that at ``price_per_kwh`` in
    ``currency`` (the config's ``[usage]``; None: no price set)."""

    gpus: int
    seconds: float
    kwh: float | None = None
    price_per_kwh: float | None = None
    currency: str = ""

    @property
    def cost(self) -> float | None:
        if self.kwh is None or self.price_per_kwh is None:
            return None
        return self.kwh * self.price_per_kwh

    def words(self) -> str:
        """``4 GPUs idle 6.0 h, 14 kWh, ~2.10 EUR`` (without a price, up to the kWh;
        without power readings, up to the time)."""
        which = "1 GPU" if self.gpus == 1 else f"{self.gpus} GPUs"
        out = f"{which} idle {duration_words(self.seconds)}"
        if self.kwh is not None:
            out += f", {_kwh(self.kwh)} kWh"
        cost = self.cost
        if cost is not None:
            out += f", ~{cost:.2f}" + (f" {self.currency}" if self.currency else "")
        return out


def _kwh(kwh: float) -> str:
    if kwh >= 10:
        return f"{kwh:.0f}"
    return f"{kwh:.1f}" if kwh >= 1 else f"{kwh:.2g}"  # a few minutes: 0.0031 kWh


@dataclass(frozen=True, slots=True)
class AlertFacts:
    """The typed facts of one alert (see the module docstring); every field optional.

    ``gpu``: the alert's GPU by every name (its ``index`` is the alert's ``gpu``; a GPU
    none of the host's samples lists has only the names the source gave, an Xid's bus
    id). ``job``: the job the message leads with (``drafter's GPUs 5-7 idle …``).
    ``port``: the SGLang server's. ``xid``: the Xid's (``XidFacts``). ``tried_bytes``,
    ``free_bytes``: what a CUDA allocation tried and what the GPU had free (PyTorch's
    numbers; a memory condition's free memory). ``in_use_bytes``, ``in_use_by_pid``: what
    the OOM line said its own process held on the GPU, and each other process by PID
    (``Process 2418873 has …``; inside an LXC the job's own, under its host PID).
    ``held``: another container's (or the host's) memory on the GPU (``foreign_process``).
    ``line``: the log line's own words (its context and message, without gpumon's note of
    how its GPU was told), and
    ``detail``: what an OOM line says after "out of memory" where PyTorch's numbers are
    not in it. ``failure``: the kind of the failure a job-down condition's log ended in
    (``cuda_oom``). ``health_check``: an SGLang server's failed health check.
    ``advice``: what the rule says to do (a health fact's, "reset the GPU at the next
    chance"). ``names_gpu``: the message names its GPU itself (no "(GPU 6)" after it).
    ``restart``: what the automatic restart did. ``rate``, ``baseline``, ``unit``: a
    job's rate now and its usual one (``job_slow``), a GPU's memory fill rate
    (``time_to_full``, MiB/s). ``schedulers``: an SGLang server's scheduler PIDs (its
    ``sglang::scheduler_TP*`` processes, as the watched machine numbers them), whose
    stacks py-spy dumps and which ``K`` stops; ``command``: the command line it was
    started with, its secrets masked (one that is no job: its fix). ``engine_pids``: a
    vLLM server's engine core and worker PIDs (``VLLM::EngineCore``, ``VLLM::Worker_TP*``
    on its GPUs), whose stacks py-spy dumps; ``server_pid``: its API server's (discovery's),
    which ``K`` stops. ``torch_swap``: the
    host's torch swap before a job went slow or idle (``TorchSwap``), which ``d`` checks
    and ``w`` swaps back. ``idle_cost``: what GPUs held and idle cost so far (``IdleCost``:
    ``gpu_idle_held``). ``gpus``: the GPUs a job's ``gpu_idle_held`` holds idle (indexes),
    which ``s`` frees by stopping the job; a holder that is no job is its ``held``, which ``K``
    stops.
    ``collective``: what the job's flight-recorder dumps say of its stalled collective
    (``FrReport``: the rank that never arrived, the per-rank table; ``job_stalled``)."""

    gpu: GpuRef | None = None
    job: str | None = None
    port: int | None = None
    xid: XidFacts | None = None
    tried_bytes: int | None = None
    free_bytes: int | None = None
    in_use_bytes: int | None = None
    in_use_by_pid: tuple[tuple[int, int], ...] = ()
    held: Held | None = None
    line: str | None = None
    detail: str | None = None
    failure: str | None = None
    health_check: bool = False
    advice: str | None = None
    names_gpu: bool = False
    restart: Restart | None = None
    rate: float | None = None
    baseline: float | None = None
    unit: str | None = None
    schedulers: tuple[int, ...] = ()
    command: str | None = None
    engine_pids: tuple[int, ...] = ()
    server_pid: int | None = None
    torch_swap: TorchSwap | None = None
    idle_cost: IdleCost | None = None
    gpus: tuple[int, ...] = ()
    collective: FrReport | None = None

    def to_json(self) -> dict[str, Any]:
        """The facts that are known, by name (``docs/json.md``); {} for none."""
        out = {
            f.name: _encoded(value)
            for f in fields(self)
            if f.name != "collective"
            and (value := getattr(self, f.name)) is not None
            and value is not False
            and value != ()
        }
        if self.collective is not None:  # nested parts: its own encoding, the last field
            out["collective"] = _report_json(self.collective)
        return out

    @staticmethod
    def from_json(data: object) -> AlertFacts:
        """The facts a recording or an outbox row kept (``to_json``); what is missing or
        malformed is unknown, and a record from before facts gives none."""
        return _decoded(AlertFacts, data) or NO_FACTS


NO_FACTS = AlertFacts()


def size_words(size: int) -> str:
    """A size as PyTorch's allocator prints it (``format_size`` in
    ``c10/cuda/CUDACachingAllocator.cpp``: ``0 bytes``, ``512.00 KiB``, ``2.00 GiB``; up to
    1 GiB in MiB), but a whole KiB or MiB without its ".00": ``90 MiB``."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= MIB:
        number, unit = f"{size / 1024:.2f}", "KiB"
    elif size <= 1024 * MIB:
        number, unit = f"{size / MIB:.2f}", "MiB"
    else:
        return f"{size / (1024 * MIB):.2f} GiB"
    return f"{number.removesuffix('.00')} {unit}"


def clock_words(at: float, now: float) -> str:
    """Epoch ``at`` as ``14:02`` local time; with the date when ``now`` is a day or more
    away from it."""
    when = time.localtime(at)
    if abs(now - at) >= 86400:
        return time.strftime("%Y-%m-%d %H:%M", when)
    return time.strftime("%H:%M", when)


# Each fact's JSON follows its dataclass's fields, one way for all (``_encoded``,
# ``_decoded``); a fact made of another (``Held``'s ``Holder``) has that one's fields
# beside its own, and a GPU says only the names known (``docs/json.md``).
_INLINE = (Holder,)
_KNOWN_NAMES_ONLY = (GpuRef,)


def _encoded(value: Any) -> Any:
    """A fact's value as JSON: a dataclass as an object of its fields, a tuple a list."""
    if isinstance(value, tuple):
        return [_encoded(v) for v in value]
    if not is_dataclass(value):
        return value
    out: dict[str, Any] = {}
    inlined: dict[str, Any] = {}  # after the fact's own fields
    for f in fields(value):
        inner = getattr(value, f.name)
        if isinstance(inner, _INLINE):
            inlined.update(_encoded(inner))
        elif inner is not None or not isinstance(value, _KNOWN_NAMES_ONLY):
            out[f.name] = inner
    return out | inlined


def _decoded(cls: type[_T], data: object) -> _T | None:
    """An instance of the dataclass ``cls`` from ``_encoded``'s object: each field read as
    its type says; a malformed value is unknown (None, or the field's default), and a
    field that cannot be unknown (its type has no None, no default) unknown makes the
    whole fact unknown."""
    if not isinstance(data, Mapping):
        return None
    values: dict[str, Any] = {}
    for f in fields(cls):
        kind = _field_types(cls)[f.name]
        optional = False
        if get_origin(kind) is UnionType:  # X | None
            optional = type(None) in get_args(kind)
            kind = next(k for k in get_args(kind) if k is not type(None))
        value: Any
        if _nested_type(kind):  # a fact of nested parts reads itself
            value = _report(data.get(f.name))
        elif isinstance(kind, type) and is_dataclass(kind):
            value = _decoded(kind, data if issubclass(kind, _INLINE) else data.get(f.name))
        else:
            value = _SCALARS[kind](data.get(f.name))
        if value is None and f.default is not MISSING:
            value = f.default
        elif value is None and not optional:
            return None
        values[f.name] = value
    return cls(**values)


_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """The fields' types (the annotations are strings here: ``from __future__``)."""
    if cls not in _TYPES:
        # the flight recorder's parser (and pickle) only once a fact is decoded: not on
        # the import path of every alert (``snapshot local`` decodes none)
        from gpumon.backends.parsers.flight_recorder import FrReport

        _TYPES[cls] = get_type_hints(cls, localns={"FrReport": FrReport})
    return _TYPES[cls]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _ints(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(v for v in value if _int(v) is not None)


def _pairs(value: object) -> tuple[tuple[int, int], ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(
        (v[0], v[1])
        for v in value
        if isinstance(v, list) and len(v) == 2 and _int(v[0]) is not None and _int(v[1]) is not None
    )


def _flag(value: object) -> bool | None:
    return True if value is True else None


# How a field of each type is read from JSON: None where the value is not of that type.
_SCALARS: dict[Any, Callable[[object], Any]] = {
    str: _text,
    int: _int,
    float: _float,
    bool: _flag,
    tuple[int, ...]: _ints,
    tuple[tuple[int, int], ...]: _pairs,
}


def _collective_json(c: Collective | None) -> dict[str, Any] | None:
    if c is None:
        return None
    out = {f.name: getattr(c, f.name) for f in fields(c)}
    out["sizes"] = [list(shape) for shape in c.sizes]
    out["dtypes"] = list(c.dtypes)
    return out


def _report_json(r: FrReport) -> dict[str, Any]:
    """A flight-recorder report as JSON: its collectives nested (``_encoded`` is flat)."""
    rows = [
        {
            "rank": row.rank,
            "last_completed": _collective_json(row.last_completed),
            "last_entered": _collective_json(row.last_entered),
            "dumped": row.dumped,
            "why": row.why,
            "pid": row.pid,
            "gpu": row.gpu,
        }
        for row in r.rows
    ]
    return {
        "stuck": _collective_json(r.stuck),
        "absent": list(r.absent),
        "waiting": list(r.waiting),
        "undumped": list(r.undumped),
        "waited_s": r.waited_s,
        "rows": rows,
    }


def _collective(data: object) -> Collective | None:
    from gpumon.backends.parsers.flight_recorder import Collective  # see _field_types

    if not isinstance(data, Mapping):
        return None
    seq, op, pg = _int(data.get("seq")), _text(data.get("op")), _text(data.get("pg"))
    if seq is None or op is None or pg is None:
        return None
    sizes = data.get("sizes")
    shapes = tuple(_ints(s) or () for s in sizes) if isinstance(sizes, list) else ()
    dtypes = data.get("dtypes")
    return Collective(
        seq,
        op,
        pg,
        _text(data.get("pg_desc")) or "",
        shapes,
        tuple(str(t) for t in dtypes) if isinstance(dtypes, list) else (),
        _int(data.get("created_ns")),
        _int(data.get("timeout_ms")),
        data.get("retired") is True,
    )


def _report(data: object) -> FrReport | None:
    from gpumon.backends.parsers.flight_recorder import FrReport, RankRow  # see _field_types

    if not isinstance(data, Mapping):
        return None
    rows = []
    for row in data.get("rows") or []:
        rank = _int(row.get("rank")) if isinstance(row, Mapping) else None
        if not isinstance(row, Mapping) or rank is None:
            continue
        rows.append(
            RankRow(
                rank,
                _collective(row.get("last_completed")),
                _collective(row.get("last_entered")),
                row.get("dumped") is not False,
                _text(row.get("why")),
                _int(row.get("pid")),
                _int(row.get("gpu")),
            )
        )
    return FrReport(
        _collective(data.get("stuck")),
        _ints(data.get("absent")) or (),
        _ints(data.get("waiting")) or (),
        _ints(data.get("undumped")) or (),
        tuple(rows),
        _float(data.get("waited_s")),
    )


def _nested_type(kind: object) -> bool:
    """Whether a field of type ``kind`` nests parts (a flight-recorder report: read by
    ``_report``, not field by field); ``_field_types`` has imported its type."""
    from gpumon.backends.parsers.flight_recorder import FrReport

    return kind is FrReport
