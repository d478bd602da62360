"""The agent's wire protocol, one module for both ends.

The agent on the target imports it from the package the bootstrap ships
(``gpumon_remote.protocol``); gpumon imports it as ``gpumon.backends.remote.protocol``.
Standard library only, Python 3.8 syntax: this file runs on the target.

- gpumon -> agent, argv: ``AgentOptions`` as one JSON object.
- agent -> gpumon, stdout: one JSON object per line, ``{"type": NAME, ...}`` (``MESSAGES``:
  NAME -> its class). The first is always ``Hello``; its ``agent`` is the agent's
  ``AGENT_VERSION``, and gpumon refuses an agent of another version (``version_problem``).
  A type gpumon does not know is ignored.
- gpumon -> agent, stdin: commands, one JSON object per line (``SetInterval``). stdin
  closing is how the agent learns that gpumon is gone: it exits.

``from_wire`` never trusts the other end: a field missing or of the wrong type becomes its
empty value. The text it yields is the machine's own; the client has made it printable
(``untrusted.loads``) before it gets here.
"""

from __future__ import annotations

import json

# dataclasses (it imports inspect, ast, dis...) and typing cost the agent ~2 MiB of RSS
# on the target: neither is imported at run time. The type checker sees the real
# ``dataclass`` (mypy treats any ``TYPE_CHECKING`` as true); the program runs ``record``
# below, which makes the same classes for what this module uses of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from dataclasses import field
    from dataclasses import fields as fields  # (re-exported: the tests list the fields)
    from typing import Any, ClassVar, TypeVar

    _M = TypeVar("_M", bound="Message")
else:

    class FrozenInstanceError(AttributeError):
        """Assigning to a field of a record (as ``dataclasses.FrozenInstanceError``)."""

    class _Field:
        """A record's field: its ``name``, its default and its ``default_factory``."""

        def __init__(self, default: object, default_factory: object) -> None:
            self.name = ""
            self.default = default
            self.default_factory = default_factory

        def __repr__(self) -> str:
            return f"Field(name={self.name!r})"

    _MISSING = type("_MissingType", (), {"__repr__": lambda self: "MISSING"})()  # no default

    def field(*, default_factory: object) -> object:
        """A field whose default is made for each record (``default_factory()``)."""
        return _Field(_MISSING, default_factory)

    def fields(record_or_class: object) -> tuple:
        """The record's fields in their order (``dataclasses.fields``)."""
        cls = record_or_class if isinstance(record_or_class, type) else type(record_or_class)
        return cls.__record_fields__

    def record(frozen: bool = True) -> object:
        """``@record(frozen=True)`` for this module's classes: the annotated names of
        the class (``ClassVar`` ones left out), in order, with their defaults, become
        the parameters of ``__init__``; equality, hash, repr and ``__match_args__`` are
        over them; assigning to one raises ``FrozenInstanceError``. No inheritance of
        fields: the records here derive from plain classes."""

        def make(cls: type) -> type:
            made = []
            params = []
            namespace = {"_MISSING": _MISSING, "_set": object.__setattr__}
            body = []
            annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (3.8)
            for name, kind in annotations.items():
                if str(kind).startswith("ClassVar"):
                    continue
                value = cls.__dict__.get(name, _MISSING)
                f = value if isinstance(value, _Field) else _Field(value, _MISSING)
                f.name = name
                made.append(f)
                if f.default_factory is not _MISSING:
                    namespace[f"_factory_{name}"] = f.default_factory
                    params.append(f"{name}=_MISSING")
                    body.append(f" if {name} is _MISSING: {name} = _factory_{name}()")
                elif f.default is not _MISSING:
                    namespace[f"_default_{name}"] = f.default
                    params.append(f"{name}=_default_{name}")
                else:
                    params.append(name)
                body.append(f" _set(self, {name!r}, {name})")
                if value is f:
                    delattr(cls, name)  # as dataclass does; a plain default stays on cls
            code = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or [" pass"])
            exec(code, namespace)
            names = tuple(f.name for f in made)

            def values(self: object) -> tuple:
                return tuple(getattr(self, n) for n in names)

            def eq(self: object, other: object) -> object:
                if other.__class__ is not self.__class__:
                    return NotImplemented
                return values(self) == values(other)

            def text(self: object) -> str:
                inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
                return f"{type(self).__qualname__}({inner})"

            def frozen_set(self: object, name: str, value: object) -> None:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")

            def frozen_del(self: object, name: str) -> None:
                raise FrozenInstanceError(f"cannot delete field {name!r}")

            init = namespace["__init__"]
            init.__qualname__ = f"{cls.__qualname__}.__init__"
            cls.__init__ = init
            cls.__eq__ = eq
            cls.__hash__ = lambda self: hash(values(self))
            cls.__repr__ = text
            cls.__match_args__ = names
            cls.__record_fields__ = tuple(made)
            if frozen:
                cls.__setattr__ = frozen_set
                cls.__delattr__ = frozen_del
            return cls

        return make


