"""The TOML config: where it lives, what it may say, and the hosts it names.

Every key is one row of a ``KeySpec`` table (name, checker, expected text, default)
checked by ``config.schema``, so a new key is one line and every error reads the same:
``FILE: dotted.key: expected X, got Y``. Standard library only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from gpumon.backends.alerts.rules import AlertRules
from gpumon.backends.config.files import regular_file
from gpumon.backends.config.limits import HOST_MAX, MAX_DEPTH, MAX_FILE_BYTES, check_shape, cut
from gpumon.backends.config.limits import show as _show
from gpumon.backends.config.lines import key_line, toml_error_line
from gpumon.backends.config.schema import Invalid as _Invalid
from gpumon.backends.config.schema import (
    KeySpec,
    base_url,
    boolean,
    check_table,
    integer,
    named_tables,
    number,
    text_list,
    word,
)
from gpumon.backends.errors import GpumonError
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.paths import default_config_file

if TYPE_CHECKING:
    from gpumon.backends.config.fleet import FleetConfig
    from gpumon.backends.config.notify import NotifierConfig, NotifySettings
    from gpumon.backends.config.usage import UsageSettings
    from gpumon.backends.config.workloads import JobConfig, SglangConfig, VllmConfig

HostKind = Literal["ssh", "local", "demo"]
HostProcesses = bool | Literal["auto"]
BUILTIN_HOSTS: Mapping[str, HostKind] = MappingProxyType({"demo": "demo", "local": "local"})
COMMAND_LINE = "command line"


DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl"


class ConfigError(GpumonError):
    """A config file or host name that gpumon refuses; ``str()`` is the whole message.

    ``source`` is the file (or "command line"), ``key`` the dotted key, ``line`` the file's
    line (1-based), when known: said last, ``config.toml: hosts.gpu1.port: ... (line 12)``
    (tomllib's own message already ends ``(at line 3, column 12)``).
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ):
        self.problem, self.source, self.key, self.line = problem, source, key, line
        text = ": ".join(p for p in (source, key, problem) if p)
        if line is not None and f"line {line}" not in problem:
            text += f" (line {line})"
        super().__init__(text)


@dataclass(frozen=True, slots=True)
class HostConfig:
    """One machine to watch, with every setting resolved (defaults applied)."""

    name: str
    kind: HostKind
    ssh_host: str | None = None  # hostname, IP address (IPv6 without brackets) or alias
    user: str | None = None  # None: ~/.ssh/config, else the local user name
    port: int | None = None  # None: ~/.ssh/config, else 22
    identity: tuple[str, ...] = ()  # empty: ssh's usual keys and agent
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    accept_new: bool = False
    container: int | None = None  # Proxmox CT id: commands run as `pct exec ID -- ...`
    python: str | None = None  # None: try python3
    nvidia_smi: str = "nvidia-smi"
    interval: float = 1.0
    connect_timeout: float = 10.0
    read_only: bool = False
    watch_logs: tuple[str, ...] = ()  # logs the agent follows for OOM and error lines
    kernel_log: bool = True  # read Xid / OOM-killer lines where the kernel log is readable
    # GPU processes seen from the Proxmox host itself (with `container`): "auto" (on when
    # the host side answers), True (on; a failure is said), False (off)
    host_processes: HostProcesses = "auto"
    torch_index: str = DEFAULT_TORCH_INDEX
    sglang: SglangConfig | None = None
    vllm: VllmConfig | None = None
    jobs: tuple[JobConfig, ...] = ()
    alerts: AlertRules = field(default_factory=AlertRules)
    source: str = COMMAND_LINE
    # A name given on the command line: the config read and its hosts, said when the name
    # does not resolve (it may be a typo of one of them).
    config_note: str = ""

    def job(self, name: str) -> JobConfig | None:
        return next((j for j in self.jobs if j.name == name), None)

    def describe(self) -> str:
        """``ssh root@pve1:22 -> pct exec 200``, ``ssh gpu1``, ``local`` or ``simulator``."""
        if self.kind == "demo":
            return "simulator"
        if self.kind == "local":
            text = "local"
        else:
            text = "ssh " + _target_text(self.user, self.ssh_host or "", self.port)
        return text if self.container is None else f"{text} -> pct exec {self.container}"


