"""vLLM's /metrics page, its metric declarations read from its own source.

Usage: python scripts/capture/vllm_metrics.py SRC VERSION OUTDIR

SRC is an unpacked vLLM sdist (``vllm-VERSION/``). vLLM's stat logger classes cannot be
driven on CPU without torch: ``PrometheusStatLogger.__init__`` takes a ``VllmConfig``
(``vllm.config`` imports torch and, through the platform probe, CUDA), so this program
does not import vLLM. It reads the logger's module with ``ast`` instead: every
``self._gauge_cls(...)``, ``self._counter_cls(...)`` and ``self._histogram_cls(...)``
call (``name=``, ``documentation=``, ``labelnames=``, ``buckets=``) outside an ``if``
(those are off by default: ``show_hidden_metrics``, ``VLLM_COMPUTE_NANS_IN_LOGITS``, KV
block metrics), the label names as the class spells them, and the buckets as the source
computes them (a literal, ``build_1_2_5_buckets(max_model_len)``, a module constant,
0.34's ``histogram_buckets(FAMILY)`` from ``vllm/v1/metrics/buckets.py``). The
families are then made with prometheus_client's own classes, the values set the way
the stat logger records them per engine (``create_metric_per_engine``: one series per
``engine`` label in V1; V0 has ``model_name`` only), and rendered by
``prometheus_client.generate_latest``: the text, the types, ``_total``/``_created``
and bucket lines are prometheus_client's, the names, labels and buckets vLLM's.

It writes ``metrics.prom`` (a busy server), ``metrics_later.prom`` (5 s later: counters
advanced) and ``stats.log`` (the logging stat logger's periodic line, formatted with the
format string read from the same source), and prints a summary.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MODEL = "Qwen/Qwen3-8B"
MAX_MODEL_LEN = 32768
# What the capture's scenario records, per engine: a busy server, then 5 s later
BUSY = {
    "running": 24,
    "waiting": 3,
    "kv": 0.62,
    "prompt": 182_000,
    "gen": 451_000,
    "preempt": 7,
    "hits": 64_000,
    "queries": 160_000,
    "success": {"stop": 980, "length": 41, "abort": 6},
}
LATER = {"prompt": 4_100, "gen": 9_800, "preempt": 2, "hits": 1_600, "queries": 4_000}
TTFT = [0.08] * 400 + [0.22] * 500 + [0.9] * 80 + [3.1] * 20
ITL = [0.018] * 6000 + [0.024] * 3500 + [0.06] * 400 + [0.3] * 100


def _resolve_labels(node: ast.expr, base: list[str]) -> list[str] | None:
    if isinstance(node, ast.Name):
        return list(base)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _resolve_labels(node.left, base)
        right = _resolve_labels(node.right, base)
        return None if left is None or right is None else left + right
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return list(value) if isinstance(value, list | tuple) else None


def _one_two_five(maximum: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets`` (vllm/engine/metrics.py, vllm/v1/metrics/loggers.py)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > maximum:
                return out
            out.append(float(value))
        exponent += 1


# ``self._gauge_cls(...)`` (V0, V1 from 0.9), ``prometheus_client.Gauge(...)`` (V1 0.8)
_KINDS = {
    "_gauge_cls": "gauge",
    "_counter_cls": "counter",
    "_histogram_cls": "histogram",
    "Gauge": "gauge",
    "Counter": "counter",
    "Histogram": "histogram",
}


class Source:
    def __init__(self, root: Path, path: Path) -> None:
        self.root = root
        self.tree = ast.parse(path.read_text())
        self.names: dict[str, ast.expr] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.names.setdefault(target.id, node.value)

    def buckets(self, node: ast.expr) -> list[float] | None:
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.buckets(self.names[node.id])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "build_1_2_5_buckets":
                return _one_two_five(MAX_MODEL_LEN)
            if node.func.id == "histogram_buckets" and node.args:
                family = ast.literal_eval(node.args[0])
                text = (self.root / "vllm/v1/metrics/buckets.py").read_text()
                consts = ast.parse(text)
                want = f"{str(family).upper()}_BUCKETS"
                for stmt in consts.body:
                    if isinstance(stmt, ast.Assign):
                        targets = stmt.targets
                    elif isinstance(stmt, ast.AnnAssign):
                        targets = [stmt.target]
                    else:
                        continue
                    names = [t.id for t in targets if isinstance(t, ast.Name)]
                    if want in names and stmt.value is not None:
                        return [float(v) for v in ast.literal_eval(stmt.value)]
                return None
        try:
            value = ast.literal_eval(node)
        except ValueError:
            return None
        return [float(v) for v in value] if isinstance(value, list | tuple) else None

    def declarations(self, base: list[str]) -> list[dict[str, Any]]:
        """Each metric declared outside an ``if``: name, kind, documentation, labels, buckets."""
        out: list[dict[str, Any]] = []
        conditional: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.If):
                for inner in ast.walk(node):
                    conditional.add(id(inner))
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            kind = _KINDS.get(node.func.attr)
            if kind is None or id(node) in conditional:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            try:
                name = ast.literal_eval(kw["name"])
                doc = ast.literal_eval(kw["documentation"])
            except (KeyError, ValueError):
                continue
            labels = _resolve_labels(kw["labelnames"], base) if "labelnames" in kw else list(base)
            buckets = self.buckets(kw["buckets"]) if "buckets" in kw else None
            out.append(
                {"name": name, "kind": kind, "doc": doc, "labels": labels, "buckets": buckets}
            )
        return out


def _base_labels(tree: ast.Module, v1: bool) -> list[str]:
    if not v1:
        return ["model_name"]  # V0: StatLoggers' labels=dict(model_name=...)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "labelnames"
        ):
            return list(ast.literal_eval(node.value))
    raise SystemExit("no labelnames = [...] in the V1 logger")


def _log_format(tree: ast.Module) -> str:
    """The periodic stats line's format string, read from the logging stat logger: one
    string literal (V0, V1 up to 0.11), or 0.34's ``log_parts`` list joined by ", " with
    the parts it appends for a server that preempted and has prefix-cache queries."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and "Avg prompt throughput" in node.args[0].value
        ):
            return node.args[0].value
    parts: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "log_parts"
            and isinstance(node.value, ast.List)
        ):
            parts = [ast.literal_eval(e) for e in node.value.elts]
    # the parts a server that preempted and has prefix-cache queries adds (not the
    # external or multimodal caches' rates)
    wanted = ("Preemptions", "%s KV cache usage", "Prefix cache hit rate:")
    for node in sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: n.lineno
    ):
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log_parts"
            and isinstance(node.args[0], ast.Constant)
        ):
            text = str(node.args[0].value)
            if text.startswith(wanted):
                parts.append(text)
    if not parts:
        raise SystemExit("no periodic log line in the logger")
    return "Engine %03d: " + ", ".join(parts)  # its log_prefix property


