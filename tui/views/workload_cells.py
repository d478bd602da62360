"""Pure functions from workload trackers to cells: SGLang and vLLM servers, jobs, GPU
owners.

Like ``cells.py``: no colours, no widgets. A value a tracker does not know is the ``n/a``
cell, never 0. Column keys are the ones ``widgets/workload_panes.py`` lays out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpumon.backends.model import HostSample
from gpumon.backends.untrusted import printable as _printable
from gpumon.backends.workloads import JobState, JobTracker, SglangTotals, SglangTracker
from gpumon.backends.workloads.owners import OwnedBy, gpu_owned_by
from gpumon.backends.workloads.sglang import SPEC_ACCEPT_MIN
from gpumon.backends.workloads.stall import overdue_s
from gpumon.backends.workloads.vllm import VllmTracker
from gpumon.tui.views.gpu_cells import NA, Cell, Role, duration

BLANK = Cell("", Role.MUTED)


def rate_text(value: float) -> str:
    """A throughput in at most 5 cells: 812 -> "812", 1203.4 -> "1.20k", 13000 -> "13.0k"."""
    v = abs(value)
    if v == 0:
        return "0"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale * 0.9995:
            return _three_digits(value / scale) + suffix
    return _three_digits(value)


def _three_digits(x: float) -> str:
    """Three significant digits, trailing zeros kept: 13.0, 1.20, 812."""
    v = abs(x)
    return f"{x:.2f}" if v < 9.995 else f"{x:.1f}" if v < 99.95 else f"{x:.0f}"


def count_text(value: float) -> str:
    """A count in few cells: 709 -> "709", 12345 -> "12.3k"."""
    return f"{value:.0f}" if abs(value) < 10000 else rate_text(value)


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _pct(value: float | None, role: Role = Role.NORMAL) -> Cell:
    if value is None or not _known(value):
        return NA
    return Cell(f"{math.floor(value * 100 + 1e-9):d}%", role)


def _milliseconds(value: float) -> str:
    """ITL, always in ms (one unit per column): "25ms", "1200ms"."""
    return f"{value * 1000:.0f}ms"


def latency_pair(p50: float | None, p95: float | None) -> Cell:
    """TTFT p50/p95, always in seconds (one unit per column, so rows compare at a glance):
    "0.12/0.45s", "0.60/2.67s"; "n/a" when the median is unknown."""
    if p50 is None or not _known(p50):
        return NA
    if p95 is None or not _known(p95):
        return Cell(f"{p50:.2f}s")
    return Cell(f"{p50:.2f}/{p95:.2f}s")


def model_short(model: str | None) -> str | None:
    """ "Qwen/Qwen3-8B" -> "Qwen3-8B"; a local path keeps its last part."""
    if not model or not model.strip():
        return None
    return _printable(model.strip().rstrip("/").rsplit("/", 1)[-1])


def kv_role(usage: float | None) -> Role:
    if usage is None:
        return Role.NA
    return Role.CRITICAL if usage >= 0.98 else Role.WARNING if usage >= 0.92 else Role.NORMAL


# --- SGLang ---------------------------------------------------------------------------------


def sglang_cells(s: SglangTracker) -> dict[str, Cell]:
    """One server's cells by column key. A down server's ``error`` cell says why."""
    stale = s.stale or s.up is False
    numbers = Role.MUTED if stale else Role.NORMAL
    if s.up is None:
        state = Cell("wait", Role.MUTED)
    elif s.up and s.hung_s is not None and not s.stale:  # answers, makes no token
        state = Cell(f"hung {s.hung_s:.0f} s", Role.CRITICAL)
    elif s.idle:  # up and answering, no request: a server without traffic
        state = Cell("idle", Role.MUTED)
    elif s.up:
        state = Cell("up", Role.WARNING if s.stale else Role.OK)
    else:
        state = Cell("down", Role.CRITICAL)
    out = {
        "name": Cell(f":{s.port}", Role.NORMAL),
        "state": state,
        "model": _model_cell(s),
        "tok/s": _num(s.gen_tokens_per_s, numbers, rate_text),
        "run": _num(s.running, numbers, count_text),
        "queue": _num(s.queued, numbers, count_text),
        "KV": _pct(s.token_usage, Role.MUTED if stale else kv_role(s.token_usage)),
        "hit": _pct(s.cache_hit_rate, numbers),
        "TTFT": latency_pair(s.ttft_p50_s, s.ttft_p95_s),
        "ITL": NA if s.itl_p50_s is None else Cell(_milliseconds(s.itl_p50_s)),
    }
    if s.spec_accept_length is not None:  # a drafter: its accept length (and rate)
        out["acc"] = spec_cell(s.spec_accept_length, s.spec_accept_rate, numbers)
    if s.error and (s.up is False or s.stale):
        out["error"] = Cell(_printable(s.error), Role.CRITICAL if s.up is False else Role.WARNING)
    return out


# --- vLLM -----------------------------------------------------------------------------------


def vllm_cells(s: VllmTracker, now: float, hung_after_s: float) -> dict[str, Cell]:
    """One vLLM server's cells by column key: what vLLM's overview dashboard shows, the
    SGLang pane's cells where the meaning is the same. The state says a wedged engine
    (``wedged 94 s``: requests and no token for ``hung_after_s``, whatever ``/health``
    says) and a dead engine core in the critical colour, never ``up``."""
    out = sglang_cells(s)
    stale = s.stale or s.up is False
    numbers = Role.MUTED if stale else Role.NORMAL
    wedged = s.hung(now, hung_after_s)
    if s.dead_text() is not None:
        out["state"] = Cell("engine dead", Role.CRITICAL)
    elif wedged is not None:
        out["state"] = Cell(f"wedged {duration(wedged.silent_s)}", Role.CRITICAL)
    out["in/s"] = _num(s.prompt_tokens_per_s, numbers, rate_text)
    out["ITL"] = latency_ms_pair(s.itl_p50_s, s.itl_p95_s)
    out["pre/s"] = _num(s.preemptions_per_s, numbers, _small_rate)
    out["failed"] = failed_cell(s.failed_recent, numbers)
    return out


def latency_ms_pair(p50: float | None, p95: float | None) -> Cell:
    """ITL p50/p95 in ms: "18/60ms"; "n/a" when the median is unknown."""
    if p50 is None or not _known(p50):
        return NA
    if p95 is None or not _known(p95):
        return Cell(_milliseconds(p50))
    return Cell(f"{p50 * 1000:.0f}/{_milliseconds(p95)}")


def _small_rate(value: float) -> str:
    """Preemptions/s: "0", "0.4", "12.5", "1.20k"."""
    return "0" if value == 0 else f"{value:.1f}" if value < 100 else rate_text(value)


def failed_cell(failed: tuple[tuple[str, float], ...] | None, role: Role) -> Cell:
    """Requests of the last minute that finished neither by ``stop`` nor ``length``, by
    vLLM's finish reason, the most first: "6 abort 1 error"; "0" when none did (a
    warning when some did); "n/a" when the page has no ``request_success_total`` or no
    minute to compare yet."""
    if failed is None:
        return NA
    counts = sorted(((n, r) for r, n in failed if n > 0), key=lambda nr: (-nr[0], nr[1]))
    if not counts:
        return Cell("0", role)
    text = " ".join(f"{count_text(n)} {_printable(r)}" for n, r in counts)
    return Cell(text, Role.WARNING if role is Role.NORMAL else role)


def spec_cell(length: float, rate: float | None, role: Role) -> Cell:
    """A drafter's accept length and rate: ``1.04 1%``; below 1.5 tokens per verify step a
    warning (speculative decoding then costs more than it saves; the default
    ``spec_accept_min``)."""
    text = f"{length:.2f}" + (f" {rate:.0%}" if rate is not None else "")
    low = length < SPEC_ACCEPT_MIN and role is Role.NORMAL
    return Cell(text, Role.WARNING if low else role)


def _model_cell(s: SglangTracker) -> Cell:
    """The model and, from the server info, its parallelism: ``DeepSeek-V3 DP 4 TP 8``."""
    parallel = s.info.short if s.info is not None else None
    text = " ".join(t for t in (model_short(s.model), parallel) if t)
    return Cell(text or "n/a", Role.NORMAL if text else Role.NA)


def sglang_total_cells(t: SglangTotals) -> dict[str, Cell]:
    """The aggregate row: sums over the servers that report; latencies are per server."""
    return {
        "name": Cell("all", Role.NORMAL),
        "state": Cell(f"{t.up}/{t.servers}", Role.OK if t.up == t.servers else Role.CRITICAL),
        "model": BLANK,
        "tok/s": _num(t.gen_tokens_per_s, Role.NORMAL, rate_text),
        "run": _num(t.running, Role.NORMAL, count_text),
        "queue": _num(t.queued, Role.NORMAL, count_text),
        "KV": _pct(t.token_usage, kv_role(t.token_usage)),
        "hit": _pct(t.cache_hit_rate),
        "TTFT": BLANK,
        "ITL": BLANK,
    }


def common_model(trackers: Iterable[SglangTracker]) -> str | None:
    """The model every server that says one serves, when they agree."""
    models = {model_short(s.model) for s in trackers if s.model}
    return models.pop() if len(models) == 1 else None


def _num(value: float | None, role: Role, fmt: Callable[[float], str]) -> Cell:
    if value is None or not _known(value):
        return NA
    return Cell(fmt(float(value)), role)


# --- jobs -----------------------------------------------------------------------------------


def gpu_list_text(gpus: Sequence[int]) -> str:
    """(5, 6, 7) -> "5-7"; (0, 2, 3) -> "0,2-3"; () -> ""."""
    parts: list[str] = []
    ordered = sorted(set(gpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def job_state_cell(job: JobTracker) -> Cell:
    """ "running", "finished", "stopped", "crashed: OOM on GPU 6"; a job whose log said
    nothing yet is "no progress yet"; a running job torchrun restarted says how often
    ("running, 2 torchrun restarts": it lost progress each time)."""
    if job.state is JobState.RUNNING and job.elastic_restarts:
        n = job.elastic_restarts
        return Cell(f"running, {n} torchrun restart{'s' if n != 1 else ''}", Role.WARNING)
    if job.state is JobState.CRASHED:
        reason = f": {_printable(job.crash_reason)}" if job.crash_reason else ""
        return Cell(f"crashed{reason}", Role.CRITICAL)
    if job.state is JobState.RUNNING and job.last_update is None:
        return Cell("no progress yet", Role.MUTED)
    role = {JobState.RUNNING: Role.OK, JobState.STOPPED: Role.WARNING}.get(job.state, Role.NORMAL)
    return Cell(job.state.value, role)


def job_rate(job: JobTracker) -> float | None:
    """The value ``rate_history`` records: tokens/s if known, else steps or items per s."""
    return job.tokens_per_s if job.rate_unit == "tok/s" else job.items_per_s


def job_cells(job: JobTracker, now: float | None = None) -> dict[str, Cell]:
    """One job's cells by column key. Numbers of a job that ended are muted (last known).
    At ``now`` (the monitor's clock), a running job whose next step is overdue
    (``overdue_s``) shows how long ago its last step came instead of its last rate and ETA,
    which no longer say anything: ``— (last step 40 s ago)``, a warning."""
    ended = job.state is not JobState.RUNNING
    numbers = Role.MUTED if ended else Role.NORMAL
    if job.step is not None:
        total = f"/{count_text(job.total_steps)}" if job.total_steps else ""
        progress = Cell(f"{count_text(job.step)}{total}", numbers)
    elif job.done is not None:
        total = f"/{count_text(job.total)}" if job.total else ""
        progress = Cell(f"{count_text(job.done)}{total}", numbers)
    else:
        progress = NA
    rate = job_rate(job)
    unit = (job.rate_unit or "").replace("steps/s", "step/s")
    rate_cell = NA
    if job.state in (JobState.CRASHED, JobState.STOPPED):
        rate_cell = Cell("-", Role.MUTED)  # a dead job makes no progress: no old rate
    elif rate is not None and _known(rate):
        rate_cell = Cell(f"{rate_text(rate)} {unit}", numbers)
    eta = job.eta_s
    eta_cell = NA if eta is None else Cell(duration(eta), numbers)
    silent = overdue_s(job, now) if now is not None else None
    if silent is not None:
        ago = f"{silent:.0f} s" if silent < 120 else duration(silent)
        rate_cell = Cell(f"— (last step {ago} ago)", Role.WARNING)
        eta_cell = Cell("—", Role.WARNING)
    return {
        "name": Cell(_printable(job.name), Role.NORMAL),
        "state": job_state_cell(job),
        "GPUs": Cell(gpu_list_text(job.gpus)) if job.gpus else NA,
        "progress": progress,
        "rate": rate_cell,
        "loss": NA if job.loss is None or not _known(job.loss) else Cell(_loss(job.loss), numbers),
        "ETA": eta_cell,
    }


def _loss(loss: float) -> str:
    return f"{loss:.4f}" if abs(loss) < 10 else f"{loss:.4g}"


# --- GPU owners -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """What runs on a GPU, in the words of the row: a job name, an SGLang or vLLM port."""

    text: str
    role: Role


def gpu_owners(
    sample: HostSample | None,
    jobs: Mapping[str, JobTracker],
    servers: Mapping[int, SglangTracker],
    watched: int | None = None,
    vllm: Mapping[int, tuple[int, ...]] | None = None,
    vllm_down: frozenset[int] = frozenset(),
) -> dict[int, Owner]:
    """GPU index -> its owner (``gpu_owned_by``: who owns which GPU; a host without jobs
    or servers has none and keeps the GPU models), coloured: critical for a server that
    does not answer (an SGLang server down, a port of ``vllm_down``) or a crashed job,
    muted for a job stopped or finished and for a GPU named by its program
    (``train.target``: not a configured job)."""
    owners: dict[int, Owner] = {}
    for index, owned in gpu_owned_by(sample, jobs, servers, watched, vllm).items():
        role = Role.NORMAL
        if _down(owned, servers, vllm_down):
            role = Role.CRITICAL
        elif owned.kind == "job":
            role = _JOB_ROLES.get(jobs[str(owned.key)].state, Role.NORMAL)
        elif owned.kind == "program":
            role = Role.MUTED
        owners[index] = Owner(owned.text, role)
    return owners


def _down(owned: OwnedBy, servers: Mapping[int, SglangTracker], vllm_down: frozenset[int]) -> bool:
    """A server that does not answer."""
    if owned.kind == "sglang":
        return servers[int(owned.key)].up is False
    return owned.kind == "vllm" and owned.key in vllm_down


_JOB_ROLES = {
    JobState.CRASHED: Role.CRITICAL,
    JobState.STOPPED: Role.MUTED,
    JobState.FINISHED: Role.MUTED,
}