@dataclass(frozen=True, slots=True)
class Config:
    """A loaded config. ``path`` is the file read, None when none existed at the default
    location; ``searched``/``reason`` say where gpumon looked and why."""

    path: Path | None
    hosts: dict[str, HostConfig] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=lambda: _builtin_defaults())
    searched: Path | None = None
    reason: str = ""
    notify: NotifySettings | None = None  # [notify.*] and [watch]; None: neither given

    def notify_settings(self) -> NotifySettings:
        """The notifiers and ``gpumon watch`` settings, defaults where the file has none."""
        from gpumon.backends.config.notify import NotifySettings

        return self.notify if self.notify is not None else NotifySettings()

    fleets: dict[str, FleetConfig] = field(default_factory=dict)  # [fleet.NAME]
    usage: UsageSettings = field(default_factory=lambda: _usage_settings({}))  # [usage]


# --- key checkers ----------------------------------------------------------------------


def _identities(v: object) -> tuple[str, ...]:
    if isinstance(v, list):
        return tuple(regular_file(item) for item in v)
    return (regular_file(v),)


# The one program nvidia_smi names runs as one word of an argv, never through a shell.
_PROGRAM = lazy_pattern(r"[A-Za-z0-9_./+@%,=~-]+")


def _program_path(v: object) -> str:
    """A path or program name: ``word`` without white space or shell characters, so
    ``"nvidia-smi -i 0"`` or ``"timeout 5 nvidia-smi"`` is refused here with the reason
    instead of failing as a missing program on the target."""
    s = word(v)
    if not _PROGRAM.fullmatch(s):
        bad = next(c for c in s if not _PROGRAM.fullmatch(c))
        what = "a space" if bad == " " else f"{bad!r}"
        raise _Invalid(
            f"{_show(s)} has {what}: expected a path or program name, not a command line "
            "(it runs as one program, without a shell)"
        )
    return s


_DIGITS = lazy_pattern(r"[0-9]{1,12}")


def _host_processes(v: object) -> HostProcesses:
    if v == "auto":
        return "auto"
    return boolean(v)


def _container(v: object) -> int:
    if isinstance(v, str) and _DIGITS.fullmatch(v):
        v = int(v)
    return integer(100, 999_999_999)(v)


# A hostname or ~/.ssh/config alias: dot-separated labels, never starting with "-".
_HOST = r"[A-Za-z0-9_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*"
_HOST_RE = lazy_pattern(_HOST)
_TARGET_RE = lazy_pattern(
    rf"""
    (?:(?P<user> [A-Za-z0-9_][A-Za-z0-9._-]* )@)?
    (?: \[(?P<v6> [0-9A-Fa-f:.]+ (?:%[A-Za-z0-9_.-]+)? )\]
      | (?P<host> {_HOST} )
      | (?P<bare6> [0-9A-Fa-f.]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]* (?:%[A-Za-z0-9_.-]+)? )
    )
    (?::(?P<port> [0-9]{{1,5}} ))?
    """,
    re.VERBOSE,
)


# Only carries the parsed ``ssh`` value to _build_host: no generated __eq__, __hash__ or
# __repr__, each compiled at import on the one-shot's path (issue 41).
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _SshTarget:
    user: str | None
    host: str
    port: int | None


def _ssh_target(v: object) -> _SshTarget:
    """``[user@]host[:port]``, ``[user@][v6addr][:port]`` or a bare IPv6 address."""
    if not isinstance(v, str):
        raise TypeError
    if len(v) > 2 * HOST_MAX + 8:  # user, "@", host, "[]", ":port": never a long regex run
        raise _Invalid(f"{len(v)} characters; a host name has at most {HOST_MAX}")
    m = _TARGET_RE.fullmatch(v)
    if m is None or (m["bare6"] and m["port"]):
        raise ValueError
    for part, what in ((m["user"], "user name"), (m["host"], "host name")):
        if part is not None and len(part) > HOST_MAX:
            raise _Invalid(f"a {what} of {len(part)} characters; at most {HOST_MAX}")
    host = m["v6"] or m["bare6"]
    if host:
        ipaddress.IPv6Address(host)  # ValueError when it is not one
    port = None if m["port"] is None else int(m["port"])
    if port is not None and not 1 <= port <= 65535:
        raise _Invalid(f"port {port} in {_show(v)} is out of range; expected 1..65535")
    return _SshTarget(m["user"], host or m["host"], port)


