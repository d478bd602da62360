"""Config tables for what runs on a host: ``[hosts.NAME.sglang]`` and
``[hosts.NAME.jobs.JOB]``, plus ``watch_logs``, and the value checkers config.py shares.
Same rules as config.py: one row per key, errors name the dotted key and what was
expected (``Invalid`` carries the path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpumon.backends.config.limits import PATH_MAX, TEMPLATE_MAX, show
from gpumon.backends.untrusted import printable_text

PRESETS = ("kv", "tqdm", "hf", "jsonl", "batch")
PROGRESS_GROUPS = frozenset(
    {"step", "total_steps", "loss", "tokens_per_s", "tokens", "done", "total", "failed", "eta"}
)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class SglangConfig:
    """SGLang servers on a host: fixed ports, or discovered from running processes."""

    ports: tuple[int, ...] = ()
    log: str | None = None  # path or glob of the servers' logs (used when metrics are off)
    discover: bool = True  # also find `sglang.launch_server` / `sglang serve` processes


@dataclass(frozen=True, slots=True)
class JobConfig:
    """A training or batch job gpumon follows (and, with ``start``, can restart)."""

    name: str
    gpus: tuple[int, ...] = ()
    log: str | None = None
    progress: str = "kv"  # a preset name or a regex with named groups
    start: str | None = None  # command template with {param} placeholders
    stop: str | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    params: Mapping[str, str | int | float | bool] = field(
        default_factory=lambda: MappingProxyType({})
    )
    stop_timeout: float = 30.0
    verify_s: float = 20.0
    free_mib: int = 1024
    auto_restart: bool = False
    max_restarts: int = 3
    restart_window: float = 3600.0


class Invalid(Exception):
    """A bad value at ``path`` (relative to the table being checked)."""

    def __init__(self, problem: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(problem)
        self.problem, self.path = problem, path


def limited(s: str, most: int) -> str:
    """``s`` if it has at most ``most`` characters; raises Invalid saying both lengths."""
    if len(s) > most:
        raise Invalid(f"too long: {len(s)} characters; at most {most}")
    return s


def text(v: object) -> str:
    """A non-empty string of printable characters (no control or escape characters), at
    most PATH_MAX long (paths, globs, a progress regex)."""
    if not isinstance(v, str) or not v.strip() or not v.isprintable():
        raise ValueError
    return limited(v, PATH_MAX)


def command_text(v: object) -> str:
    """A command template: printable characters, newlines and tabs (a multi-line script),
    at most TEMPLATE_MAX long."""
    if not isinstance(v, str) or not v.strip() or printable_text(v) != v:
        raise ValueError
    return limited(v, TEMPLATE_MAX)


def boolean(v: object) -> bool:
    if not isinstance(v, bool):
        raise TypeError
    return v


def number(lo: float, hi: float) -> Callable[[object], float]:
    def check(v: object) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ValueError
        return float(v)

    return check


def integer(lo: int, hi: int) -> Callable[[object], int]:
    def check(v: object) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError
        return v

    return check


def log_paths(v: object) -> tuple[str, ...]:
    items = v if isinstance(v, list) else [v]
    return tuple(text(item) for item in items)


def gpu_list(v: object) -> tuple[int, ...]:
    if not isinstance(v, list) or not v:
        raise ValueError
    gpus = tuple(integer(0, 1023)(g) for g in v)
    if len(set(gpus)) != len(gpus):
        raise Invalid("a GPU index appears twice")
    return gpus


def port_list(v: object) -> tuple[int, ...]:
    """``[30000, 30001]`` or ``"30000-30007"`` or a single port."""
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", v)
        if m is None:
            raise ValueError
        lo, hi = int(m[1]), int(m[2])
        if not 1 <= lo <= hi <= 65535 or hi - lo > 255:
            raise ValueError
        return tuple(range(lo, hi + 1))
    items = v if isinstance(v, list) else [v]
    return tuple(integer(1, 65535)(p) for p in items)


def progress_spec(v: object) -> str:
    """A preset name, or a regex whose named groups are all known progress fields."""
    s = text(v)
    if s in PRESETS:
        return s
    try:
        rx = re.compile(s)
    except re.error as e:
        raise Invalid(f"not a preset ({', '.join(PRESETS)}) and not a valid regex: {e}") from None
    unknown = set(rx.groupindex) - PROGRESS_GROUPS
    if unknown or not rx.groupindex:
        raise Invalid(
            f"regex groups must be named from: {', '.join(sorted(PROGRESS_GROUPS))}"
            + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "; it has none")
        )
    return s


def string_table(v: object) -> Mapping[str, str]:
    if not isinstance(v, dict):
        raise TypeError
    out = {}
    for k, val in v.items():
        if not isinstance(val, str) or not val.isprintable():
            raise Invalid(f"expected a string of printable characters, got {show(val)}", (k,))
        out[k] = val
    return MappingProxyType(out)


def param_table(v: object) -> Mapping[str, str | int | float | bool]:
    if not isinstance(v, dict):
        raise TypeError
    for k, val in v.items():
        if not isinstance(val, str | int | float | bool):
            raise Invalid(f"expected a string, number or boolean, got {show(val)}", (k,))
    return MappingProxyType(dict(v))


Spec = tuple[str, Callable[[object], Any], str]

SGLANG_KEYS: tuple[Spec, ...] = (
    ("ports", port_list, 'a list of ports or a range such as "30000-30007"'),
    ("log", text, "a log file path or glob"),
    ("discover", boolean, "true or false"),
)
JOB_KEYS: tuple[Spec, ...] = (
    ("gpus", gpu_list, "a non-empty list of GPU indices"),
    ("log", text, "a log file path or glob"),
    ("progress", progress_spec, f"a preset ({', '.join(PRESETS)}) or a regex"),
    ("start", command_text, "a command template"),
    ("stop", command_text, "a command template"),
    ("workdir", text, "a directory path"),
    ("env", string_table, "a table of strings"),
    ("params", param_table, "a table of parameter defaults"),
    ("stop_timeout", number(1, 3600), "seconds between 1 and 3600"),
    ("verify_s", number(0, 3600), "seconds between 0 and 3600"),
    ("free_mib", integer(0, 1 << 24), "MiB, an integer >= 0"),
    ("auto_restart", boolean, "true or false"),
    ("max_restarts", integer(0, 1000), "an integer 0..1000"),
    ("restart_window", number(1, 7 * 86400), "seconds between 1 and 604800"),
)


def check_keys(raw: object, specs: tuple[Spec, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError
    by_name = {name: (check, expected) for name, check, expected in specs}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in by_name:
            raise Invalid(f"unknown key; expected one of: {', '.join(sorted(by_name))}", (key,))
        check, expected = by_name[key]
        try:
            out[key] = check(value)
        except Invalid as e:
            raise Invalid(e.problem, (key, *e.path)) from None
        except (ValueError, TypeError):
            raise Invalid(f"expected {expected}, got {show(value)}", (key,)) from None
    return out


def sglang_table(raw: object) -> SglangConfig:
    return SglangConfig(**check_keys(raw, SGLANG_KEYS))


def jobs_table(raw: object) -> tuple[JobConfig, ...]:
    if not isinstance(raw, dict):
        raise TypeError
    jobs = []
    for name, table in raw.items():
        if not _NAME.fullmatch(name):
            raise Invalid("a job name: letters, digits, '_', '.', '-' (at most 64)", (name,))
        try:
            values = check_keys(table, JOB_KEYS)
        except Invalid as e:
            raise Invalid(e.problem, (name, *e.path)) from None
        job = JobConfig(name=name, **values)
        if job.start is not None:
            missing = set(_PLACEHOLDER.findall(job.start)) - set(job.params)
            if missing:
                raise Invalid(
                    f"placeholders without a default in params: {', '.join(sorted(missing))}",
                    (name, "start"),
                )
        jobs.append(job)
    return tuple(jobs)
