"""The alert kinds' registry (``alerts/kinds.py``): every kind the code raises is declared,
every list of kinds is derived from it, and the notifier filter takes every declared kind."""

from __future__ import annotations

import ast
import functools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.actions import job_watch
from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.kinds import (
    ALERT_KINDS,
    CAUSE_ORDER,
    KINDS,
    REGENERATE,
    TAG_MEANING,
    Tag,
    alert_kind,
    kind_title,
    reference,
    tagged,
)
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.notify import notify_tables
from gpumon.backends.config.schema import Invalid
from gpumon.backends.config.workloads import JobConfig
from gpumon.backends.model import Health
from gpumon.backends.workloads import watch as workloads_watch
from gpumon.backends.workloads.watch import Workloads

from source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ROOT / "backends"

# Every function an alert's kind passes through on its way to ``AlertStore._new``, with
# the position of its kind argument. A call to one of them names its kind as a literal
# (or a choice of literals, a local variable set to them, a loop over ``tagged(...)``), or
# passes on a parameter of a function listed here, whose own calls are checked.
RAISERS = {
    "_new": 1,
    "_condition": 1,
    "_event": 1,
    "raise_alert": 0,
    "ingest_alert": 0,
    "on_job_condition": 0,
    "_server_condition": 0,
    "on_server_condition": 0,
    "LogEvent": 0,
}
# Calls whose kind is none of those, and why it is declared all the same.
PASSED_ON = {
    # a kind read back from a recording: gpumon's own, or another version's (said once)
    ("monitor/sources/replay.py", "_replay_alert"),
    # a ``LogEvent``'s kind: its constructions are checked here
    ("alerts/engine.py", "_log_event"),
}


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _called(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _retyped(call: ast.Call, name: str | None) -> str | None:
    """The literal kind of a ``replace(event, kind="...")`` (parsers/oom.py's
    ``engine_event``), else None."""
    for kw in call.keywords if name == "replace" else ():
        value = kw.value
        if kw.arg == "kind" and isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    return None


def _kind_argument(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "kind":
            return kw.value
    index = RAISERS[name]
    return call.args[index] if len(call.args) > index else None


def _literals(
    expr: ast.expr, func: ast.FunctionDef | ast.AsyncFunctionDef, seen: frozenset[str] = frozenset()
) -> tuple[set[str], list[str]]:
    """The kinds ``expr`` can be inside ``func`` ("" for none yet), and what could not be
    told (why). ``seen``: the names being resolved (``kind = kind or ...``)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}, []
    parts = (
        [expr.body, expr.orelse]
        if isinstance(expr, ast.IfExp)
        else expr.values
        if isinstance(expr, ast.BoolOp)
        else None
    )
    if parts is not None:
        found: set[str] = set()
        why: list[str] = []
        for part in parts:
            got, no = _literals(part, func, seen)
            found, why = found | got, why + no
        return found, why
    if isinstance(expr, ast.Name) and expr.id in seen:
        return set(), []
    if not isinstance(expr, ast.Name):
        return set(), [f"{ast.unparse(expr)} is not a literal"]
    params = {a.arg for a in [*func.args.args, *func.args.kwonlyargs]}
    if expr.id in params:
        if func.name in RAISERS:
            return set(), []  # its callers are checked
        return set(), [f"parameter {expr.id} of {func.name}, which is not in RAISERS"]
    found, why, bound = set(), [], False
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == expr.id for t in node.targets
        ):
            bound = True
            got, no = _literals(node.value, func, seen | {expr.id})
            found |= got
            why += no
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and node.target.id == expr.id
        ):
            bound = True
            if not _is_tag_query(node.iter):
                why.append(f"loop over {ast.unparse(node.iter)}")
    if not bound:
        why.append(f"{expr.id} is not set in {func.name}")
    return found, why


def _is_tag_query(expr: ast.expr) -> bool:
    """``tagged(...)``, or a module-level name the module sets from one."""
    if isinstance(expr, ast.Call):
        return _called(expr) in ("tagged", "sorted") and all(
            _is_tag_query(a) or _called(a) == "tagged" if isinstance(a, ast.Call) else True
            for a in expr.args
        )
    return isinstance(expr, ast.Name) and expr.id.endswith("_KINDS")


@functools.cache
def _raised() -> tuple[dict[str, list[str]], list[str]]:
    """Every kind a raising call in backends/ names (kind -> where), and the calls whose
    kind could not be told."""
    kinds: dict[str, list[str]] = {}
    unknown: list[str] = []
    for path in sorted(BACKENDS.rglob("*.py")):
        rel = path.relative_to(BACKENDS).as_posix()
        tree = parsed(path)
        for func in _functions(tree):
            for call in ast.walk(func):
                if not isinstance(call, ast.Call):
                    continue
                name = _called(call)
                retyped = _retyped(call, name)  # a LogEvent copied as another kind
                if retyped is not None:
                    kinds.setdefault(retyped, []).append(f"{rel}:{call.lineno} {name}")
                if name not in RAISERS:
                    continue
                expr = _kind_argument(call, name)
                where = f"{rel}:{call.lineno} {name}"
                if expr is None or (rel, func.name) in PASSED_ON:
                    continue
                found, why = _literals(expr, func)
                for kind in found - {""}:
                    kinds.setdefault(kind, []).append(where)
                unknown += [f"{where}: {w}" for w in why]
    return kinds, unknown


def test_every_kind_the_code_raises_is_declared() -> None:
    kinds, unknown = _raised()
    assert not unknown, (
        "a kind that cannot be told from the code: name it as a literal, or add the "
        f"function that passes it on to RAISERS: {unknown}"
    )
    undeclared = {k: where for k, where in kinds.items() if alert_kind(k) is None}
    assert not undeclared, f"declare these kinds in backends/alerts/kinds.py: {undeclared}"
    # the scan sees the rules: the engine's, the monitor's, the agent's, the log parser's
    assert {"memory", "server_idle", "log_flood", "log_unreadable", "agent_error"} <= set(kinds)
    assert {"cuda_oom", "kv_cache_full", "job_crashed", "sglang_error", "xid"} <= set(kinds)
    assert {"stale_data", "driver_error", "host_unreachable", "auto_restart"} <= set(kinds)


def test_every_declared_kind_is_raised_somewhere() -> None:
    kinds, _ = _raised()
    # job_stalled and job_slow reach on_job_condition from the workloads
    assert set(KINDS) - set(kinds) == set(), "a declared kind nothing raises"


def test_an_undeclared_kind_raised_all_the_same_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A recording of another version may hold a kind this one does not declare: it is
    shown as it came, and the log says so once."""
    engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
    with caplog.at_level(logging.WARNING, logger="gpumon.backends.alerts.store"):
        for n in range(2):
            engine.raise_alert("from_the_future", Health.WARNING, f"#{n}")
    assert [a.kind for a in engine.active()] == ["from_the_future"] * 2
    said = [r.getMessage() for r in caplog.records]
    assert said == ["alert kind 'from_the_future' is not declared in alerts/kinds.py"]


def test_the_registry_is_well_formed() -> None:
    names = [k.name for k in ALERT_KINDS]
    assert len(names) == len(set(names))
    ranks = [k.cause_rank for k in ALERT_KINDS]
    assert len(ranks) == len(set(ranks)), "two kinds with one cause rank: which leads?"
    for kind in ALERT_KINDS:
        assert kind.title and kind.title[0].isupper(), kind
        assert kind.doc.endswith(".") and "\n" not in kind.doc, kind
    for tag in Tag:
        assert tagged(tag), f"{tag} names no kind"
        assert TAG_MEANING[tag], tag
    assert kind_title("cuda_oom") == "CUDA out of memory"
    assert kind_title("new\x1bkind") == "new\\x1bkind"  # another version's kind: printable


def test_the_cause_order_is_the_one_incidents_had() -> None:
    """Before the registry, ``alerts.incident.CAUSE_ORDER`` listed these; the kinds it did
    not list explained least."""
    assert CAUSE_ORDER == (
        "cuda_oom",
        "vllm_oom",  # issue 38: vLLM's memory failures, the fix vLLM prints
        "vllm_kv_memory",
        "host_oom_kill",
        "cgroup_oom_kill",
        "xid",
        "job_stalled",
        "job_crashed",
        "oom_death",
        "gpu_health",
        "vllm_engine_dead",  # issue 38: vLLM's kinds beside SGLang's
        "sglang_hung",
        "vllm_wedged",
        "sglang_error",
        "vllm_error",
        "kv_cache_full",
        "driver_error",
        "host_unreachable",
        "stale_data",
        "gpu_idle_held",
        "vllm_kv_pressure",
        "time_to_full",
        "memory",
        "job_slow",
        "auto_restart",
        "spec_accept_low",
        "server_idle",
        "foreign_process",
        "log_unreadable",
        "log_flood",
        "agent_error",
        "job_restarted",  # issue 36 point 9: a restart's record, the cause of nothing
    )


def test_the_subsets_are_the_families_they_were() -> None:
    """Each list the code kept by hand, now a tag query, with the members it had."""
    vllm_memory = {"vllm_oom", "vllm_kv_memory"}  # issue 38: vLLM's, with vLLM's fixes
    oom = {"cuda_oom", "oom_death", "host_oom_kill", "cgroup_oom_kill"}
    assert tagged(Tag.OOM) == oom | vllm_memory
    assert tagged(Tag.HUNG) == {"sglang_hung", "job_stalled", "vllm_wedged"}  # issue 38
    assert tagged(Tag.SILENCE) == {"stale_data", "driver_error"}
    assert tagged(Tag.IDLE) == {"gpu_idle_held", "server_idle"}
    assert tagged(Tag.JOB_PROGRESS) == {"job_stalled", "job_slow"}
    assert tagged(Tag.LOG_FAILURE) == {"cuda_oom", "sglang_error", "job_crashed"} | vllm_memory
    ran_out = {"cuda_oom", "oom_death", "job_crashed", "memory", "time_to_full"}
    assert tagged(Tag.RAN_OUT) == ran_out | vllm_memory
    assert tagged(Tag.RESTART_FIXES) == {
        "cuda_oom",
        "oom_death",
        "job_crashed",
        "job_stalled",
        "host_oom_kill",
        "cgroup_oom_kill",
    }


def test_a_collapsed_gpu_restarts_its_job_but_the_jobs_pane_waits_for_its_log() -> None:
    """The two CRASH_KINDS had different members, each right for its caller: the automatic
    restart acts on the GPU's memory collapsing at once (``oom_death``: the job died, with
    or without a line in its log), while the jobs pane says a job crashed, and of what,
    from what its log says (it is judged as its log is read: a job restarted by hand
    writes its log before its GPU fills again and ends the ``oom_death``)."""
    assert {"cuda_oom", "oom_death", "job_crashed"} == job_watch.CRASH_KINDS
    assert {"cuda_oom", "job_crashed"} == workloads_watch.CRASH_KINDS
    job = JobConfig(name="drafter", gpus=(6,), log="/l/d.log")
    w = Workloads(HostConfig(name="box", kind="local", jobs=(job,)))
    engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
    engine.raise_alert("oom_death", Health.CRITICAL, "GPU 6 memory fell", gpu=6, job="drafter")
    w.apply_alerts(engine, 1000.0)
    assert w.jobs["drafter"].crash_reason is None
    engine.raise_alert("cuda_oom", Health.CRITICAL, "CUDA out of memory", gpu=6, job="drafter")
    w.apply_alerts(engine, 1000.0)
    assert w.jobs["drafter"].crash_reason == "OOM on GPU 6"


def _notifier(kinds: list[str]) -> dict[str, object]:
    return {"kind": "webhook", "url": "http://127.0.0.1:9/hook", "kinds": kinds}


@pytest.mark.parametrize("kind", KINDS)
def test_a_notifier_may_name_every_declared_kind(kind: str) -> None:
    """``kinds = ["agent_error"]`` was refused as unknown although gpumon raises it."""
    [config] = notify_tables({"hook": _notifier([kind])}).values()
    assert config.kinds == (kind,)
    assert config.wants("h", kind, Health.CRITICAL)


def test_a_misspelt_kind_names_the_closest() -> None:
    with pytest.raises(Invalid) as caught:
        notify_tables({"hook": _notifier(["cuda_oom", "agent_eror"])})
    problem = caught.value.problem
    assert problem.startswith("unknown alert kind 'agent_eror' (did you mean \"agent_error\"?);")
    assert caught.value.path == ("hook", "kinds")
    with pytest.raises(Invalid, match=r"unknown alert kind 'zzz'; expected some of: memory, "):
        notify_tables({"hook": _notifier(["zzz"])})


def test_docs_alerts_md_is_what_the_registry_says() -> None:
    """The alerts reference is generated: a kind declared, changed or gone shows here."""
    written = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    assert written == reference(), f"docs/alerts.md is not the registry's: run {REGENERATE}"
    for kind in KINDS:
        assert f"\n## `{kind}`\n" in written