def _log_paths(v: object) -> tuple[str, ...]:
    return tuple(os.path.expanduser(p) if p.startswith("~/") else p for p in text_list(v))


def _alert_table(v: object) -> dict[str, Any]:
    """Checked here (names the key); merged over [defaults.alerts] per host in _build_host."""
    if not isinstance(v, dict):
        raise TypeError
    try:
        AlertRules.from_mapping(v, "alerts")
    except ValueError as e:
        key, _, problem = str(e).partition(": ")
        raise _Invalid(problem, tuple(key.split(".")[1:])) from None
    return dict(v)


def _rules(table: Mapping[str, Any]) -> AlertRules:
    return AlertRules.from_mapping(table, "alerts")  # already checked: cannot fail here


SSH_EXPECTED = "an SSH target: user@host[:port], host[:port], an ~/.ssh/config alias or [IPv6]:port"
SECONDS = "a number of seconds between 0.1 and 3600"
CONTAINER_EXPECTED = "a Proxmox container id: an integer 100..999999999 or a string of digits"
PROGRAM = "a non-empty path or program name (not starting with '-')"
KEY_FILE = "a key file path or a list of paths (regular files)"

# Keys shared by [defaults] and [hosts.NAME]. One row per key: name, checker, what the
# error says was expected, the default (also what `config check` shows), and whether the
# built-in demo/local hosts take it from [defaults].
HOST_SETTINGS: tuple[KeySpec, ...] = (
    KeySpec("port", integer(1, 65535), "an integer port 1..65535", None, builtin=False),
    KeySpec("identity", _identities, KEY_FILE, (), builtin=False),
    KeySpec("known_hosts", regular_file, "a known_hosts file path", None, builtin=False),
    KeySpec("accept_new", boolean, "true or false", False, builtin=False),
    KeySpec("container", _container, CONTAINER_EXPECTED, None, builtin=False),
    KeySpec("python", word, PROGRAM, None),
    KeySpec("nvidia_smi", _program_path, PROGRAM, "nvidia-smi"),
    KeySpec("interval", number(0.1, 3600), SECONDS, 1.0),
    KeySpec("connect_timeout", number(0.1, 3600), SECONDS, 10.0),
    KeySpec("read_only", boolean, "true or false", False),
    KeySpec("watch_logs", _log_paths, "a list of log file paths or globs", (), builtin=False),
    KeySpec("kernel_log", boolean, "true or false", True),
    KeySpec("host_processes", _host_processes, '"auto", true or false', "auto"),
    KeySpec(
        "torch_index", base_url, "an http(s) URL of a PyTorch wheel index", DEFAULT_TORCH_INDEX
    ),
    KeySpec("alerts", _alert_table, "an alerts table", {}),
)


# Imported when a host has a server or jobs: a host with neither builds none of
# config.workloads' classes (issue 41: each dataclass costs the one-shot its compiles).
def _sglang_table(raw: object) -> SglangConfig:
    from gpumon.backends.config.workloads import sglang_table

    return sglang_table(raw)


def _vllm_table(raw: object) -> VllmConfig:
    from gpumon.backends.config.workloads import vllm_table

    return vllm_table(raw)


def _jobs_table(raw: object) -> tuple[JobConfig, ...]:
    from gpumon.backends.config.workloads import jobs_table

    return jobs_table(raw)


HOST_KEYS: tuple[KeySpec, ...] = (
    KeySpec("ssh", _ssh_target, SSH_EXPECTED),
    *HOST_SETTINGS,
    KeySpec("sglang", _sglang_table, "a [hosts.NAME.sglang] table"),
    KeySpec("vllm", _vllm_table, "a [hosts.NAME.vllm] table"),
    KeySpec("jobs", _jobs_table, "[hosts.NAME.jobs.JOB] tables"),
)