def _families(decls: list[dict[str, Any]], registry: CollectorRegistry) -> dict[str, Any]:
    """The declared families made with prometheus_client's classes: name -> (it, decl)."""
    classes = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}
    made: dict[str, Any] = {}
    for d in decls:
        if d["labels"] is None or d["name"] in made:
            continue
        kwargs: dict[str, Any] = {
            "name": d["name"],
            "documentation": d["doc"],
            "labelnames": d["labels"],
            "registry": registry,
        }
        if d["kind"] == "histogram":
            if d["buckets"] is None:
                continue
            kwargs["buckets"] = d["buckets"]
        made[d["name"]] = (classes[d["kind"]](**kwargs), d)
    return made


def _render(decls: list[dict[str, Any]], engines: int, step: int) -> bytes:
    registry = CollectorRegistry()
    made = _families(decls, registry)

    def series(name: str, engine: int, **extra: str) -> Any:
        metric, d = made[name]
        values = {"model_name": MODEL, "engine": str(engine), **extra}
        return metric.labels(*[values[label] for label in d["labels"]])

    def any_of(*names: str) -> str | None:
        return next((n for n in names if n in made), None)

    for engine in range(engines):
        for name, value in (
            ("vllm:num_requests_running", BUSY["running"]),
            ("vllm:num_requests_waiting", BUSY["waiting"]),
            ("vllm:num_requests_swapped", 0),
            ("vllm:gpu_cache_usage_perc", BUSY["kv"]),
            ("vllm:kv_cache_usage_perc", BUSY["kv"]),
            ("vllm:cpu_cache_usage_perc", 0.0),
            ("vllm:gpu_prefix_cache_hit_rate", BUSY["hits"] / BUSY["queries"]),
            ("vllm:cpu_prefix_cache_hit_rate", -1),
        ):
            if name in made:
                series(name, engine).set(value)
        for names, key in (
            (("vllm:prompt_tokens", "vllm:prompt_tokens_total"), "prompt"),
            (("vllm:generation_tokens", "vllm:generation_tokens_total"), "gen"),
            (("vllm:num_preemptions", "vllm:num_preemptions_total"), "preempt"),
            (("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"), "hits"),
            (("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), "queries"),
        ):
            found = any_of(*names)
            if found is not None:
                series(found, engine).inc(BUSY[key] + step * LATER[key])
        success = any_of("vllm:request_success", "vllm:request_success_total")
        if success is not None:
            for reason, n in BUSY["success"].items():  # type: ignore[union-attr]
                series(success, engine, finished_reason=reason).inc(n + step * 10)
        ttft = "vllm:time_to_first_token_seconds"
        itl = any_of("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        for name, values in ((ttft, TTFT), (itl, ITL)):
            if name in made:
                h = series(name, engine)
                for v in values * (1 + step):
                    h.observe(v)
    return generate_latest(registry)


def main() -> int:
    root, version, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    v1_path = root / "vllm/v1/metrics/loggers.py"
    v0_path = root / "vllm/engine/metrics.py"
    # V1 is the default engine from 0.8 (VLLM_USE_V1=1); 0.6 has V0 only
    v1 = v1_path.exists()
    path = v1_path if v1 else v0_path
    src = Source(root, path)
    decls = src.declarations(_base_labels(src.tree, v1))
    # one logger serves every engine of a data-parallel deployment where the source makes
    # a series per engine (make_per_engine, create_metric_per_engine; not 0.8): two
    # engines on one page, told by the engine label
    text = path.read_text()
    engines = 2 if "make_per_engine" in text or "create_metric_per_engine" in text else 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.prom").write_bytes(_render(decls, engines, 0))
    (out / "metrics_later.prom").write_bytes(_render(decls, engines, 1))
    fmt = _log_format(src.tree)
    args: list[Any] = []
    if fmt.startswith("Engine"):
        args.append(0)
    prompt_tps, gen_tps = LATER["prompt"] / 5, LATER["gen"] / 5
    kv = BUSY["kv"] * 100  # type: ignore[operator]
    hit = 100 * BUSY["hits"] / BUSY["queries"]  # type: ignore[operator]
    if "Swapped" in fmt:  # V0: running, swapped, pending, GPU KV, CPU KV
        args += [prompt_tps, gen_tps, BUSY["running"], 0, BUSY["waiting"], kv, 0.0]
    elif "Preemptions" in fmt:  # 0.34: the device word, preemptions before it
        args += [prompt_tps, gen_tps, BUSY["running"], BUSY["waiting"], 2, "GPU", kv, hit]
    else:
        args += [prompt_tps, gen_tps, BUSY["running"], BUSY["waiting"], kv, hit]
    stamp = (
        "INFO 11-29 14:32:00 [loggers.py:123] " if v1 else "INFO 11-29 14:32:00 metrics.py:467] "
    )
    (out / "stats.log").write_text(stamp + (fmt % tuple(args)) + "\n")
    kinds = sorted({f"{d['name']} ({d['kind']})" for d in decls if d["labels"] is not None})
    print(
        f"vLLM {version}: {path.relative_to(root)}, {'V1' if v1 else 'V0'} engine, "
        f"{engines} engine(s) on the page; {len(kinds)} families declared outside an if:"
    )
    for k in kinds:
        print(f"- {k}")
    print(f"\nThe periodic line's format: `{fmt}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
