"""SGLang's ``/metrics`` text from its own metrics collector classes, for
tests/fixtures/upstream/sglang-<version>/.

Run by ``scripts/capture-upstream sglang`` as ``python sglang_metrics.py OUT_DIR`` in a venv
holding the pinned prometheus_client and the libraries SGLang's modules import (torch
CPU, transformers, ...), with the pinned SGLang (``pip install --no-deps``) on PYTHONPATH.

What runs is SGLang's: ``set_prometheus_multiproc_dir`` (multiprocess mode, as the
server), one process per scheduler rank that builds ``SchedulerMetricsCollector`` and
calls ``log_stats`` (and, where the version has them, ``increment_realtime_tokens``,
``increment_effective_prefill_tokens``, ``emit_constants``), one tokenizer process that
builds ``TokenizerMetricsCollector`` and observes finished requests; then the page is
fetched from prometheus_client's ``make_asgi_app`` over ``MultiProcessCollector``, as
``add_prometheus_middleware`` mounts it, with the request gpumon's agent sends (no Accept
header: the text format).

What is ours: before 0.5.23 the label dicts (copied from the scheduler and the tokenizer
manager of each version, see ``scheduler_labels``) and which ranks log (``attn_tp_rank ==
0``, or all with ``--enable-metrics-for-all-schedulers``); from 0.5.23 SGLang's own
``publish`` + ``init_new`` choose both (``published_collector``). Always ours: the numbers,
and a ``ServerArgs`` of its defaults plus the scenario's flags (see ``server_args``).
``scenario.json`` keeps the numbers each rank logged, for the tests to compare a parse with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import importlib
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

MODEL = "Qwen/Qwen3-8B"

# rank: tp, pp, dp (None: no dp_rank label), whether it logs, and what it logs
Rank = dict[str, Any]


def rank(tp: int, pp: int = 0, dp: int | None = None, logs: bool = True, **numbers: Any) -> Rank:
    return {"tp": tp, "pp": pp, "dp": dp, "logs": logs, **numbers}


def busy(running: int, queued: int, usage: float, used: int, capacity: int, **more: Any) -> Rank:
    """One logging rank's numbers."""
    return {
        "running": running,
        "queued": queued,
        "token_usage": usage,
        "num_used_tokens": used,
        "max_total_num_tokens": capacity,
        "gen_throughput": 40.0 * running,
        "decode_tokens": 1000 * running,
        "prefill_compute_tokens": 5000 * running,
        "prefill_cache_tokens": 1200 * running,
        **more,
    }


def scenarios(has: set[str]) -> dict[str, dict[str, Any]]:
    """The scenarios this version can express (``has``: what its collector offers)."""
    leader0 = busy(5, 2, 0.30, 48_000, 160_000)
    leader1 = busy(2, 0, 0.10, 16_000, 160_000)
    if "QueueCount" in has:  # --enable-priority-scheduling: breakdowns beside the totals
        leader0.update(running_by_priority={0: 3, 10: 2}, queued_by_priority={0: 1, 10: 1})
        leader1.update(running_by_priority={0: 2}, queued_by_priority={})
    every = "pp_rank" in has  # --enable-metrics-for-all-schedulers is a 0.5 flag
    out: dict[str, dict[str, Any]] = {
        # DP attention, dp 2 x tp 4 (attn_tp_size 2: DP k's leader has global tp_rank 2k),
        # with --enable-metrics-for-all-schedulers: each follower repeats its leader's batch
        "dp_attention": {
            "flags": {
                "tp_size": 4,
                "dp_size": 2,
                "enable_dp_attention": True,
                "enable_metrics_for_all_schedulers": every,
                "enable_priority_scheduling": "QueueCount" in has,
            },
            "priority": "QueueCount" in has,
            "ranks": [
                rank(0, dp=0, **leader0),
                rank(1, dp=0, logs=every, **leader0),
                rank(2, dp=1, **leader1),
                rank(3, dp=1, logs=every, **leader1),
            ],
        },
    }
    if "pp_rank" in has:
        # PP 2 x TP 2: each stage's leader logs the same requests under its pp_rank; the
        # followers do not log (no --enable-metrics-for-all-schedulers)
        out["pp2"] = {
            "flags": {"tp_size": 2, "pp_size": 2},
            "ranks": [
                rank(0, 0, **busy(6, 3, 0.40, 64_000, 160_000)),
                rank(1, 0, logs=False),
                rank(0, 1, **busy(6, 3, 0.35, 56_000, 160_000)),
                rank(1, 1, logs=False),
            ],
        }
    return out


