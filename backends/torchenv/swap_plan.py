"""``gpumon swap-torch``: the plan. Which torch variant to install, with which companions,
which commands (argv lists, exactly as run), and why it may be refused.

``build_plan`` is pure (host config + probe facts in, ``SwapPlan`` out); ``plan_swap`` gathers
the facts first. Running a plan is ``torch_swap_run.execute_swap``.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumon.backends.actions.rows import PlanRow
from gpumon.backends.config.load import HostConfig
from gpumon.backends.torchenv.checks import driver_floor
from gpumon.backends.torchenv.doctor import Facts, gather_facts
from gpumon.backends.torchenv.extras import nvidia_sets
from gpumon.backends.torchenv.index import IndexListing, read_index
from gpumon.backends.torchenv.swap_steps import (
    SwapCommand,
    Tool,
    VenvUser,
    freeze_argv,
    install_argv,
    shared_names,
    uninstall_argv,
    venv_users,
)
from gpumon.backends.torchenv.variants import (
    COMPANIONS,
    VARIANT_NAMES,
    Variant,
    VariantTable,
    builtin_table,
    cuda_major,
    driver_at_least,
    gpu_compute_caps,
    index_url,
    series_of,
    sm_name,
    split_version,
    table_covers,
    variant_cuda,
)
from gpumon.backends.transport.base import Transport

__all__ = [
    "FORCED",
    "Refusal",
    "SwapCommand",
    "SwapPlan",
    "VenvUser",
    "build_plan",
    "plan_swap",
    "swap_row_text",
]

FORCED = "--force overrides"  # the label of a refusal that --force lifted
MOVES_WITH_TORCH = ("cuda-toolkit", "cuda-bindings")  # major follows torch (nvidia-* too)
_VERSION_ARG = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")


def swap_row_text(row: PlanRow) -> tuple[int, str]:
    """A row of a swap plan as (indent, ``label: text``): a command as ``1. COMMAND``,
    two columns deeper than the rest; a heading without text as ``label:``."""
    if row.step is not None:
        return 4, f"{row.label} {row.text}"
    return 2, f"{row.label}: {row.text}" if row.text else f"{row.label}:"


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    overridable: bool  # --force bypasses it


@dataclass(frozen=True)
class SwapPlan:
    host: str
    python: str  # the venv's interpreter, absolute, as the target reported it
    venv: str
    tool: Tool | None
    current: str | None  # installed torch ("2.11.0+cu128"), None when not installed
    current_variant: str | None
    target: str  # "2.11.0+cu130"
    variant: str
    cuda: str | None  # the expected torch.version.cuda ("13.0"; None for cpu)
    index_url: str
    previous_index_url: str | None
    pins: tuple[str, ...]  # "torch==2.11.0+cu130", "torchvision==0.26.0+cu130", ...
    companions: tuple[tuple[str, str, str], ...]  # (name, installed, target)
    uninstall: tuple[str, ...]
    steps: tuple[SwapCommand, ...]
    freeze_path: str
    users: tuple[VenvUser, ...] = ()
    refusals: tuple[Refusal, ...] = ()  # blocking
    forced: tuple[Refusal, ...] = ()  # would refuse; --force given
    warnings: tuple[str, ...] = ()
    noop: bool = False  # the target is installed already
    repair: bool = False  # reinstall of the installed variant (--force)
    facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Whether it may run (no refusal and something to do)."""
        return not self.refusals and not self.noop

    def commands(self) -> list[str]:
        return [s.command() for s in self.steps if s.argv]

    @property
    def title(self) -> str:
        """``swap-torch ct200: 2.11.0+cu128 -> 2.11.0+cu130 in /root/venv (uv)``."""
        now = self.current or "no torch"
        return f"swap-torch {self.host}: {now} -> {self.target} in {self.venv} ({self.tool})"

    def rows(self) -> list[PlanRow]:
        """What changes, then the exact commands (one row per step, numbered, ``step`` its
        key), then why it may not run: refusals are problems, what ``--force`` overrides
        and the warnings are warnings, "nothing to do" is ok."""
        rows = [PlanRow("index", self.index_url)]
        for name, old, new in self.companions:
            rows.append(PlanRow("moves with torch", f"{name} {old} -> {new}"))
        if self.uninstall:
            rows.append(PlanRow("removed first (other CUDA major)", " ".join(self.uninstall)))
        rows.append(PlanRow("freeze saved to", self.freeze_path))
        rows += [PlanRow("uses the venv", u.describe()) for u in self.users]
        rows.append(PlanRow("commands", ""))
        rows += [PlanRow(f"{i}.", s.command(), step=s.key) for i, s in enumerate(self.steps, 1)]
        if self.previous_index_url:
            restore = f"restore the freeze from {self.previous_index_url}"
            rows.append(PlanRow("on failure", restore))
        rows += [PlanRow("refused", r.reason, "problem") for r in self.refusals]
        rows += [PlanRow(FORCED, r.reason, "warning") for r in self.forced]
        rows += [PlanRow("warning", w, "warning") for w in self.warnings]
        if self.noop:
            noop = f"{self.current} is installed (--force reinstalls it)"
            rows.append(PlanRow("nothing to do", noop, "ok"))
        return rows

    def describe(self) -> str:
        """The plan as plain text: the title, then each row indented (commands deeper)."""
        lines = [self.title]
        for row in self.rows():
            indent, text = swap_row_text(row)
            lines.append(" " * indent + text)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "python": self.python,
            "venv": self.venv,
            "tool": self.tool,
            "current": self.current,
            "target": self.target,
            "index_url": self.index_url,
            "companions": [list(c) for c in self.companions],
            "uninstall": list(self.uninstall),
            "commands": self.commands(),
            "freeze_path": self.freeze_path,
            "users": [u.describe() for u in self.users],
            "refusals": [r.reason for r in self.refusals],
            "forced": [r.reason for r in self.forced],
            "warnings": list(self.warnings),
            "noop": self.noop,
        }


