"""An alert's typed facts (``backends/alerts/facts.py``, issue 35 point 3): every output
renders from them and no code reads an alert's words back. The scan below fails when
someone adds a regex, a ``partition`` or an ``in`` over an alert's message or a headline
outside ``backends/parsers`` (whose regexes read the target's own text: logs, nvidia-smi,
the kernel); the facts come back unchanged from their JSON and from a flight recording."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.facts import (
    AlertFacts,
    Held,
    Holder,
    IdleCost,
    Restart,
    TorchSwap,
    XidFacts,
)
from gpumon.backends.alerts.incident import headline, incidents
from gpumon.backends.bundle.collect import recorded_alerts
from gpumon.backends.model import GpuRef, GpuSample, Health, HostSample
from gpumon.backends.parsers.flight_recorder import FrReport, analyze
from gpumon.backends.recording import FlightRecorder, load_recording

from source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]
# The code that says alerts: every package but the parsers of the target's text and the
# agent (stdlib only: it never sees an alert).
SCANNED = ("backends", "tui")
NOT_SCANNED = ("backends/parsers/", "backends/remote/")
# An alert's words and the lines rendered from them.
ALERT_TEXT = {"message", "first_message", "peak_message", "raised_text", "peak_text", "headline"}
# What reads words back: a string method on them (``split`` only with a separator: its
# bare form folds white space), a regex over them, ``in`` / ``not in`` with them.
STR_READS = {
    "partition", "rpartition", "startswith", "endswith", "find", "rfind", "index", "rindex",
    "count", "removeprefix", "removesuffix", "split", "rsplit",
}  # fmt: skip
RE_READS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
TEXT_FUNCTIONS = {"str", "printable"}
# A call by one of these names is taken as the builtin's (``seen.add((key, message))``),
# not as a method of gpumon's of the same name.
BUILTIN_METHODS = {name for t in (str, bytes, list, dict, set, tuple) for name in dir(t)}
# Functions whose ``.message`` is not an alert's, with what it is.
NOT_ALERTS = {
    ("tui/dashboard/actions.py", "__call__"): "AfterRun: an action's Outcome",
    ("backends/alerts/engine.py", "_event_text"): "a LogEvent's: the job log's own line",
}


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in _nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _regexes(tree: ast.Module) -> set[str]:
    """The module's names bound to ``re.compile(...)``."""
    out: set[str] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "compile":
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


