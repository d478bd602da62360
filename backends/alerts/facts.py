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
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpumon.backends.model import GpuRef
from gpumon.backends.parsers.processes import holder_words

__all__ = [
    "SWAP_WINDOW_S",
    "AlertFacts",
    "Held",
    "Holder",
    "Restart",
    "TorchSwap",
    "XidFacts",
    "clock_words",
    "size_words",
]

MIB = 1024 * 1024
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
class AlertFacts:
    """The typed facts of one alert (see the module docstring); every field optional.

    ``gpu``: the alert's GPU by every name (its ``index`` is the alert's ``gpu``; a GPU
    none of the host's samples lists has only the names the source gave, an Xid's bus
    id). ``job``: the job the message leads with (``drafter's GPUs 5-7 idle …``).
    ``port``: the SGLang server's. ``xid``: the Xid's (``XidFacts``). ``tried_bytes``,
    ``free_bytes``: what a CUDA allocation tried and what the GPU had free (PyTorch's
    numbers; a memory condition's free memory). ``held``: another container's (or the
    host's) memory on the GPU (``foreign_process``). ``line``: the log line's own words
    (its context and message, without gpumon's note of how its GPU was told), and
    ``detail``: what an OOM line says after "out of memory" where PyTorch's numbers are
    not in it. ``failure``: the kind of the failure a job-down condition's log ended in
    (``cuda_oom``). ``health_check``: an SGLang server's failed health check.
    ``advice``: what the rule says to do (a health fact's, "reset the GPU at the next
    chance"). ``names_gpu``: the message names its GPU itself (no "(GPU 6)" after it).
    ``restart``: what the automatic restart did. ``rate``, ``baseline``, ``unit``: a
    job's rate now and its usual one (``job_slow``), a GPU's memory fill rate
    (``time_to_full``, MiB/s). ``schedulers``: an SGLang server's scheduler PIDs (its
    ``sglang::scheduler_TP*`` processes, as the watched machine numbers them), whose
    stacks py-spy dumps and which ``K`` stops. ``torch_swap``: the host's torch swap before
    a job went slow or idle (``TorchSwap``), which ``d`` checks and ``w`` swaps back."""

    gpu: GpuRef | None = None
    job: str | None = None
    port: int | None = None
    xid: XidFacts | None = None
    tried_bytes: int | None = None
    free_bytes: int | None = None
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
    torch_swap: TorchSwap | None = None

    def to_json(self) -> dict[str, Any]:
        """The facts that are known, by name (``docs/json.md``); {} for none."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value is False or value == ():
                continue
            if isinstance(value, GpuRef):
                value = {k: v for k, v in _ref_json(value).items() if v is not None}
            elif isinstance(value, Held):
                value = {"mib": value.mib, "others": value.others, **_fields(value.holder)}
            elif isinstance(value, XidFacts | Restart | TorchSwap):
                value = _fields(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @staticmethod
    def from_json(data: object) -> AlertFacts:
        """The facts a recording or an outbox row kept (``to_json``); what is missing or
        malformed is unknown, and a record from before facts gives none."""
        if not isinstance(data, Mapping):
            return NO_FACTS
        return AlertFacts(
            gpu=_ref(data.get("gpu")),
            job=_text(data.get("job")),
            port=_int(data.get("port")),
            xid=_xid(data.get("xid")),
            tried_bytes=_int(data.get("tried_bytes")),
            free_bytes=_int(data.get("free_bytes")),
            held=_held(data.get("held")),
            line=_text(data.get("line")),
            detail=_text(data.get("detail")),
            failure=_text(data.get("failure")),
            health_check=data.get("health_check") is True,
            advice=_text(data.get("advice")),
            names_gpu=data.get("names_gpu") is True,
            restart=_restart(data.get("restart")),
            rate=_float(data.get("rate")),
            baseline=_float(data.get("baseline")),
            unit=_text(data.get("unit")),
            schedulers=_ints(data.get("schedulers")),
            torch_swap=_torch_swap(data.get("torch_swap")),
        )


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


def _ref_json(ref: GpuRef) -> dict[str, Any]:
    return {"index": ref.index, "uuid": ref.uuid, "bus_id": ref.bus_id, "minor": ref.minor}


def _fields(value: Holder | XidFacts | Restart | TorchSwap) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in fields(value)}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ints(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if _int(v) is not None)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _ref(data: object) -> GpuRef | None:
    if not isinstance(data, Mapping):
        return None
    return GpuRef(
        _int(data.get("index")),
        _text(data.get("uuid")),
        _text(data.get("bus_id")),
        _int(data.get("minor")),
    )


def _xid(data: object) -> XidFacts | None:
    if not isinstance(data, Mapping):
        return None
    code, meaning = _int(data.get("code")), _text(data.get("meaning"))
    if code is None or meaning is None:
        return None
    return XidFacts(code, meaning, _text(data.get("action")), _text(data.get("whose")))


def _held(data: object) -> Held | None:
    if not isinstance(data, Mapping):
        return None
    mib = _float(data.get("mib"))
    if mib is None:
        return None
    holder = Holder(_text(data.get("container")), _int(data.get("pid")), _text(data.get("program")))
    return Held(mib, holder, _int(data.get("others")) or 0)


def _restart(data: object) -> Restart | None:
    if not isinstance(data, Mapping):
        return None
    step = _text(data.get("step"))
    if step is None:
        return None
    return Restart(
        step,
        _int(data.get("attempt")),
        _int(data.get("attempts")),
        _float(data.get("delay_s")),
        _text(data.get("why")),
    )


def _torch_swap(data: object) -> TorchSwap | None:
    if not isinstance(data, Mapping):
        return None
    was, to, at = _text(data.get("was")), _text(data.get("to")), _float(data.get("at"))
    if was is None or to is None or at is None:
        return None
    return TorchSwap(was, to, at, _text(data.get("by")) or "gpumon")
