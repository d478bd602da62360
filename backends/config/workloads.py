"""Config tables for what runs on a host: ``[hosts.NAME.sglang]`` and
``[hosts.NAME.jobs.JOB]``. One ``KeySpec`` row per key, checked by ``config.schema``:
errors name the dotted key and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpumon.backends.config.limits import TEMPLATE_MAX, show
from gpumon.backends.config.schema import (
    Invalid,
    KeySpec,
    boolean,
    check_table,
    integer,
    limited,
    named_tables,
    number,
    text,
)
from gpumon.backends.lazy import lazy_pattern
from gpumon.backends.untrusted import printable_text

PRESETS = ("kv", "tqdm", "hf", "jsonl", "batch")
PROGRESS_GROUPS = frozenset(
    {"step", "total_steps", "loss", "tokens_per_s", "tokens", "done", "total", "failed", "eta"}
)
_NAME = lazy_pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_PLACEHOLDER = lazy_pattern(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class SglangConfig:
    """SGLang servers on a host: fixed ports, or discovered from running processes."""

    ports: tuple[int, ...] = ()
    log: str | None = None  # path or glob of the servers' logs (used when metrics are off)
    discover: bool = True  # also find `sglang.launch_server` / `sglang serve` processes
    hung_after_s: float = 60.0  # requests and no token this long: ``sglang_hung``
    spec_accept_min: float = 1.5  # accept length below this for 60 s: ``spec_accept_low``


@dataclass(frozen=True, slots=True)
class VllmConfig:
    """vLLM servers on a host: fixed ports, or discovered from running processes."""

    ports: tuple[int, ...] = ()
    log: str | None = None  # path or glob of the servers' logs (stats lines, engine death)
    discover: bool = True  # also find `vllm serve` / `vllm.entrypoints.openai.api_server`
    hung_after_s: float = 60.0  # requests and no generation token this long: ``vllm_wedged``
    kv_pressure_min: float = 0.9  # KV use this high with preemptions: ``vllm_kv_pressure``
    spec_accept_min: float = 1.5  # mean acceptance length below this for 60 s: ``spec_accept_low``


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
    # What it needs free on each of its GPUs to start (MiB); None: what it was seen to need
    need_mib: int | None = None
    auto_restart: bool = False
    max_restarts: int = 3
    restart_window: float = 3600.0
    stall_after_s: float | None = None  # None: max(5 x its median step interval, 120 s)
    expect_tokens_per_s: float | None = None  # None: learned from its previous good runs
    slow_below: float = 0.5  # job_slow below this share of its baseline ...
    slow_for_s: float = 300.0  # ... for this long
    # Before a restart, stop or kill ends it: its stacks, flight-recorder dumps, logs and
    # nvidia-smi -q into a bundle, for at most evidence_s (0: straight to the stop).
    evidence: bool = True
    evidence_s: float = 15.0
    # The port of the server this job is, SGLang's or vLLM's (a port of ``[hosts.NAME.vllm]
    # ports`` or one discovery finds serving vLLM): ``r`` on its ``sglang_hung``,
    # ``vllm_wedged`` or ``vllm_engine_dead`` restarts it, verified by SGLang's
    # ``/health_generate`` or vLLM's ``/health`` answering 200 within ``verify_s``
    server: int | None = None


def command_text(v: object) -> str:
    """A command template: printable characters, newlines and tabs (a multi-line script),
    at most TEMPLATE_MAX long."""
    if not isinstance(v, str) or not v.strip() or printable_text(v) != v:
        raise ValueError
    return limited(v, TEMPLATE_MAX)


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


# Control characters other than tab: a newline in a value would end the command it is
# substituted into (actions.params refuses it at restart; the config says so at once).
_CONTROL = lazy_pattern(r"[\x00-\x08\x0a-\x1f\x7f]")


def param_table(v: object) -> Mapping[str, str | int | float | bool]:
    if not isinstance(v, dict):
        raise TypeError
    for k, val in v.items():
        if not isinstance(val, str | int | float | bool):
            raise Invalid(f"expected a string, number or boolean, got {show(val)}", (k,))
        if isinstance(val, str) and _CONTROL.search(val):
            raise Invalid(
                f"control characters (a newline ends the command) in {show(val)}; "
                "expected one line of text",
                (k,),
            )
    return MappingProxyType(dict(v))


SGLANG_KEYS: tuple[KeySpec, ...] = (
    KeySpec("ports", port_list, 'a list of ports or a range such as "30000-30007"'),
    KeySpec("log", text, "a log file path or glob"),
    KeySpec("discover", boolean, "true or false"),
    KeySpec("hung_after_s", number(5, 86400), "seconds between 5 and 86400"),
    KeySpec("spec_accept_min", number(0, 64), "an accept length between 0 and 64"),
)
VLLM_KEYS: tuple[KeySpec, ...] = (
    KeySpec("ports", port_list, 'a list of ports or a range such as "8000-8003"'),
    KeySpec("log", text, "a log file path or glob"),
    KeySpec("discover", boolean, "true or false"),
    KeySpec("hung_after_s", number(5, 86400), "seconds between 5 and 86400"),
    KeySpec("kv_pressure_min", number(0.01, 1), "a share between 0.01 and 1"),
    KeySpec("spec_accept_min", number(0, 64), "an acceptance length between 0 and 64"),
)
JOB_KEYS: tuple[KeySpec, ...] = (
    KeySpec("gpus", gpu_list, "a non-empty list of GPU indices"),
    KeySpec("log", text, "a log file path or glob"),
    KeySpec("progress", progress_spec, f"a preset ({', '.join(PRESETS)}) or a regex"),
    KeySpec("start", command_text, "a command template"),
    KeySpec("stop", command_text, "a command template"),
    KeySpec("workdir", text, "a directory path"),
    KeySpec("env", string_table, "a table of strings"),
    KeySpec("params", param_table, "a table of parameter defaults"),
    KeySpec("stop_timeout", number(1, 3600), "seconds between 1 and 3600"),
    KeySpec("verify_s", number(0, 3600), "seconds between 0 and 3600"),
    KeySpec("free_mib", integer(0, 1 << 24), "MiB, an integer >= 0"),
    KeySpec("need_mib", integer(1, 1 << 24), "MiB, an integer >= 1"),
    KeySpec("auto_restart", boolean, "true or false"),
    KeySpec("max_restarts", integer(0, 1000), "an integer 0..1000"),
    KeySpec("restart_window", number(1, 7 * 86400), "seconds between 1 and 604800"),
    KeySpec("stall_after_s", number(1, 7 * 86400), "seconds between 1 and 604800"),
    KeySpec("expect_tokens_per_s", number(1, 1e12), "tokens per second, a number >= 1"),
    KeySpec("slow_below", number(0.01, 1), "a share between 0.01 and 1"),
    KeySpec("slow_for_s", number(1, 7 * 86400), "seconds between 1 and 604800"),
    KeySpec("evidence", boolean, "true or false"),
    KeySpec("evidence_s", number(0, 600), "seconds between 0 and 600"),
    KeySpec("server", integer(1, 65535), "the port of the SGLang or vLLM server it is, 1..65535"),
)


def sglang_table(raw: object) -> SglangConfig:
    return SglangConfig(**check_table(raw, SGLANG_KEYS))


def vllm_table(raw: object) -> VllmConfig:
    return VllmConfig(**check_table(raw, VLLM_KEYS))


def _job(name: str, table: dict[str, Any]) -> JobConfig:
    job = JobConfig(name=name, **check_table(table, JOB_KEYS))
    if job.start is not None:
        missing = set(_PLACEHOLDER.findall(job.start)) - set(job.params)
        if missing:
            raise Invalid(
                f"placeholders without a default in params: {', '.join(sorted(missing))}",
                ("start",),
            )
    return job


def jobs_table(raw: object) -> tuple[JobConfig, ...]:
    """``[hosts.NAME.jobs.JOB]`` tables, checked; raises Invalid naming JOB and the key."""
    jobs = named_tables(
        raw,
        _NAME,
        "a job name of letters, digits, '_', '.' and '-' (at most 64)",
        "a table of job settings",
        _job,
    )
    seen: dict[int, str] = {}
    for job in jobs.values():
        if job.server is None:
            continue
        if job.server in seen:  # ``r`` on its hang would not know which to restart
            raise Invalid(
                f"port {job.server} is already the server of job {seen[job.server]}",
                (job.name, "server"),
            )
        seen[job.server] = job.name
    return tuple(jobs.values())