# --- plan ---------------------------------------------------------------------------------


def build_plan(
    host: HostConfig,
    facts: dict[str, Any],
    variant: str,
    *,
    version: str | None = None,
    force: bool = False,
    read_only: bool = False,
    env_locked: str | None = None,
    table: VariantTable | None = None,
    now: dt.datetime | None = None,
    index: IndexListing | None = None,
) -> SwapPlan:
    """The plan to move the venv of ``host.python`` to ``variant`` (pure). ``env_locked``:
    why the machine's environment must not change (``Transport.python_env_locked``).

    ``index``: what the host's ``torch_index`` serves for ``variant`` (``read_index``).
    When it answered, it alone says which torch versions exist (any ``cuNNN`` it serves);
    the built-in table then only gives driver floors and compute-capability coverage.
    Without an answer (None, or it could not be read) the table decides, as before."""
    table = table or builtin_table()
    f = Facts(facts, host.name)
    py = f.py
    python, venv = f.python, str(py.get("prefix") or "")
    refuse: list[Refusal] = []
    warn: list[str] = []

    def no(reason: str, overridable: bool = True) -> None:
        refuse.append(Refusal(reason, overridable))

    if read_only or host.read_only:
        no(f"{host.name} is read-only (read_only in the config or --read-only)", False)
    if env_locked:
        no(env_locked, False)
    if not variant_ok(variant):
        known = ", ".join(VARIANT_NAMES)
        no(f"unknown variant {variant!r}; expected cuNNN or cpu (e.g. {known})", False)
    current = f.version
    public = version or (split_version(current)[0] if current else "")
    if version is not None and not _VERSION_ARG.fullmatch(version):
        no(f"--version {version!r} is not a release number like 2.11.0", False)
        public = split_version(current)[0] if current else "0.0.0"
    if not public:
        no("torch is not installed in this venv: pass --version", False)
        public = "0.0.0"
    target = f"{public}+{variant}"
    series = series_of(public) or ""
    row = table.built(public, variant)
    url = index_url(host.torch_index, variant)
    served = index.versions("torch", variant) if index is not None else None
    if index is not None and served is not None and variant_ok(variant):
        if public not in served:
            there = ", ".join(served[-12:]) if served else "no torch for this interpreter"
            no(f"torch {public}+{variant} is not on {url} ({index.for_target()}): {there}", False)
    else:
        if index is not None:
            problem = index.problem("torch")
            page = index.page("torch")
            if page is not None and page.status == 404:
                no(f"{url} has no torch (HTTP 404): no {variant} wheels there", False)
            else:
                warn.append(
                    f"the index {url} could not be read ({index_problem_text(problem)}), so "
                    f"the built-in table decides: {table_verdict(row, series, variant)}"
                )
        if series not in table.series():
            known = ", ".join(table.series())
            no(f"torch {series} is not in the built-in variants table ({known})")
        elif row is None and variant_ok(variant):
            names = ", ".join(table.names(series))
            some = table.variant(series, variant)
            which = f"{public} (only {', '.join(some.versions or ())})" if some else series
            no(f"no {variant} build of torch {which} in the table: {names}")
    tool: Tool | None = "uv" if py.get("uv") else "pip" if py.get("pip") else None
    if tool is None:
        no(f"neither uv nor pip is available for {python}", False)
    if not py.get("is_venv"):
        no(f"{python} is not a virtual environment (sys.prefix is its base prefix)")
    _gpu_rules(f, variant, series, row, table, no, warn)

    pins = [f"torch=={target}"]
    companions: list[tuple[str, str, str]] = []
    release = table.release(public)
    for name in COMPANIONS:
        have = f.dist_version(name)
        if have is None:
            continue
        paired: str | None = getattr(release, name) if release else None
        if paired is None and current and split_version(current)[0] == public:
            paired = split_version(have)[0]  # same torch release: same companion release
        if paired is None and index is not None:
            paired = companion_on_index(index, name, public, variant)
        if paired is None:
            no(f"no known {name} release pairs with torch {public}; uninstall {name} first", False)
            continue
        pins.append(f"{name}=={paired}+{variant}")
        companions.append((name, have, f"{paired}+{variant}"))

    want_major = cuda_major(variant_cuda(variant))
    sets = nvidia_sets(f)
    uninstall: list[str] = []
    if want_major is not None and any(m != want_major for m in sets):
        stale = [n for m, names in sets.items() if m != want_major for n in names]
        uninstall = sorted(n for n in stale if n.startswith("nvidia-") or n in MOVES_WITH_TORCH)
        relay = [n for n in sets.get(want_major, []) if n in shared_names(want_major)]
        uninstall += sorted(relay)  # shared directories: lay them down again
    cuda_python = f.dist_version("cuda-python")
    if want_major and cuda_python and cuda_major(cuda_python) != want_major:
        warn.append(
            f"cuda-python {cuda_python} stays; SGLang on CUDA {want_major} needs "
            f"cuda-python {want_major}.x"
        )
    if want_major is None and sets:
        warn.append("nvidia-* packages stay installed (the CPU build does not use them)")
    _extra_warnings(f, variant, public, python, warn)

    users = venv_users(host, facts, venv)
    running = [u for u in users if u.pid]
    if running:
        who = "; ".join(u.describe() for u in running)
        # a process keeps the torch it imported: a swap under it changes nothing it runs
        no(
            f"{len(running)} process(es) use {venv}: {who}. Stop them first: running jobs "
            "keep the old torch until restarted"
        )

    repair = bool(current) and current == target
    noop = repair and not force
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    freeze_path = f"{venv.rstrip('/')}/.gpumon/freeze-{stamp}-{f.variant or 'none'}.txt"
    uv = py.get("uv")
    steps: list[SwapCommand] = []
    if tool is not None:
        steps.append(
            SwapCommand(
                "freeze",
                "save a freeze of the venv",
                freeze_argv(tool, python, uv),
                save_to=freeze_path,
                timeout=300,
            )
        )
        if uninstall:
            steps.append(
                SwapCommand(
                    "uninstall",
                    "remove the other CUDA major's runtime set",
                    uninstall_argv(tool, python, uv, uninstall),
                    timeout=600,
                )
            )
        again = ["torch", *(c[0] for c in companions)]
        again += shared_names(want_major) if want_major else []
        steps.append(
            SwapCommand(
                "install",
                f"install {' '.join(pins)}",
                install_argv(tool, python, uv, pins, index=url, reinstall=again, repair=repair),
            )
        )
        steps.append(
            SwapCommand(
                "verify", f"verify torch {target}, torch.version.cuda {variant_cuda(variant)}"
            )
        )
    prev = f.variant
    return SwapPlan(
        host=host.name,
        python=python,
        venv=venv,
        tool=tool,
        current=current,
        current_variant=prev,
        target=target,
        variant=variant,
        cuda=variant_cuda(variant),
        index_url=url,
        previous_index_url=index_url(host.torch_index, prev) if prev else None,
        pins=tuple(pins),
        companions=tuple(companions),
        uninstall=tuple(uninstall),
        steps=tuple(steps),
        freeze_path=freeze_path,
        users=tuple(users),
        refusals=tuple(r for r in refuse if not (force and r.overridable)),
        forced=tuple(r for r in refuse if force and r.overridable),
        warnings=tuple(warn),
        noop=noop,
        repair=repair and force,
        facts=facts,
    )