REQUESTS = [
    # prompt, generated, cached, e2e s, ttft s, itl (interval s, tokens), priority
    (1200, 300, 400, 6.5, 0.21, (0.05, 2), 0),
    (800, 120, 0, 2.9, 0.12, (0.04, 1), 10),
    (2500, 40, 2000, 1.4, 0.35, (0.08, 3), 10),
]


def call(fn: Any, /, **kwargs: Any) -> Any:
    """``fn`` with the keyword arguments its signature takes (versions differ)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn(**kwargs)
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def server_args(module: Any, scenario: dict[str, Any] | None = None) -> Any:
    """A ServerArgs with its defaults and the scenario's flags, nothing resolved: through
    the constructor where ``__post_init__`` leaves resolution to ``resolve_once`` (0.5.23),
    else its dataclass defaults with ``__post_init__`` not run (it probes the GPUs)."""
    cls = getattr(module, "ServerArgs", None)
    if cls is None:
        return None
    flags = dict((scenario or {}).get("flags", {}))
    if "resolve_once" in vars(cls):
        # "dummy": the model-less path (no config download); the name is what labels show
        return cls(model_path="dummy", served_model_name=MODEL, enable_metrics=True, **flags)
    args = cls.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(args, f.name, value)
    args.served_model_name = args.model_path = MODEL
    for name, value in flags.items():
        object.__setattr__(args, name, value)
    return args


def published_collector(module: Any, r: Rank, scenario: dict[str, Any]) -> tuple[Any, bool]:
    """0.5.23: the scheduler process's own path: ``publish`` its ranks (as
    ``run_scheduler_process``; DP attention's dp_rank from ``compute_dp_attention_world_info``
    as the data parallel controller), then ``SchedulerMetricsCollector.init_new`` chooses
    the labels and whether this rank logs."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info
    from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank

    sa = server_args(module, scenario)
    flags = scenario.get("flags", {})
    dp = None
    if flags.get("enable_dp_attention"):
        tp_size, dp_size = flags["tp_size"], flags["dp_size"]
        _, _, dp, _ = compute_dp_attention_world_info(r["tp"], tp_size, dp_size, 1)
    world = spawn_world_rank(sa, tp_rank=r["tp"], pp_rank=r["pp"])
    publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=world, dp_rank=dp, gpu_id=r["tp"]))
    context = module.SchedulerMetricsCollector.init_new(
        server_args=sa,
        enable_priority_scheduling=bool(scenario.get("priority")),
        enable_lora=False,
        enable_hierarchical_cache=False,
    )
    return context.collector, context.current_scheduler_metrics_enabled


def scheduler_labels(has: set[str], r: Rank) -> dict[str, Any]:
    """As the scheduler of versions without ``init_new`` builds them: 0.4.x scheduler.py
    (model_name, engine_type), 0.5.x scheduler_metrics_mixin.py (+ tp_rank, pp_rank,
    [moe_ep_rank], [dp_rank])."""
    labels: dict[str, Any] = {"model_name": MODEL, "engine_type": "unified"}
    if "pp_rank" in has:
        labels.update(tp_rank=r["tp"], pp_rank=r["pp"])
        if "moe_ep_rank" in has:
            labels["moe_ep_rank"] = 0
        if r["dp"] is not None:
            labels["dp_rank"] = r["dp"]
    return labels


