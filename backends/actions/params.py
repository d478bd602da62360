"""Job parameters and command templates: ``{name}`` placeholders filled with shell-quoted
values, so a value is always one literal word and can never add a shell command.

The template (the job's ``start`` / ``stop`` in the config) is the user's trusted shell
text; the values (``params`` defaults, ``--param NAME=VALUE``, the restart dialog) are not.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.errors import GpumonError

ParamValue = str | int | float | bool

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # same syntax the config checks
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # tab is fine; newlines end commands


class ParamError(GpumonError, ValueError):
    """A bad parameter name or value, or a template that cannot take a value safely;
    ``str()`` is the whole message for the user."""


def format_value(value: ParamValue) -> str:
    """A parameter value as text: booleans as TOML writes them (``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_value(name: str, default: ParamValue, text: str) -> ParamValue:
    """``text`` (from the command line or a form) as the type of ``default``.

    Raises ParamError naming the parameter when it does not parse.
    """
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered in {"true", "yes", "1", "on"}:
                return True
            if lowered in {"false", "no", "0", "off"}:
                return False
            raise ValueError
        if isinstance(default, int):
            return int(text.strip())
        if isinstance(default, float):
            return float(text.strip())
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[type(default)]
        raise ParamError(f"parameter {name}: expected {kind}, got {text!r}") from None
    return text


def merge_params(
    job: JobConfig, overrides: Mapping[str, ParamValue | str] | None = None
) -> dict[str, ParamValue]:
    """The job's parameter defaults with ``overrides`` applied (strings are parsed to the
    default's type). Raises ParamError for an unknown name (listing the known ones), a value
    that does not parse, or a value with control characters (a newline ends a command)."""
    values: dict[str, ParamValue] = dict(job.params)
    for name, value in (overrides or {}).items():
        if name not in job.params:
            known = ", ".join(sorted(job.params)) or "none (the job has no params table)"
            raise ParamError(f"unknown parameter {name!r} for job {job.name}; known: {known}")
        default = job.params[name]
        if isinstance(value, str) and not isinstance(default, str):
            value = parse_value(name, default, value)
        values[name] = value
    for name, value in values.items():
        if _CONTROL.search(format_value(value)):
            raise ParamError(f"parameter {name}: control characters (newlines) are not allowed")
    return values


def _unsafe_spans(template: str) -> list[tuple[int, int, str]]:
    """(start, end, why) of the parts of ``template`` where a shell-quoted value would not
    stay one literal word: inside quotes, arithmetic, or after a here-document operator."""
    spans: list[tuple[int, int, str]] = []
    i, n = 0, len(template)
    while i < n:
        c = template[i]
        if c == "\\":
            i += 2
        elif c in "'\"":
            end = i + 1
            while end < n and template[end] != c:
                end += 2 if c == '"' and template[end] == "\\" else 1
            spans.append((i, end + 1, "inside quotes"))
            i = end + 1
        elif template.startswith("$((", i) or template.startswith("((", i):
            depth, end = 0, i
            while end < n:
                depth += {"(": 1, ")": -1}.get(template[end], 0)
                end += 1
                if depth == 0 and end > i + 2:
                    break
            spans.append((i, end, "inside arithmetic"))
            i = end
        elif template.startswith("<<", i):
            spans.append((i, n, "in a here-document"))
            break
        else:
            i += 1
    return spans


def check_template(template: str) -> set[str]:
    """The placeholder names in ``template``. Raises ParamError when one sits where a quoted
    value would not stay literal (inside quotes, arithmetic, a here-document): write it bare,
    gpumon quotes the value itself."""
    spans = _unsafe_spans(template)
    for m in PLACEHOLDER.finditer(template):
        for start, end, why in spans:
            if start <= m.start() < end:
                raise ParamError(
                    f"placeholder {m.group(0)} is {why} (column {m.start() + 1}); write it "
                    "unquoted: gpumon shell-quotes every value itself"
                )
    return set(PLACEHOLDER.findall(template))


def render_command(template: str, values: Mapping[str, ParamValue]) -> str:
    """``template`` with each ``{name}`` replaced by ``shlex.quote`` of its value, so a value
    is always exactly one literal word (``x; touch /tmp/pwned`` stays an argument).

    Raises ParamError for a placeholder without a value or in an unsafe place
    (``check_template``), or a value with control characters.
    """
    names = check_template(template)
    missing = names - set(values)
    if missing:
        raise ParamError(f"no value for {', '.join(sorted(missing))} in the command template")
    for name in names:
        if _CONTROL.search(format_value(values[name])):
            raise ParamError(f"parameter {name}: control characters are not allowed")
    return PLACEHOLDER.sub(lambda m: shlex.quote(format_value(values[m.group(1)])), template)
