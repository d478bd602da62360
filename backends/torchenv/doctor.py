"""``gpumon doctor``: what state a machine's torch stack is in, without changing anything.

The probe (``doctor_probe`` + ``doctor_probe_fs``, standard library only) is shipped over
stdin to the target's interpreter by ``remote.bootstrap``, through the host's Transport
(so inside the container when one is configured) and prints raw facts as JSON;
``doctor_checks`` / ``doctor_extras`` turn them into checks. For the UI:
``gather_facts`` + ``evaluate``, or ``run_doctor`` for both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumon.backends import untrusted
from gpumon.backends.config.load import HostConfig
from gpumon.backends.errors import GpumonError
from gpumon.backends.remote.bootstrap import program_argv
from gpumon.backends.torchenv.checks import (
    CUDA12_VARIANTS,
    STATUSES,
    Check,
    Facts,
    Status,
    checks_torch,
    needs_cuda12,
)
from gpumon.backends.torchenv.doctor_procs import process_checks
from gpumon.backends.torchenv.extras import (
    check_logs,
    check_python,
    check_userspace,
    extra_checks,
    gpus_check,
)
from gpumon.backends.torchenv.flight_recorder import readiness_checks
from gpumon.backends.torchenv.gpu_checks import gpu_checks
from gpumon.backends.torchenv.index import read_variants
from gpumon.backends.torchenv.seen import record_seen
from gpumon.backends.torchenv.variants import VariantTable, builtin_table
from gpumon.backends.transport.base import Transport
from gpumon.backends.workloads.watch import Workloads

__all__ = [
    "STATUSES",
    "Check",
    "DoctorReport",
    "Facts",
    "ProbeError",
    "Status",
    "evaluate",
    "format_checks",
    "format_report",
    "gather_facts",
    "host_python",
    "probe_argv",
    "run_doctor",
]

PROBE_SLACK_S = 60.0  # on top of the import timeouts: metadata, nvidia-smi, cache walks


class ProbeError(GpumonError):
    """The target's interpreter ran but the probe did not deliver facts (message for users)."""


def probe_argv(python: str, options: dict[str, Any]) -> tuple[list[str], bytes]:
    """The argv that runs the probe with ``python`` and the bytes to write to its stdin."""
    return program_argv(python, "doctor_probe", args=[json.dumps(options)])


def host_python(host: HostConfig) -> str:
    """The interpreter the doctor and swaps act on: the host's ``python``, else python3
    (``monitor.target_host`` gives the simulator gpumon's own)."""
    return host.python or "python3"


async def gather_facts(
    transport: Transport,
    host: HostConfig,
    *,
    sections: Sequence[str] | None = None,
    import_timeout: float = 90.0,
) -> dict[str, Any]:
    """Run the probe on ``host`` and return its facts. Raises TransportError when the host
    cannot be reached, ProbeError when the interpreter fails or prints no facts. The torch
    it found is noted in the torch-seen log (``seen.py``: ``job_slow`` names a torch
    changed outside gpumon)."""
    python = host_python(host)
    options: dict[str, Any] = {
        "nvidia_smi": host.nvidia_smi,
        "import_timeout": import_timeout,
        "logs": [spec["path"] for spec in Workloads(host).log_specs()],
    }
    if sections is not None:
        options["sections"] = list(sections)
    argv, data = probe_argv(python, options)
    res = await transport.run(argv, input=data, timeout=2 * import_timeout + PROBE_SLACK_S)
    if res.exit_code is None:
        raise ProbeError(f"{python} on {host.name}: the probe did not finish in time")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.exit_code != 0 or not lines:
        tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-3:]) or "no output"
        raise ProbeError(f"{python} on {host.name} failed (exit {res.exit_code}): {tail}")
    try:
        facts: dict[str, Any] = untrusted.loads(lines[-1])
    except ValueError as e:
        raise ProbeError(f"{python} on {host.name}: unreadable probe output ({e})") from None
    if isinstance(facts, dict) and facts.get("torch"):
        record_seen(host.name, facts)
    return facts


def evaluate(
    facts: dict[str, Any], *, host: str = "HOST", table: VariantTable | None = None
) -> list[Check]:
    """Every check, in display order, from probe facts (pure)."""
    table = table or builtin_table()
    f = Facts(facts, host, table)
    return [
        check_python(f),
        gpus_check(f),
        *checks_torch(f, table),
        check_userspace(f),
        *extra_checks(f),
        check_logs(f),
    ]


@dataclass(frozen=True, slots=True)
class DoctorReport:
    host: str
    python: str
    checks: tuple[Check, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.status == "problem"]

    @property
    def exit_code(self) -> int:
        """0 when nothing is a problem, 1 otherwise."""
        return 1 if self.problems else 0

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "python": self.python,
            "checks": [c.to_json() for c in self.checks],
        }


async def run_doctor(
    transport: Transport, host: HostConfig, *, table: VariantTable | None = None
) -> DoctorReport:
    """Probe and evaluate. A probe that cannot run becomes one "python" problem; an
    unreachable host raises TransportError. The transport is neither opened nor closed."""
    try:
        facts = await gather_facts(transport, host)
    except ProbeError as e:
        check = Check(
            "python",
            "problem",
            str(e),
            "set the host's `python` to the venv interpreter (e.g. /root/venv/bin/python)",
        )
        return DoctorReport(host.name, host_python(host), (check,))
    python = str((facts.get("python") or {}).get("executable") or host_python(host))
    if needs_cuda12(Facts(facts, host.name)):
        facts["index_cuda12"] = await cuda12_offers(transport, host, python)
    checks = evaluate(facts, host=host.name, table=table)
    checks += await process_checks(transport, host)
    checks += await gpu_checks(transport, host)
    checks += await readiness_checks(transport, host, python)
    return DoctorReport(host.name, python, tuple(checks), facts)


async def cuda12_offers(transport: Transport, host: HostConfig, python: str) -> dict[str, Any]:
    """The torch releases the host's index offers per CUDA 12 variant, for this target
    (``{"cu126": ["2.11.0", "2.12.1"], ...}``), or ``{"error": why}``: a driver below 580
    needs one, and which exist changes with each release (2.12 has no cu128)."""
    listings = await read_variants(transport, host, python, CUDA12_VARIANTS, "torch")
    offers: dict[str, Any] = {}
    for variant, listing in listings.items():
        versions = listing.versions("torch", variant)
        if versions is None:
            page = listing.page("torch")
            if listing.error or page is None or page.status != 404:
                return {"error": listing.problem("torch") or "unreadable"}
            versions = []  # no page for this variant (HTTP 404): it offers nothing
        offers[variant] = versions
    return offers


def format_checks(checks: Iterable[Check], indent: str = "  ") -> list[str]:
    width = max((len(c.name) for c in checks), default=10)
    lines = []
    for c in checks:
        lines.append(f"{indent}{c.status:<8} {c.name:<{width}}  {c.evidence}")
        if c.fix:
            lines.append(f"{indent}{'':<8} {'':<{width}}  fix: {c.fix}")
    return lines


def format_report(report: DoctorReport, label: str = "") -> str:
    """The doctor's text output: a header, one line per check (+ its fix), a summary."""
    counts = {s: sum(c.status == s for c in report.checks) for s in STATUSES}
    where = f" ({label})" if label else ""
    lines = [f"doctor {report.host}{where}: python {report.python}"]
    lines += format_checks(list(report.checks))
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines.append(f"{len(report.problems)} problem(s); {summary}")
    return "\n".join(lines)