def _gpu_rules(
    f: Facts,
    variant: str,
    series: str,
    row: Variant | None,
    table: VariantTable,
    no: Callable[[str], None],
    warn: list[str],
) -> None:
    """Refusals for variants that cannot run on the GPUs or need a newer driver."""
    if variant == "cpu":
        if f.has_gpu:
            warn.append(f"the CPU build cannot use the {len(f.gpus)} GPU(s)")
        return
    if not f.has_gpu:
        no(f"no NVIDIA GPU on {f.host} ({f.no_gpu_text()}): only cpu is allowed without --force")
        return
    for cc in gpu_compute_caps(f.gpus):
        covered = table_covers(row, cc) if row is not None else None
        gpu = next(str(g.get("name")) for g in f.gpus if str(g.get("compute_cap")) == cc)
        if covered is False:
            no(f"{variant} has no code for {sm_name(cc)} (compute capability {cc} of {gpu})")
        elif covered is None:
            warn.append(f"the table does not say whether {variant} runs on {sm_name(cc)}")
    driver = f.gpu.get("driver")
    hard, soft = driver_floor(table, series, variant)
    if not driver:
        warn.append("the driver version could not be read")
    elif hard and not driver_at_least(str(driver), hard):
        no(f"{variant} needs NVIDIA driver >= {hard}; {f.host} has {driver}")
    elif soft and not driver_at_least(str(driver), soft):
        warn.append(f"driver {driver} is below {soft}, the one {variant}'s CUDA ships with")