@functools.cache
def _nodes(func: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk(func)``, once: the scan walks each function again on every round of its
    fixed point, which was most of this test's time (a third of the fast lane's 60 s)."""
    return tuple(ast.walk(func))


def _text_names(func: ast.AST, given: set[str]) -> set[str]:
    """The local names a function binds to an alert's words (``text = alert.message``)
    or to text made of them (``" ".join(text.split())``), to a fixed point; ``given``:
    its parameters that some caller passes them in."""
    return set(_text_names_of(func, frozenset(given)))


@functools.cache
def _text_names_of(func: ast.AST, given: frozenset[str]) -> frozenset[str]:
    names = set(given)
    while True:
        more = {
            t.id
            for node in _nodes(func)
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
            and _says(node.value, names)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)
        }  # fmt: skip
        if more <= names:
            return frozenset(names)
        names |= more


def _says(expr: ast.expr, names: set[str]) -> bool:
    """Whether ``expr`` is an alert's words, or text made of them: a string method of
    them, a join, an f-string, a concatenation, a choice (``a.peak_message or text``),
    a slice, ``str()`` or ``printable()`` of them. An object built with them is not."""
    match expr:
        case ast.Attribute(attr=attr):
            return attr in ALERT_TEXT
        case ast.Name(id=name):
            return name in names
        case ast.Call(func=ast.Attribute(value=owner), args=args):
            joined = isinstance(owner, ast.Constant) and isinstance(owner.value, str)
            return _says(owner, names) or (joined and any(_says(a, names) for a in args))
        case ast.Call(func=ast.Name(id=func), args=args):
            return func in TEXT_FUNCTIONS and any(_says(a, names) for a in args)
        case ast.JoinedStr(values=values):
            return any(isinstance(v, ast.FormattedValue) and _says(v.value, names) for v in values)
        case ast.BinOp(left=left, right=right):
            return _says(left, names) or _says(right, names)
        case ast.IfExp(body=body, orelse=orelse):
            return _says(body, names) or _says(orelse, names)
        case ast.BoolOp(values=values) | ast.Tuple(elts=values):
            return any(_says(v, names) for v in values)
        case ast.Subscript(value=value):
            return _says(value, names)
    return False


def _reads(call_or_compare: ast.AST, names: set[str], regexes: set[str]) -> bool:
    node = call_or_compare
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        return any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and any(
            _says(side, names) for side in sides
        )
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    attr, owner = node.func.attr, node.func.value
    if attr in STR_READS and _says(owner, names):
        return attr not in ("split", "rsplit") or bool(node.args or node.keywords)
    regex = isinstance(owner, ast.Name) and (owner.id == "re" or owner.id in regexes)
    return regex and attr in RE_READS and any(_says(a, names) for a in node.args)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _code(root: Path) -> list[tuple[str, Function, set[str]]]:
    """Each function of the scanned code: (its file, it, its module's regexes)."""
    out: list[tuple[str, Function, set[str]]] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(NOT_SCANNED):
                continue
            tree = parsed(path)
            regexes = _regexes(tree)
            out += [(rel, f, regexes) for f in _functions(tree) if (rel, f.name) not in NOT_ALERTS]
    return out


def _passed(call: ast.Call, names: set[str], defs: list[Function]) -> set[str]:
    """The parameters of the functions ``call`` may call (by name) that it passes an
    alert's words to (``auto.notify(True, alert.message)``: notify's ``reason``)."""
    out: set[str] = set()
    for func in defs:
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
        if isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"]):
            params = params[1:]
        out |= {p for p, arg in zip(params, call.args, strict=False) if _says(arg, names)}
        kwargs = {a.arg for a in (*func.args.args, *func.args.kwonlyargs)}
        out |= {k.arg for k in call.keywords if k.arg in kwargs and _says(k.value, names)}
    return out


def readings(root: Path) -> list[str]:
    """Every place under ``root`` that reads an alert's words back (``path:line code``),
    also where they were passed in to a function (by its name: a method of another
    class of the same name counts too)."""
    code = _code(root)
    defs: dict[str, list[Function]] = {}
    for _, func, _ in code:
        defs.setdefault(func.name, []).append(func)
    given: dict[str, set[str]] = {}  # function name -> its parameters given alert text
    while True:
        more = False
        for _, func, _ in code:
            names = _text_names(func, given.get(func.name, set()))
            for call, callee in _calls(func, defs):
                new = _passed(call, names, defs[callee]) - given.get(callee, set())
                if new:
                    given.setdefault(callee, set()).update(new)
                    more = True
        if not more:
            break
    found = {
        f"{rel}:{node.lineno} {ast.unparse(node)}"
        for rel, func, regexes in code
        for names in [_text_names(func, given.get(func.name, set()))]
        for node in _nodes(func)
        if isinstance(node, ast.expr) and _reads(node, names, regexes)
    }
    return sorted(found, key=lambda r: (r.split(":")[0], int(r.split(":")[1].split()[0])))


def _calls(func: Function, defs: dict[str, list[Function]]) -> Iterator[tuple[ast.Call, str]]:
    """The calls in ``func`` of a function of the scanned code, with its name."""
    for call in _nodes(func):
        if isinstance(call, ast.Call):
            callee = _called(call)
            if callee in defs and callee not in BUILTIN_METHODS:
                yield call, callee


def _called(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def test_no_code_reads_an_alerts_words_back() -> None:
    assert readings(ROOT) == [], (
        "an alert's message or a headline read back: give the alert a typed fact "
        "(backends/alerts/facts.py) where its rule raises it, and read that"
    )


def test_the_scan_finds_each_way_of_reading_words_back(tmp_path: Path) -> None:
    """The scan is no check that cannot fail: each form the old code used is found."""
    code = tmp_path / "backends" / "notify"
    code.mkdir(parents=True)
    (code / "story.py").write_text(
        "import re\n"
        "_ATTEMPT = re.compile(r'restart (\\d+)/(\\d+)')\n"
        "def a(alert):\n    return _ATTEMPT.search(alert.message)\n"
        "def b(alert):\n    return 'out of memory' in alert.message.lower()\n"
        "def c(cause):\n    text = ' '.join(cause.message.split())\n"
        "    return text.rpartition('; ')[2]\n"
        "def d(incident):\n    return re.sub(r'; [^;]*\\)$', ')', incident.headline)\n"
        "def e(a):\n    return a.peak_text.startswith('GPU')\n"
        "def fine(alert):\n    return ' '.join(alert.message.split()), len(alert.message)\n",
        encoding="utf-8",
    )
    parsers = tmp_path / "backends" / "parsers"
    parsers.mkdir()
    (parsers / "log.py").write_text("def f(line):\n    return 'Xid' in line.message\n")
    assert [r.split()[0] for r in readings(tmp_path)] == [
        "backends/notify/story.py:4",
        "backends/notify/story.py:6",
        "backends/notify/story.py:9",
        "backends/notify/story.py:11",
        "backends/notify/story.py:13",
    ]


# ------------------------------------------------------------------ the facts travel


def stalled_report() -> FrReport:
    """What the real dumps of torch 2.13.0's capture say (rank 2 never entered #17)."""
    from upstream_captures import UPSTREAM

    folder = UPSTREAM / "flight-recorder" / "torch-2.13.0" / "on-demand"
    dumps = {int(p.name.rsplit("_", 1)[1]): p.read_bytes() for p in folder.glob("trace_rank_*")}
    return analyze(dumps, pids={2: 4518}, gpus={2: 6}, at={0: 1.8e9})


FULL = AlertFacts(
    gpu=GpuRef(6, "GPU-6a1f", "0000:ba:00.0", 6),
    job="drafter",
    port=30000,
    xid=XidFacts(79, "fallen off the bus", "reboot the node", "running sglang"),
    tried_bytes=2 << 30,
    free_bytes=90 << 20,
    in_use_bytes=round(93.70 * (1 << 30)),
    in_use_by_pid=((3187442, 6 << 30), (2418873, round(87.70 * (1 << 30)))),
    held=Held(6144.0, Holder("201", 4242, "jupyter-lab"), 2),
    line="torch.OutOfMemoryError: CUDA out of memory.",
    detail="while capturing graph",
    failure="cuda_oom",
    health_check=True,
    advice="reset the GPU at the next chance",
    names_gpu=True,
    restart=Restart("due", 1, 3, 10.0),
    rate=812.5,
    baseline=1450.0,
    unit="tok/s",
    schedulers=(2419020, 2419021),
    command="python -m sglang.launch_server --port 30000 --api-key ****",
    engine_pids=(4702, 4703),
    server_pid=4700,
    torch_swap=TorchSwap("2.11.0+cu128", "2.11.0+cu130", 1.8e9, "root"),
    idle_cost=IdleCost(4, 21600.0, 14.0, 0.15, "EUR"),
    gpus=(5, 6, 7),
    collective=stalled_report(),
)


def test_every_fact_comes_back_from_its_json() -> None:
    unset = [f.name for f in dataclasses.fields(FULL) if getattr(FULL, f.name) in (None, ())]
    assert unset == []  # a new fact is added to FULL, and so travels in this test
    assert AlertFacts.from_json(FULL.to_json()) == FULL
    assert AlertFacts().to_json() == {}  # none known: none said, never a 0 or a null
    assert AlertFacts.from_json(None) == AlertFacts()  # a record from before facts


def test_the_facts_json_has_the_documented_shape() -> None:
    """docs/json.md's ``facts``: a GPU by the names known, a holder's fields beside its
    memory's, an Xid's and a restart's unknown parts as null."""
    facts = dataclasses.replace(
        FULL, gpu=GpuRef(6, None, "0000:ba:00.0"), xid=XidFacts(13, "graphics engine")
    )
    got = facts.to_json()
    assert got["gpu"] == {"index": 6, "bus_id": "0000:ba:00.0"}
    assert list(got["held"]) == ["mib", "others", "container", "pid", "program"]
    assert got["xid"] == {"code": 13, "meaning": "graphics engine", "action": None, "whose": None}
    assert got["restart"]["why"] is None and got["schedulers"] == [2419020, 2419021]
    assert got["in_use_by_pid"] == [[3187442, 6 << 30], [2418873, round(87.70 * (1 << 30))]]
    assert got["torch_swap"] == {
        "was": "2.11.0+cu128",
        "to": "2.11.0+cu130",
        "at": 1.8e9,
        "by": "root",
    }
    assert got["collective"]["absent"] == [2] and got["collective"]["stuck"]["seq"] == 17
    assert got["collective"]["rows"][2]["last_entered"]["op"] == "broadcast"
    assert AlertFacts.from_json(json.loads(json.dumps(got))) == facts


@pytest.mark.parametrize(
    "data",
    [
        {"tried_bytes": "2 GiB", "port": True, "rate": "fast"},  # wrong types: unknown
        {"xid": {"code": "79"}, "held": {"mib": None}, "restart": {"attempt": 1}},
        {"gpu": [6], "names_gpu": "yes", "health_check": 1},
        {"in_use_bytes": 1.5, "in_use_by_pid": [[1, 2, 3], ["2418873", 5], 7]},
        "garbage",
    ],
)
def test_malformed_facts_are_unknown_not_wrong(data: object) -> None:
    assert AlertFacts.from_json(data) == AlertFacts()


def test_a_recorded_oom_says_the_same_headline_when_read_back(tmp_path: Path) -> None:
    """The incident of a flight recording (its bundle, its replay) renders from the facts
    the recording kept, as the live one did."""
    clock = Clock()
    engine = AlertEngine("ct200", AlertRules(), clock=clock)
    recorder = FlightRecorder("ct200", clock=clock, directory=tmp_path, before_s=5, after_s=2)
    recorder_hears(engine, recorder)
    for k in range(10):
        clock.t = T0 + k
        recorder.record(HostSample("ct200", clock.t, None, (GpuSample(index=6),)))
        if k == 3:
            engine.on_log_lines("/d.log", [OOM_FULL_GPU], job="drafter", gpus=(6,))
        recorder.flush_due(clock.t)
    (live,) = incidents(engine.active())
    (path,) = recorder.written
    (read,) = incidents(recorded_alerts(load_recording(path)))
    assert live.headline == "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 0 bytes free)"
    assert read.headline == live.headline and read.cause.facts == live.cause.facts
    assert read.cause.facts.gpu == GpuRef(6)  # the sample's GPU, as the engine named it


def recorder_hears(engine: AlertEngine, recorder: FlightRecorder) -> None:
    engine.add_listener(recorder.on_alert)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


T0 = 1_800_000_000.0
OOM_FULL_GPU = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a "
    "total capacity of 94.97 GiB of which 0 bytes is free."
)


def test_the_headline_says_whether_it_says_the_message_whole() -> None:
    """``check`` prints a cause's message under its headline only where the headline
    does not say it whole (``Headline.verbatim``), told from the rendering, not by
    looking for the message inside the headline's words."""
    engine = AlertEngine("ct200", AlertRules(), clock=Clock())
    (stalled,) = engine.on_job_condition(
        "job_stalled", "drafter", Health.CRITICAL, "drafter stalled: no step for 10 min", T0
    )
    (oom,) = engine.on_log_lines("/d.log", [OOM_FULL_GPU], job="drafter", gpus=(6,))
    full = "[2026-08-25] KV cache pool is full. Retract requests."
    (kv,) = engine.on_log_lines("/s.log", [full], job="server")
    said = {a.kind: headline(a) for a in (stalled, oom, kv)}
    assert said["job_stalled"].verbatim and str(said["job_stalled"]) == stalled.message
    assert not said["cuda_oom"].verbatim  # its numbers, not its line
    assert said["kv_cache_full"].verbatim and str(said["kv_cache_full"]) == f"server: {kv.message}"
