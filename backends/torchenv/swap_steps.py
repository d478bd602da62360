"""The commands of a torch swap, as argv lists (never shell strings), and the pure rules
behind them: who uses the venv, and what a rollback must remove and reinstall to bring the
venv back to its saved freeze.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpumon.backends.config.load import HostConfig
from gpumon.backends.masking import masked_shell_line
from gpumon.backends.remote.agent import is_sglang_server

Tool = Literal["uv", "pip"]
SHARED = ("cudnn", "nccl", "cusparselt", "nvshmem")  # one directory for both CUDA majors
INSTALL_TIMEOUT_S = 3600.0
PROTECTED = frozenset({"pip", "setuptools", "wheel", "uv"})  # never removed by a rollback


@dataclass(frozen=True, slots=True)
class SwapCommand:
    """One command of a plan. ``argv`` is run as is (no shell); an empty argv is done by
    gpumon itself (verification). With ``save_to`` the command's stdout is saved to that
    file on the target."""

    key: str  # "freeze", "uninstall", "install", "verify", "rollback-..."
    title: str
    argv: tuple[str, ...] = ()
    save_to: str | None = None
    timeout: float = INSTALL_TIMEOUT_S

    def command(self) -> str:
        """The argv as one shell-quoted line, for display and the audit log."""
        if not self.argv:
            return f"({self.title})"
        text = shlex.join(self.argv)
        return f"{text} > {shlex.quote(self.save_to)}" if self.save_to else text


@dataclass(frozen=True, slots=True)
class VenvUser:
    """A process (or configured job) that uses the venv."""

    label: str  # "job train", "SGLang server", "process"
    pid: int | None = None  # None: configured, not running now
    argv: tuple[str, ...] = ()

    def describe(self) -> str:
        cmd = masked_shell_line(self.argv)
        cmd = cmd if len(cmd) <= 90 else cmd[:87] + "..."
        return f"{self.label} (pid {self.pid}: {cmd})" if self.pid else f"{self.label}: {cmd}"


# --- commands ----------------------------------------------------------------------------


def freeze_argv(tool: Tool, python: str, uv: str | None) -> tuple[str, ...]:
    if tool == "uv":
        return (uv or "uv", "pip", "freeze", "--python", python)
    return (python, "-m", "pip", "freeze", "--all")


def uninstall_argv(tool: Tool, python: str, uv: str | None, names: list[str]) -> tuple[str, ...]:
    if tool == "uv":
        return (uv or "uv", "pip", "uninstall", "--python", python, *names)
    return (python, "-m", "pip", "uninstall", "-y", *names)


def install_argv(
    tool: Tool,
    python: str,
    uv: str | None,
    reqs: list[str],
    *,
    index: str | None,
    reinstall: Sequence[str] = (),
    repair: bool = False,
) -> tuple[str, ...]:
    """``uv pip install --python PY --index-url URL --reinstall-package N ... REQS`` or
    ``PY -m pip install --index-url URL REQS`` (a same-variant repair adds
    ``--force-reinstall --no-deps`` for pip)."""
    where = ("--index-url", index) if index else ()
    if tool == "uv":
        again = [a for name in reinstall for a in ("--reinstall-package", name)]
        return (uv or "uv", "pip", "install", "--python", python, *where, *again, *reqs)
    forced = ("--force-reinstall", "--no-deps") if repair else ()
    return (python, "-m", "pip", "install", "--progress-bar", "off", *where, *forced, *reqs)


def shared_names(major: int) -> list[str]:
    return [f"nvidia-{d}-cu{major}" for d in SHARED]


def venv_users(host: HostConfig, facts: dict[str, Any], venv: str) -> list[VenvUser]:
    """Running processes using the venv (named after the configured job they run, or as an
    SGLang server), then configured jobs whose start command names the venv."""
    out: list[VenvUser] = []
    matched: set[str] = set()
    for proc in facts.get("procs") or []:
        argv = tuple(str(a) for a in proc.get("argv") or [])
        label = "process"
        for job in host.jobs:
            words = [w for w in _split(job.start) if "{" not in w]
            if words and all(w in argv for w in words):
                label = f"job {job.name}"
                matched.add(job.name)
                break
        else:
            if is_sglang_server(list(argv)) or any(a.startswith("sglang::") for a in argv):
                label = "SGLang server"
        out.append(VenvUser(label, int(proc.get("pid") or 0), argv))
    inside = venv.rstrip("/") + "/"
    for job in host.jobs:
        if job.name not in matched and job.start and inside in job.start:
            out.append(VenvUser(f"job {job.name} (not running)", None, tuple(_split(job.start))))
    return out


def _split(command: str | None) -> list[str]:
    try:
        return shlex.split(command or "")
    except ValueError:
        return (command or "").split()


# --- rollback ----------------------------------------------------------------------------


def norm(name: str) -> str:
    """PEP 503 normalised name: ``Typing_Extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(text: str) -> dict[str, str]:
    """``pip freeze`` / ``uv pip freeze`` output -> {normalised name: requirement line}.
    Keeps ``name==version`` and ``name @ url`` lines; skips comments, options and editables."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "-")):
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(==|@)", line)
        if m:
            out[norm(m.group(1))] = line
    return out


def rollback_actions(
    before: Mapping[str, Mapping[str, Any]],
    after: Mapping[str, Mapping[str, Any]],
    freeze: Mapping[str, str],
    relabel: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """(names to uninstall, requirements to install) that turn ``after`` back into ``before``
    (both: normalised name -> {"name", "version"} as the probe lists them).

    Removed: what was not there before. Reinstalled: what is missing or at another version,
    as its freeze line when there is one (``name @ url`` too), else ``name==version``;
    ``relabel`` overrides a requirement (a label-less torch is pinned with its variant label
    so a same-version build of another variant does not satisfy it). pip/setuptools/wheel/uv
    are never touched."""
    relabel = relabel or {}
    remove = sorted(str(after[n].get("name") or n) for n in after if n not in before)
    remove = [n for n in remove if norm(n) not in PROTECTED]
    restore = []
    for key, row in sorted(before.items()):
        if key in PROTECTED:
            continue
        now = after.get(key)
        if now is not None and now.get("version") == row.get("version"):
            continue
        restore.append(
            relabel.get(key) or freeze.get(key) or f"{row.get('name')}=={row.get('version')}"
        )
    return remove, restore


def rollback_steps(
    tool: Tool,
    python: str,
    uv: str | None,
    remove: Sequence[str],
    restore: Sequence[str],
    index: str | None,
) -> list[SwapCommand]:
    """The rollback's commands: remove what the swap added, reinstall what it changed."""
    steps = []
    if remove:
        argv = uninstall_argv(tool, python, uv, list(remove))
        steps.append(
            SwapCommand("rollback-uninstall", "remove what the swap added", argv, timeout=600)
        )
    if restore:
        names = [norm(re.split(r"[=@\s\[]", r, maxsplit=1)[0]) for r in restore]
        argv = install_argv(tool, python, uv, list(restore), index=index, reinstall=names)
        steps.append(SwapCommand("rollback-install", "reinstall the saved versions", argv))
    return steps