def _extra_warnings(f: Facts, variant: str, public: str, python: str, warn: list[str]) -> None:
    """What the swap does not move: sglang-kernel, other labelled wheels; cache and disk."""
    for name in ("sglang-kernel", "sgl-kernel"):
        have = f.dist_version(name)
        if have and variant != "cpu":
            build = "cu130" if variant == "cu130" else "cu129"
            base = split_version(have)[0]
            warn.append(
                f"{name} {have} is not moved; for {variant} install its +{build} build: "
                f"uv pip install --python {shlex.quote(python)} --reinstall-package {name} "
                f"'{name}=={base}+{build}' --extra-index-url https://docs.sglang.ai/whl/{build}"
            )
    moved = {"torch", *COMPANIONS}
    for key, row in sorted(f.dists.items()):
        label = split_version(str(row.get("version", "")))[1] or ""
        if key not in moved and re.fullmatch(r"cu[0-9]+|cpu", label) and label != variant:
            warn.append(f"{row.get('name')} {row.get('version')} is built for {label}; not moved")
    if f.installed:
        sizes = [
            f"{row['name']} {int(row.get('bytes') or 0) >> 20} MiB"
            for row in f.raw.get("caches") or []
            if row.get("exists") and row.get("name") != "triton"  # inside inductor's
        ]
        held = f" ({', '.join(sizes)})" if sizes else ""
        warn.append(f"compile caches{held} go cold: the first runs after the swap recompile")
    disk = f.raw.get("disk") or []  # the first row is the venv's file system
    if variant != "cpu" and disk and disk[0].get("free", 0) < 6 << 30:
        warn.append(f"only {disk[0]['free'] >> 20} MiB free at {disk[0]['path']}")