def _host(name: str, table: dict[str, Any]) -> dict[str, Any]:
    if name in BUILTIN_HOSTS:
        raise _Invalid(f'"{name}" is a built-in host; choose another name')
    checked = check_table(table, HOST_KEYS)
    _one_engine_per_server_job(checked)
    return checked


def _one_engine_per_server_job(host: dict[str, Any]) -> None:
    """A job's ``server`` port says which engine it is: a port of the host's
    ``[hosts.NAME.vllm] ports`` (or one discovery finds serving vLLM) is a vLLM server,
    else SGLang's. A port both tables name says neither: ``r`` would not know how to
    check that the restarted server serves."""
    sglang, vllm = host.get("sglang"), host.get("vllm")
    both = set(sglang.ports if sglang else ()) & set(vllm.ports if vllm else ())
    for job in host.get("jobs", ()):
        if job.server in both:
            raise _Invalid(
                f"port {job.server} is in both [hosts.NAME.sglang] and [hosts.NAME.vllm] "
                "ports: the server of a job is one engine's",
                ("jobs", job.name, "server"),
            )


def _host_tables(raw: object) -> dict[str, dict[str, Any]]:
    return named_tables(
        raw,
        _HOST_RE,
        "a host name of letters, digits, '.', '_' and '-' (not starting with '-' or '.')",
        "a table of host settings",
        _host,
    )


def _notify_tables(raw: object) -> dict[str, NotifierConfig]:
    # Imported when the file has [notify.*] or [watch]: the other commands never pay for
    # config.notify (and the alert kinds it checks against).
    from gpumon.backends.config.notify import notify_tables

    return notify_tables(raw)


def _fleet_tables(raw: object) -> dict[str, FleetConfig]:
    # Imported when the file has [fleet.*]: only `gpumon fleet` reads those tables, and
    # the one-shots never pay for config.fleet's classes and patterns.
    from gpumon.backends.config.fleet import fleet_tables

    return fleet_tables(raw)


def _watch_table(raw: object) -> dict[str, Any]:
    from gpumon.backends.config.notify import watch_table

    return watch_table(raw)


def _usage_settings(raw: object) -> UsageSettings:
    from gpumon.backends.config.usage import usage_settings

    return usage_settings(raw)


TOP_LEVEL: tuple[KeySpec, ...] = (
    KeySpec("defaults", lambda raw: check_table(raw, HOST_SETTINGS), "a [defaults] table", {}),
    KeySpec("hosts", _host_tables, "[hosts.NAME] tables", {}),
    KeySpec("notify", _notify_tables, "[notify.NAME] tables"),
    KeySpec("watch", _watch_table, "a [watch] table"),
    KeySpec("fleet", _fleet_tables, "[fleet.NAME] tables", {}),
    KeySpec("usage", _usage_settings, "a [usage] table"),
)


# --- locating and loading -------------------------------------------------------------