# The message shapes below; bump on any incompatible change. 2: the GPUs' device minors
# (``Minors``), and a device-file record names the /dev/nvidiaN it holds ``minors``
# (version 1 said ``gpus`` and meant them as indexes).
AGENT_VERSION = 2


# --- coercion of untrusted values -----------------------------------------------------


def _text(raw: dict[str, Any], key: str, default: str = "") -> str:
    value = raw.get(key)
    return default if value is None else str(value)


def _text_or_none(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return None if value is None else str(value)


def _texts(raw: dict[str, Any], key: str) -> list[str]:
    value = raw.get(key)
    return [str(x) for x in value] if isinstance(value, list) else []


def _number(raw: dict[str, Any], key: str, default: float = 0.0) -> float:
    value = raw.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def _int_or_none(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ints_by_name(raw: dict[str, Any], key: str) -> dict[str, int]:
    value = raw.get(key)
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def _objects(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = raw.get(key)
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


# --- agent -> gpumon ------------------------------------------------------------------


class Message:
    """A message from the agent. ``TYPE`` is its wire name."""

    TYPE: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            out[f.name] = getattr(self, f.name)
        return out

    @classmethod
    def from_wire(cls: type[_M], raw: dict[str, Any]) -> _M:
        raise NotImplementedError


@record(frozen=True)
class Hello(Message):
    """The agent started: which version, and how it reads the GPUs."""

    TYPE: ClassVar[str] = "hello"
    agent: int
    source: str  # "agent/nvml" or "agent/nvidia-smi"
    python: str = ""
    hostname: str = ""
    pid: int | None = None
    note: str | None = None  # e.g. why NVML is not used

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Hello:
        version = _int_or_none(raw, "agent")
        return cls(
            agent=-1 if version is None else version,
            source=_text(raw, "source"),
            python=_text(raw, "python"),
            hostname=_text(raw, "hostname"),
            pid=_int_or_none(raw, "pid"),
            note=_text_or_none(raw, "note"),
        )


@record(frozen=True)
class Gpus(Message):
    """One sampling round, rows in nvidia-smi's ``csv,noheader,nounits`` shape whatever
    the source (NVML values are printed the way nvidia-smi prints them). Junk lines of
    nvidia-smi's loop output (Xid text) are passed on; the client's parser counts them."""

    TYPE: ClassVar[str] = "gpus"
    t: float
    fields: list[str]
    rows: list[str]

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Gpus:
        return cls(_number(raw, "t"), _texts(raw, "fields"), _texts(raw, "rows"))


@record(frozen=True)
class Procs(Message):
    """Compute processes, rows as ``nvidia-smi --query-compute-apps`` prints them.
    ``memory``: used MiB per GPU UUID read with the list (NVML; empty from nvidia-smi).
    ``usage``: each process's share of the GPU since the previous list, as
    ``[gpu, pid, sm %, memory-bandwidth %]`` (``gpu``: its UUID from NVML, its index from
    ``nvidia-smi pmon``; a percent None where not sampled), read by ``usage_source``
    (``nvml``, ``pmon``; empty: neither could say). ``details``: ``procfacts`` records of
    the listed PIDs that are processes of the agent's own PID namespace (outside a
    container only: inside one the driver's PIDs may be the host's)."""

    TYPE: ClassVar[str] = "procs"
    t: float
    rows: list[str]
    memory: dict[str, int] = field(default_factory=dict)
    usage: list[list[Any]] = field(default_factory=list)
    usage_source: str = ""
    details: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Procs:
        return cls(
            _number(raw, "t"),
            _texts(raw, "rows"),
            _ints_by_name(raw, "memory"),
            _usage_rows(raw, "usage"),
            _text(raw, "usage_source"),
            _objects(raw, "details"),
        )


def _usage_rows(raw: dict[str, Any], key: str) -> list[list[Any]]:
    """``[gpu, pid, sm, mem]`` rows whose pid is an int and percents ints or None."""
    value = raw.get(key)
    out: list[list[Any]] = []
    for row in value if isinstance(value, list) else []:
        if not isinstance(row, list) or len(row) != 4:
            continue
        gpu, pid, sm, mem = row
        pcts = [None if not isinstance(v, int) or isinstance(v, bool) else v for v in (sm, mem)]
        if isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0:
            out.append([str(gpu), pid, *pcts])
    return out


@record(frozen=True)
class ProcRecords(Message):
    """GPU processes described from ``/proc`` (``host_procs``): ``source`` ``host`` (the
    Proxmox host's collector, every GPU process with its container) or ``device-files``
    (the agent inside a container: who holds ``/dev/nvidiaN``). ``error``: why the list
    is empty or partial (nvidia-smi failed, ``/proc`` not readable)."""

    TYPE: ClassVar[str] = "proc_records"
    t: float
    source: str
    records: list[dict[str, Any]]
    error: str | None = None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> ProcRecords:
        return cls(
            _number(raw, "t"),
            _text(raw, "source"),
            _objects(raw, "records"),
            _text_or_none(raw, "error"),
        )


@record(frozen=True)
class Minors(Message):
    """Each GPU's device minor (the N of ``/dev/nvidiaN``), by its bus id as the source
    spells it (NVML ``00000000:19:00.0``, ``/proc/driver/nvidia/gpus`` ``0000:19:00.0``):
    sent before the first round and again whenever the round's bus ids change.
    ``source``: ``nvml`` or ``procfs``; ``error``: why none could be read."""

    TYPE: ClassVar[str] = "minors"
    t: float
    minors: dict[str, int]
    source: str = ""
    error: str | None = None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Minors:
        minors = _ints_by_name(raw, "minors")
        return cls(_number(raw, "t"), minors, _text(raw, "source"), _text_or_none(raw, "error"))


@record(frozen=True)
class Mig(Message):
    """The GPUs in MIG mode (``gpus``: their UUIDs) and their GPU instances (``mig``'s
    records: ``mig.instance_record``), read on the process poll; ``error``: what could not
    be read (a GPU in ``gpus`` without instances is one whose slices the driver did not
    give). Sent while a GPU is in MIG mode, and once (empty) after the last one left it."""

    TYPE: ClassVar[str] = "mig"
    t: float
    source: str
    gpus: list[str]
    instances: list[dict[str, Any]]
    error: str | None = None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Mig:
        return cls(
            _number(raw, "t"),
            _text(raw, "source"),
            _texts(raw, "gpus"),
            _objects(raw, "instances"),
            _text_or_none(raw, "error"),
        )


@record(frozen=True)
class SmiError(Message):
    """nvidia-smi failed: its exit code and what it printed."""

    TYPE: ClassVar[str] = "smi_error"
    t: float
    exit: int | None
    output: str

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> SmiError:
        return cls(_number(raw, "t"), _int_or_none(raw, "exit"), _text(raw, "output"))


@record(frozen=True)
class Log(Message):
    """New lines of a followed log file; ``backlog``: the tail that was there at start."""

    TYPE: ClassVar[str] = "log"
    tag: str
    path: str
    t: float
    backlog: bool
    lines: list[str]
    dropped: int = 0  # lines left out of a flood (only keyword lines and the newest sent)
    skipped_bytes: int = 0  # written faster than the agent can scan: skipped unread
    # the backlog's file was last written then (its mtime, the target's epoch seconds):
    # when its last line came, the newest any of its lines can be
    written: float | None = None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Log:
        tag = _text(raw, "tag")
        return cls(
            tag=tag,
            path=_text(raw, "path", tag),
            t=_number(raw, "t"),
            backlog=bool(raw.get("backlog")),
            lines=_texts(raw, "lines"),
            dropped=_int_or_none(raw, "dropped") or 0,
            skipped_bytes=_int_or_none(raw, "skipped_bytes") or 0,
            written=_float_or_none(raw, "written"),
        )


@record(frozen=True)
class LogProblem(Message):
    """A followed log that cannot be read (``problem``: why, e.g. "Permission denied"),
    or that can be again (``problem`` None). Sent when that changes, so once per cause."""

    TYPE: ClassVar[str] = "log_problem"
    tag: str
    path: str
    problem: str | None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> LogProblem:
        tag = _text(raw, "tag")
        return cls(tag, _text(raw, "path", tag), _text_or_none(raw, "problem"))


@record(frozen=True)
class Kernel(Message):
    """Kernel log lines (Xid, OOM killer), where the kernel log is readable."""

    TYPE: ClassVar[str] = "kernel"
    t: float
    lines: list[str]

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Kernel:
        return cls(_number(raw, "t"), _texts(raw, "lines"))


@record(frozen=True)
class MemoryEvents(Message):
    """The container's cgroup ``memory.events``, whenever it changed."""

    TYPE: ClassVar[str] = "memory_events"
    t: float
    text: str

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> MemoryEvents:
        return cls(_number(raw, "t"), _text(raw, "text"))


@record(frozen=True)
class Http(Message):
    """A fetch of a URL on the target's localhost (SGLang ``/metrics``), filtered to the
    wanted lines. ``status`` None: no answer (refused, timeout), ``error`` says why."""

    TYPE: ClassVar[str] = "http"
    tag: str
    t: float
    status: int | None
    body: str = ""
    error: str | None = None

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Http:
        return cls(
            tag=_text(raw, "tag"),
            t=_number(raw, "t"),
            status=_int_or_none(raw, "status"),
            body=_text(raw, "body"),
            error=_text_or_none(raw, "error"),
        )


@record(frozen=True)
class Note(Message):
    """Something the user should know, said once (e.g. the kernel log is not readable)."""

    TYPE: ClassVar[str] = "note"
    text: str

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Note:
        return cls(_text(raw, "text"))


@record(frozen=True)
class ThreadDied(Message):
    """One of the agent's threads (``gpus``, ``procs``, ``logs``, ...) ended with an
    exception: what it raised, and its innermost frame. The agent starts it again."""

    TYPE: ClassVar[str] = "thread_died"
    t: float
    thread: str
    error: str
    where: str = ""

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> ThreadDied:
        return cls(
            _number(raw, "t"), _text(raw, "thread"), _text(raw, "error"), _text(raw, "where")
        )


@record(frozen=True)
class FirstRound(Message):
    """One part of the agent finished its first round: ``logs`` (every followed log polled
    once), ``discover`` (SGLang servers looked for; ``ports``: the ones found) or
    ``discover-vllm`` (the same for vLLM servers). A
    one-shot answer waits for these, so it never reports before a source has spoken."""

    TYPE: ClassVar[str] = "first_round"
    part: str
    ports: list[int] = field(default_factory=list)

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> FirstRound:
        ports = raw.get("ports")
        found = (
            [p for p in ports if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536]
            if isinstance(ports, list)
            else []
        )
        return cls(_text(raw, "part"), found)


@record(frozen=True)
class ServerInfo(Message):
    """One serving-engine server discovery found (``engine``: ``vllm``), sent when what
    is known of it changes: ``pid`` of its API server, the parallel sizes its command line
    gives (``tp``, ``pp``, ``dp``; None: not given, the engine's default 1) and ``minors``,
    the ``/dev/nvidiaN`` its process tree holds (its engine core's and workers' GPUs, told
    by descent from the server, not by their names). ``argv``: the command line it was
    started with (``engine`` ``sglang`` too: a hung server's fix says it; the monitor masks
    its secrets on receipt), at most ``ARGV_MAX`` words of ``ARGV_WORD_MAX`` characters."""

    TYPE: ClassVar[str] = "server_info"
    engine: str
    port: int
    pid: int
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    minors: list[int] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> ServerInfo:
        def size(key: str) -> int | None:
            value = _int_or_none(raw, key)
            return value if value is not None and 0 < value <= 65536 else None

        minors = raw.get("minors")
        held = (
            sorted({m for m in minors if isinstance(m, int) and not isinstance(m, bool) and m >= 0})
            if isinstance(minors, list)
            else []
        )
        port = _int_or_none(raw, "port") or 0
        return cls(
            _text(raw, "engine"),
            port if 0 < port < 65536 else 0,
            _int_or_none(raw, "pid") or 0,
            size("tp"),
            size("pp"),
            size("dp"),
            held,
            bounded_argv(raw.get("argv")),
        )


ARGV_MAX = 256  # words of a server's command line kept
ARGV_WORD_MAX = 4096  # characters of each


def bounded_argv(argv: object) -> list[str]:
    """A command line's words as sent (strings only), cut to ``ARGV_MAX`` words of
    ``ARGV_WORD_MAX`` characters."""
    if not isinstance(argv, list):
        return []
    return [a[:ARGV_WORD_MAX] for a in argv if isinstance(a, str)][:ARGV_MAX]


def _float_or_none(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


@record(frozen=True)
class HostStats(Message):
    """The target's own load (``hoststats``): CPU busy % since the last one, memory and
    swap in kiB, the 1/5/15 min load average; None where /proc did not say."""

    TYPE: ClassVar[str] = "host_stats"
    t: float
    cpu_pct: float | None = None
    cpus: int | None = None
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    swap_total_kib: int | None = None
    swap_free_kib: int | None = None
    load: list[float] | None = None  # 1, 5, 15 min

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> HostStats:
        load = raw.get("load")
        numbers = (
            [float(x) for x in load if isinstance(x, (int, float)) and not isinstance(x, bool)]
            if isinstance(load, list)
            else []
        )
        return cls(
            t=_number(raw, "t"),
            cpu_pct=_float_or_none(raw, "cpu_pct"),
            cpus=_int_or_none(raw, "cpus"),
            mem_total_kib=_int_or_none(raw, "mem_total_kib"),
            mem_available_kib=_int_or_none(raw, "mem_available_kib"),
            swap_total_kib=_int_or_none(raw, "swap_total_kib"),
            swap_free_kib=_int_or_none(raw, "swap_free_kib"),
            load=numbers if len(numbers) == 3 else None,
        )


MESSAGES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Gpus,
        Procs,
        ProcRecords,
        Minors,
        Mig,
        SmiError,
        Log,
        LogProblem,
        Kernel,
        MemoryEvents,
        Http,
        Note,
        ThreadDied,
        HostStats,
        FirstRound,
        ServerInfo,
    )
}


def encode(message: Message) -> str:
    """One line of the agent's output (with its newline)."""
    return json.dumps(message.to_wire(), separators=(",", ":")) + "\n"


def version_problem(hello: Hello) -> str | None:
    """Why this side cannot talk to the agent that sent ``hello`` (None: it can)."""
    if hello.agent == AGENT_VERSION:
        return None
    theirs = "an unknown version" if hello.agent < 0 else f"version {hello.agent}"
    return (
        f"incompatible agent: it speaks protocol {theirs}, this gpumon speaks version "
        f"{AGENT_VERSION} (an agent left over from another gpumon?)"
    )


# --- gpumon -> agent ------------------------------------------------------------------


@record(frozen=True)
class SetInterval:
    """Sample every ``seconds`` from now on (the agent clamps it to 0.1 .. 3600)."""

    CMD: ClassVar[str] = "interval"
    seconds: float

    def encode(self) -> bytes:
        return (json.dumps({"cmd": self.CMD, "seconds": self.seconds}) + "\n").encode()


@record(frozen=True)
class Probe:
    """GET ``url`` once (a 127.0.0.1 URL), waiting up to ``timeout`` seconds, and send
    the answer as an ``Http`` message under ``tag`` (SGLang's ``/health_generate`` when a
    server looks hung: asked only then)."""

    CMD: ClassVar[str] = "probe"
    url: str
    tag: str
    timeout: float

    def encode(self) -> bytes:
        raw = {"cmd": self.CMD, "url": self.url, "tag": self.tag, "timeout": self.timeout}
        return (json.dumps(raw) + "\n").encode()


def decode_command(line: str) -> SetInterval | Probe | None:
    """A command line from gpumon; None for anything else (ignored)."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if isinstance(raw, dict) and raw.get("cmd") == Probe.CMD:
        url, tag, timeout = raw.get("url"), raw.get("tag"), raw.get("timeout")
        local = isinstance(url, str) and url.startswith("http://127.0.0.1:")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            return None
        if not local or not isinstance(tag, str):
            return None
        return Probe(str(url), tag, min(max(float(timeout), 0.1), 120.0))
    if not isinstance(raw, dict) or raw.get("cmd") != SetInterval.CMD:
        return None
    seconds = raw.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    return SetInterval(float(seconds))


@record(frozen=True)
class AgentOptions:
    """What the agent is asked to do, passed as one JSON object in its argv.

    ``logs``: ``{"path", "tag", "filter"?, "keep"?}`` per followed log (a path or glob);
    ``http``: ``{"url", "tag", "filter"?, "info"?, "info_tag"?}`` per URL fetched every
    interval; ``info`` paths on the same server are tried in order once it answers (again
    after each time it was down) and the first 200 is sent under ``info_tag``."""

    fields: list[str]
    process_fields: list[str]
    nvidia_smi: str = "nvidia-smi"
    interval: float = 1.0
    # The process list is polled at start, when a GPU's used memory or the GPU count
    # changed (at most every process_interval: with nvidia-smi a poll is a process start)
    # and at least every process_fallback_s (a process replaced by one of the same size).
    process_interval: float = 5.0
    process_fallback_s: float = 60.0
    nvml: bool = True  # use pynvml when the target has it
    logs: list[dict[str, Any]] = field(default_factory=list)
    kernel: bool = False
    # The kernel log read for Xid and OOM-killer lines: /dev/kmsg, or a file lines are
    # appended to (the simulator's own kernel log; a test's).
    kmsg: str = "/dev/kmsg"
    # Inside a container, who holds /dev/nvidiaN here (every /proc/*/fd): off for the
    # simulator, whose CT200 is not the machine the agent runs on.
    device_files: bool = True
    http: list[dict[str, Any]] = field(default_factory=list)
    sglang_discover: bool = False
    # The /proc whose command lines discovery reads: the simulator's CT200 has its own.
    proc: str = "/proc"
    # vLLM servers found from their command lines, their pages kept by this filter
    vllm_discover: bool = False
    vllm_filter: str | None = None
    log_poll_s: float = 0.25

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> AgentOptions:
        return cls(
            fields=_texts(raw, "fields"),
            process_fields=_texts(raw, "process_fields"),
            nvidia_smi=_text(raw, "nvidia_smi") or "nvidia-smi",
            interval=_number(raw, "interval", 1.0),
            process_interval=_number(raw, "process_interval", 5.0),
            process_fallback_s=_number(raw, "process_fallback_s", 60.0),
            nvml=bool(raw.get("nvml", True)),
            logs=_objects(raw, "logs"),
            kernel=bool(raw.get("kernel", False)),
            kmsg=_text(raw, "kmsg") or "/dev/kmsg",
            device_files=bool(raw.get("device_files", True)),
            http=_objects(raw, "http"),
            sglang_discover=bool(raw.get("sglang_discover", False)),
            proc=_text(raw, "proc") or "/proc",
            vllm_discover=bool(raw.get("vllm_discover", False)),
            vllm_filter=_text_or_none(raw, "vllm_filter"),
            log_poll_s=_number(raw, "log_poll_s", 0.25),
        )