async def plan_swap(
    transport: Transport,
    host: HostConfig,
    variant: str,
    *,
    version: str | None = None,
    force: bool = False,
    read_only: bool = False,
    table: VariantTable | None = None,
) -> SwapPlan:
    """Probe ``host`` (no change) and build the plan. Raises TransportError / ProbeError."""
    sections = ["python", "dists", "torch", "runtime", "gpu", "caches", "procs"]
    facts = await gather_facts(transport, host, sections=sections)
    index = None
    if variant_ok(variant) and not (read_only or host.read_only or transport.python_env_locked):
        f = Facts(facts, host.name)
        projects = ["torch", *(n for n in COMPANIONS if f.dist_version(n) is not None)]
        index = await read_index(transport, host, f.python, variant, projects)
    return build_plan(
        host,
        facts,
        variant,
        version=version,
        force=force,
        read_only=read_only,
        env_locked=transport.python_env_locked,
        table=table,
        index=index,
    )


# A probe's error as Python wrote it -> words: (pattern, what it means).
_INDEX_PROBLEMS = (
    (re.compile(r"Is a directory"), "it is a directory without an index.html"),
    (re.compile(r"No such file or directory"), "no such file"),
    (re.compile(r"(?i)connection refused"), "connection refused"),
    (re.compile(r"(?i)timed? ?out"), "no answer in time"),
    (
        re.compile(r"(?i)name or service not known|nodename nor servname|name resolution"),
        "its host name does not resolve",
    ),
    (re.compile(r"CERTIFICATE_VERIFY_FAILED"), "its TLS certificate is not trusted"),
)
_URLOPEN_ERROR = re.compile(r"^\w+: <urlopen error (.*)>$", re.DOTALL)


def index_problem_text(problem: str | None) -> str:
    """Why the index could not be read, in words: "it is a directory without an
    index.html", not "URLError: <urlopen error [Errno 21] Is a directory: '/…/torch/'>";
    an error it does not know loses Python's wrapper and errno."""
    text = (problem or "no answer").strip()
    for pattern, words in _INDEX_PROBLEMS:
        if pattern.search(text):
            return words
    found = _URLOPEN_ERROR.match(text)
    text = found.group(1) if found else text
    return re.sub(r"\[Errno -?\d+\]\s*", "", text).strip() or "no answer"


def table_verdict(row: Variant | None, series: str, variant: str) -> str:
    """What the built-in table says of ``variant`` for torch ``series``: "torch 2.11 has
    a cu130 build (CUDA 13.0.2, driver 580 or newer)", or that it has none."""
    if row is None:
        return f"it lists no {variant} build of torch {series}"
    facts = [f"CUDA {row.cuda_full}"] if row.cuda_full else []
    if row.min_driver:
        facts.append(f"driver {row.min_driver} or newer")
    said = f" ({', '.join(facts)})" if facts else ""
    return f"torch {series} has a {variant} build{said}"


def variant_ok(variant: str) -> bool:
    """A variant name an index may serve: ``cuNNN`` (cu126 ... cu132 and later) or cpu."""
    return re.fullmatch(r"cu[0-9]{3}|cpu", variant) is not None


def companion_on_index(index: IndexListing, name: str, public: str, variant: str) -> str | None:
    """The release of ``name`` the index pairs with torch ``public`` when the table does
    not know it: torchaudio shares torch's number; torchvision 0.(minor+15) (0.15 came with
    torch 2.0, 0.26 with 2.11), its newest patch there. None when the index has none."""
    served = index.versions(name, variant) or []
    parts = public.split(".")
    if name == "torchaudio":
        return public if public in served else None
    if name == "torchvision" and len(parts) >= 2 and parts[0] == "2" and parts[1].isdigit():
        minor = f"0.{int(parts[1]) + 15}"
        matching = [v for v in served if v == minor or v.startswith(minor + ".")]
        return matching[-1] if matching else None
    return None