def config_path(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[Path, str]:
    """The config file to read and why: "--config", "$GPUMON_CONFIG" or "XDG default".

    An empty ``explicit`` raises ConfigError; an empty $GPUMON_CONFIG counts as unset, and
    a relative $XDG_CONFIG_HOME is ignored (as the XDG spec says).
    """
    env = os.environ if env is None else env
    if explicit is not None:
        if not os.fspath(explicit):
            raise ConfigError("expected a file path, got an empty string", source="--config")
        return Path(os.fspath(explicit)).expanduser(), "--config"
    if env.get("GPUMON_CONFIG"):
        return Path(env["GPUMON_CONFIG"]).expanduser(), "$GPUMON_CONFIG"
    return default_config_file(env), "XDG default"


def load_config(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Read and validate the config (see ``config_path`` for which file).

    A missing file at the XDG default gives an empty Config (``path`` None). Raises
    ConfigError for a missing named file, unreadable or non-UTF-8 file, TOML syntax
    error, unknown key, wrong type or bad value, or a file, nesting, key or value over
    the limits in ``config.limits``, naming the file and dotted key; a quoted value or
    key is cut to 60 characters.
    """
    path, reason = config_path(explicit, env)
    source = str(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        if reason == "XDG default":
            return Config(path=None, searched=path, reason=reason)
        raise ConfigError(f"no such file (named by {reason})", source=source) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", source=source) from None
    if len(data) > MAX_FILE_BYTES:
        problem = f"larger than {MAX_FILE_BYTES >> 20} MiB; a config is a few KiB"
        raise ConfigError(problem, source=source)
    import tomllib  # here: a one-shot without a config file never parses TOML

    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", source=source) from None
    except tomllib.TOMLDecodeError as e:
        line = toml_error_line(str(e))
        raise ConfigError(f"invalid TOML: {e}", source=source, line=line) from None
    except RecursionError:  # the reader recurses once per level of [[[...]]] or {a={...}}
        problem = f"tables and arrays nested too deeply to read (at most {MAX_DEPTH} levels)"
        raise ConfigError(problem, source=source) from None
    try:
        too_big = check_shape(doc)
        if too_big is not None:
            raise _Invalid(*too_big)
        top = check_table(doc, TOP_LEVEL)
        defaults = _builtin_defaults(top.get("defaults", {}))
        hosts = {
            name: _build_host(name, table, defaults, source)
            for name, table in top.get("hosts", {}).items()
        }
        notify = None
        if "notify" in top or "watch" in top:
            from gpumon.backends.config.notify import notify_settings

            notify = notify_settings(top.get("notify"), top.get("watch"))
        fleets = {n: replace(f, source=source) for n, f in top.get("fleet", {}).items()}
    except _Invalid as e:
        line = key_line(text, e.path)
        raise ConfigError(e.problem, source=source, key=_dotted(e.path), line=line) from None
    return Config(
        path=path,
        hosts=hosts,
        defaults=defaults,
        searched=path,
        reason=reason,
        notify=notify,
        fleets=fleets,
        usage=top.get("usage") or _usage_settings({}),
    )


def _builtin_defaults(overrides: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    values = {s.name: s.default for s in HOST_SETTINGS}
    values.update(overrides or {})
    return MappingProxyType(values)


def _build_host(
    name: str, table: Mapping[str, Any], defaults: Mapping[str, Any], source: str
) -> HostConfig:
    """Merge one validated [hosts.NAME] table over the defaults; ``ssh`` defaults to NAME."""
    target: _SshTarget = table.get("ssh") or _SshTarget(None, name, None)
    values = {**defaults, **{k: v for k, v in table.items() if k != "ssh"}}
    values["alerts"] = _rules({**defaults.get("alerts", {}), **table.get("alerts", {})})
    if target.port is not None:
        if "port" in table and table["port"] != target.port:
            raise _Invalid(
                f"{table['port']} conflicts with port {target.port} in ssh; expected one port",
                ("hosts", name, "port"),
            )
        values["port"] = target.port
    return HostConfig(
        name=name,
        kind="ssh",
        ssh_host=target.host,
        user=target.user,
        source=source,
        **values,
    )


# --- resolving a name given on the command line ----------------------------------------


def resolve_host(config: Config, name: str) -> HostConfig:
    """The host for a name on the command line.

    A configured name returns its entry; ``demo`` (simulator) and ``local`` are built in;
    anything else is an ad-hoc SSH target (``user@host[:port]``, ``host:port``,
    ``[::1]:2200`` or an ~/.ssh/config alias) with the defaults applied. Raises ConfigError
    for anything else (whitespace, shell metacharacters, leading "-", empty parts).
    """
    if name in config.hosts:
        return config.hosts[name]
    if name in BUILTIN_HOSTS:
        shared = {s.name: config.defaults[s.name] for s in HOST_SETTINGS if s.builtin}
        shared["alerts"] = _rules(shared.get("alerts", {}))
        return HostConfig(name=name, kind=BUILTIN_HOSTS[name], **shared)
    try:
        target = _ssh_target(name)
    except (_Invalid, ValueError, TypeError) as e:
        why = e.problem if isinstance(e, _Invalid) else f"expected {SSH_EXPECTED}"
        where = f"in {config.path}" if config.path else "(no config file)"
        raise ConfigError(
            f"host {_show(name)}: not a configured host {where}, demo or local; {why}",
            source=COMMAND_LINE,
        ) from None
    host = _build_host(name, {"ssh": target}, config.defaults, COMMAND_LINE)
    return replace(host, config_note=_config_note(config))


def _config_note(config: Config) -> str:
    """``hosts in /x/config.toml: gpu1, gpu2 (built in: demo, local)``, or that the file has
    none, or that there is no file (and where it was looked for)."""
    builtin = f"(built in: {', '.join(BUILTIN_HOSTS)})"
    if config.path is None:
        looked = f" at {config.searched}" if config.searched is not None else ""
        return f"no config file{looked} {builtin}"
    if not config.hosts:
        return f"no hosts in {config.path} {builtin}"
    return f"hosts in {config.path}: {', '.join(sorted(config.hosts))} {builtin}"


# --- showing ---------------------------------------------------------------------------

_UNSET_TEXT = {
    "ssh_host": "-",
    "user": "(from ~/.ssh/config, else your login name)",
    "port": "(from ~/.ssh/config, else 22)",
    "identity": "(ssh agent and default keys)",
    "known_hosts": "(~/.ssh/known_hosts)",
    "container": "(none: commands run on the host itself)",
    "python": "(try python3)",
}


def format_hosts(config: Config) -> str:
    """A listing for ``gpumon config check``: the file, then one block per configured
    host with every resolved value, then the built-in names."""
    if config.path is not None:
        lines = [f"config: {config.path} ({config.reason})"]
    elif config.searched is not None:
        lines = [f"config: none at {config.searched} ({config.reason}); built-in defaults"]
    else:
        lines = ["config: none; built-in defaults"]
    if not config.hosts:
        lines.append("no hosts configured")
    for host in config.hosts.values():
        lines += ["", f"[hosts.{_dotted((host.name,))}]  {host.describe()}"]
        lines += _table_lines(host, "  ")
    for fleet in config.fleets.values():
        lines += ["", f"[fleet.{_dotted((fleet.name,))}]  prometheus {fleet.prometheus}"]
        lines += [f"  {key:<16} {value}" for key, value in fleet.settings()]
    lines += ["", "built in: demo (simulator), local (this machine)"]
    return "\n".join(lines)


def _table_lines(obj: Any, indent: str) -> list[str]:
    """``key  value`` rows of a config record; a nested record (sglang, alerts, each job)
    is its own indented table under its name, never a dataclass repr."""
    lines: list[str] = []
    width = max(16, *(len(f.name) + 1 for f in fields(obj)))
    for f in fields(obj):
        value = getattr(obj, f.name)
        records = value if isinstance(value, tuple) else (value,)
        if records and all(hasattr(r, "__dataclass_fields__") for r in records):
            for r in records:
                name = getattr(r, "name", None) if f.name == "jobs" else None
                lines.append(f"{indent}{f.name}{'.' + name if name else ''}")
                lines += [row for row in _table_lines(r, indent + "  ") if not _is_name(row, r)]
            continue
        lines.append(f"{indent}{f.name:<{width}} {_format_value(f.name, value)}")
    return lines


def _is_name(row: str, record: Any) -> bool:
    """The ``name`` row of a job's table (its name is already in the table's title)."""
    return row.split() == ["name", str(getattr(record, "name", ""))]


def _format_value(key: str, value: object) -> str:
    if value is None or value == () or (isinstance(value, Mapping) and not value):
        return _UNSET_TEXT.get(key, "-")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if key == "identity" and isinstance(value, tuple):  # said here, not only at connect
        return ", ".join(p if os.path.exists(p) else f"{p} (no such file)" for p in value)
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and key in {"interval", "connect_timeout"}:
        return f"{value:g} s"
    return str(value)


def _target_text(user: str | None, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{user + '@' if user else ''}{shown}{'' if port is None else f':{port}'}"


_BARE_KEY = lazy_pattern(r"[A-Za-z0-9_-]+")


def _dotted(path: tuple[str, ...]) -> str:
    """``hosts.ct200.interval``; parts that are not bare TOML keys are quoted, long ones cut."""
    return ".".join(cut(p) if _BARE_KEY.fullmatch(p) else cut(json.dumps(p)) for p in path)