def features(module: Any) -> set[str]:
    """What this version's collector and scheduler offer, read from its own files: the
    labels dict the scheduler hands the collector (``"tp_rank":`` from 0.5, ``"moe_ep_rank":``
    from 0.5.9) and ``QueueCount`` (per-priority queue counts, 0.5.10+)."""
    has = {"QueueCount"} if hasattr(module, "QueueCount") else set()
    text = Path(module.__file__ or "").read_text()
    for candidate in (
        "sglang.srt.managers.scheduler_metrics_mixin",
        "sglang.srt.managers.scheduler",
    ):
        spec = importlib.util.find_spec(candidate)
        if spec is not None and spec.origin:
            text += Path(spec.origin).read_text()
    if '"tp_rank":' in text:
        has.add("pp_rank")
    if '"moe_ep_rank":' in text:
        has.add("moe_ep_rank")
    return has


def run_scheduler(module_name: str, has: set[str], r: Rank, scenario: dict[str, Any]) -> None:
    module = importlib.import_module(module_name)
    if hasattr(module.SchedulerMetricsCollector, "init_new"):
        collector, logs = published_collector(module, r, scenario)
        if logs != r["logs"]:
            raise SystemExit(f"SGLang says rank {r} logs: {logs}; the scenario says otherwise")
    else:
        collector = call(
            module.SchedulerMetricsCollector,
            labels=scheduler_labels(has, r),
            server_args=server_args(module, scenario),
            enable_lora=False,
            enable_hierarchical_cache=False,
            enable_streaming_session=False,
        )
    if hasattr(collector, "emit_constants"):  # 0.5.23: every rank, at start-up
        collector.emit_constants(
            max_total_num_tokens=r.get("max_total_num_tokens", 160_000),
            max_total_num_tokens_swa=None,
            weight_memory_usage_gb=15.3,
            kv_cache_memory_usage_gb=21.9,
            graph_memory_usage_gb={"decode": 0.8},
            max_running_requests_under_SLO=None,
            page_size=1,
            num_pages=r.get("max_total_num_tokens", 160_000),
            context_len=40960,
            startup_available_gpu_memory_gb=70.1,
        )
    if not r["logs"]:
        return
    fields = {f.name for f in dataclasses.fields(module.SchedulerStats)}
    values: dict[str, Any] = {
        "num_running_reqs": r["running"],
        "num_queue_reqs": r["queued"],
        "token_usage": r["token_usage"],
        "full_token_usage": r["token_usage"],
        "num_used_tokens": r["num_used_tokens"],
        "max_total_num_tokens": r["max_total_num_tokens"],
        "gen_throughput": r["gen_throughput"],
        "cache_hit_rate": 0.25,
    }
    if "QueueCount" in has:
        qc = module.QueueCount
        values["num_running_reqs"] = qc(r["running"], r.get("running_by_priority"))
        values["num_queue_reqs"] = qc(r["queued"], r.get("queued_by_priority"))
    stats = module.SchedulerStats(**{k: v for k, v in values.items() if k in fields})
    collector.log_stats(stats)
    if hasattr(collector, "increment_realtime_tokens"):
        collector.increment_realtime_tokens(
            dp_cooperation_info=None,
            prefill_compute_tokens=r["prefill_compute_tokens"],
            prefill_cache_tokens=r["prefill_cache_tokens"],
            decode_tokens=r["decode_tokens"],
        )
    if hasattr(collector, "increment_effective_prefill_tokens"):
        collector.increment_effective_prefill_tokens(
            input_tokens=r["prefill_compute_tokens"] + r["prefill_cache_tokens"],
            device_hit_tokens=r["prefill_cache_tokens"],
            host_hit_tokens=0,
            storage_hit_tokens=0,
        )


def run_tokenizer(module_name: str, scenario: dict[str, Any]) -> None:
    """As the tokenizer manager: labels model_name (0.5.23: ``tokenizer_metric_labels``
    after ``publish``); each request's own priority replaces "" when priority scheduling
    is on (0.5.23 ``collect_metrics``)."""
    module = importlib.import_module(module_name)
    priority = bool(scenario.get("priority"))
    labels: dict[str, str] = {"model_name": MODEL}
    if hasattr(module, "tokenizer_metric_labels"):
        from sglang.srt.runtime_context import publish

        publish(server_args(module, scenario), role="tokenizer")
        labels = module.tokenizer_metric_labels()
    collector = call(
        module.TokenizerMetricsCollector,
        server_args=server_args(module, scenario),
        labels=labels,
        bucket_time_to_first_token=None,
        bucket_inter_token_latency=None,
        bucket_e2e_request_latency=None,
        collect_tokens_histogram=False,
    )
    takes_labels = "labels" in inspect.signature(collector.observe_time_to_first_token).parameters
    for prompt, generated, cached, e2e, ttft, (interval, new), prio in REQUESTS:
        own = {**labels, "priority": str(prio)} if priority else dict(labels)
        pre: dict[str, Any] = {"labels": own} if takes_labels else {}
        call(collector.observe_time_to_first_token, **pre, value=ttft, stream=True)
        call(
            collector.observe_inter_token_latency,
            **pre,
            internval=interval,
            num_new_tokens=new,
        )
        call(
            collector.observe_one_finished_request,
            **pre,
            prompt_tokens=prompt,
            generation_tokens=generated,
            cached_tokens=cached,
            e2e_latency=e2e,
            has_grammar=False,
            retraction_count=0,
            is_streaming=True,
        )


def fetch_page(registry: Any) -> bytes:
    """GET /metrics from the ASGI app SGLang mounts, as gpumon's agent asks (no Accept)."""
    from prometheus_client import make_asgi_app

    app = make_asgi_app(registry=registry)
    body: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            body.append(message.get("body", b""))

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/metrics",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:30000"), (b"user-agent", b"gpumon-agent")],
    }
    asyncio.run(app(scope, receive, send))
    return b"".join(body)


def capture(module_name: str, scenario: dict[str, Any], has: set[str]) -> bytes:
    """One scenario: each rank a forked process of its own (its own pid, as SGLang's
    schedulers), one after another ("mostrecent" gauges keep the last writer), then the
    page over every process's files."""
    directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    for old in Path(directory).glob("*.db"):
        old.unlink()
    jobs = [(run_scheduler, (module_name, has, r, scenario)) for r in scenario["ranks"]]
    jobs.append((run_tokenizer, (module_name, scenario)))
    for target, args in jobs:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                target(*args)
            except BaseException:  # noqa: BLE001 - the child reports any end as its exit code
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(f"{target.__name__}: the process failed ({status})")
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return fetch_page(registry)


def main(out: Path) -> None:
    # 0.5.23 moved it from metrics/collector.py to observability/metrics_collector.py
    module_name = next(
        m
        for m in ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector")
        if importlib.util.find_spec(m.rsplit(".", 1)[0]) is not None
    )
    # SGLang's own setup: with PROMETHEUS_MULTIPROC_DIR set (as here, before anything
    # imports prometheus_client) it makes a temporary directory inside and the values go
    # to the directory the variable names.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = values = tempfile.mkdtemp(prefix="sglang-metrics-")
    importlib.import_module("sglang.srt.utils").set_prometheus_multiproc_dir()
    module = importlib.import_module(module_name)
    has = features(module)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    try:
        for name, scenario in scenarios(has).items():
            page = capture(module_name, scenario, has)
            # gzip: a 0.5.23 page is ~150 KB of text (histograms per priority and rank), 8 KB
            (out / f"{name}.prom.gz").write_bytes(gzip.compress(page, 9, mtime=0))
            made[name] = scenario
    finally:
        shutil.rmtree(values, ignore_errors=True)
    facts = {"module": module_name, "requests": REQUESTS, "scenarios": made}
    (out / "scenario.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    every = "pp_rank" in has
    print(f"Collector module: `{module_name}`. Files (one `/metrics` page each, gzipped):\n")
    what = {
        "dp_attention": "DP attention, dp 2 x tp 4: the DP leaders tp_rank 0 and 2 log"
        + (
            "; with --enable-metrics-for-all-schedulers each follower repeats its leader"
            if every
            else ""
        )
        + (", --enable-priority-scheduling" if "QueueCount" in has else ""),
        "pp2": "PP 2 x TP 2; each stage's tp_rank 0 logs the same requests, tp_rank 1 does not",
    }
    for name in made:
        print(f"- `{name}.prom.gz`: {what[name]}; a tokenizer process, 3 finished requests.")
    print("- `scenario.json`: the numbers each rank and request was given.")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
