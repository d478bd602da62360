"""vLLM's pages and log lines as its releases write them (tests/fixtures/upstream/vllm/,
made from each release's own metric declarations by scripts/capture-upstream), the
tracker's numbers and verdicts, and the agent's discovery of ``vllm serve``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.incident import incidents
from gpumon.backends.config.load import HostConfig
from gpumon.backends.model import GpuSample, Health, HostSample
from gpumon.backends.monitor.sources.agent import command
from gpumon.backends.parsers.vllm import (
    VllmParseError,
    engine_died,
    parse_vllm_log_line,
    parse_vllm_metrics,
)
from gpumon.backends.remote import protocol
from gpumon.backends.remote.agent import (
    is_sglang_server,
    is_vllm_server,
    scan_server_processes,
    server_port,
    vllm_parallel,
)
from gpumon.backends.workloads.vllm import VllmTracker
from gpumon.backends.workloads.watch import Workloads, _engine_gpus

from upstream_captures import UPSTREAM

RELEASES = ("0.6.6.post1", "0.8.5", "0.11.0", "0.34.0")
# 0.11 and 0.34 make a series per engine: the capture has a data-parallel pair
ENGINES = {"0.6.6.post1": 1, "0.8.5": 1, "0.11.0": 2, "0.34.0": 2}


def page(version: str, name: str = "metrics.prom") -> str:
    return (UPSTREAM / "vllm" / version / name).read_text()


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_page_reads_its_own_names(version: str) -> None:
    s = parse_vllm_metrics(page(version))
    n = ENGINES[version]
    assert s.engines == n
    assert s.model == "Qwen/Qwen3-8B"
    assert (s.running, s.queued) == (24 * n, 3 * n)  # summed over the engines
    # gpu_cache_usage_perc (0.6, 0.8) or kv_cache_usage_perc (0.11+): a mean, never a sum
    assert s.token_usage == pytest.approx(0.62)
    assert s.decode_tokens == 451_000 * n and s.prompt_tokens == 182_000 * n
    assert s.preemptions_total == 7 * n
    assert s.ttft is not None and s.ttft.count == 1000 * n
    # time_per_output_token_seconds before 0.11, inter_token_latency_seconds since
    assert s.itl is not None and s.itl.count == 10_000 * n
    if version == "0.6.6.post1":
        assert s.effective_hit_tokens is None  # V0: a hit-rate gauge only, n/a
    else:
        assert s.effective_hit_tokens == 64_000 * n
        assert s.effective_input_tokens == (160_000 - 64_000) * n
    assert s.spec_accept_length is None and s.spec_accept_rate is None  # no drafter


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_stats_line(version: str) -> None:
    stats = parse_vllm_log_line(page(version, "stats.log"))
    assert stats is not None
    assert (stats.running, stats.waiting) == (24, 3)
    assert stats.gen_tokens_per_s == 1960.0 and stats.prompt_tokens_per_s == 820.0
    assert stats.kv_usage == pytest.approx(0.62)
    assert stats.time == "11-29 14:32:00"
    assert stats.engine == (None if version == "0.6.6.post1" else 0)
    assert stats.preemptions == (2 if version == "0.34.0" else None)


def test_a_page_without_vllm_metrics_or_cut_short_is_an_error() -> None:
    with pytest.raises(VllmParseError, match="no vLLM metrics"):
        parse_vllm_metrics("<html>502</html>\n")
    with pytest.raises(VllmParseError, match="truncated"):
        parse_vllm_metrics(page("0.34.0")[:-5])


def test_spec_decode_counters_give_vllms_acceptance() -> None:
    text = page("0.34.0") + (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0\n'
    )
    s = parse_vllm_metrics(text)
    assert s.spec_accept_length == pytest.approx(2.5)  # 1 + accepted / drafts
    assert s.spec_accept_rate == pytest.approx(0.5)  # accepted / draft tokens


def test_rates_then_wedged_then_idle() -> None:
    first, later = page("0.34.0"), page("0.34.0", "metrics_later.prom")
    v = VllmTracker(8000)
    v.observe_text(first, 1000.0)
    assert v.gen_tokens_per_s is None  # one scrape: no rate, never 0
    v.observe_text(later, 1005.0)
    assert v.gen_tokens_per_s == pytest.approx(2 * 9_800 / 5)
    assert v.prompt_tokens_per_s == pytest.approx(2 * 4_100 / 5)
    assert v.preemptions_per_s == pytest.approx(2 * 2 / 5)
    assert v.cache_hit_rate == pytest.approx(0.4)
    # frozen counters with requests: wedged once hung_after_s passed, not before
    for t in range(1010, 1065, 5):  # the last token came with the scrape at 1005
        v.observe_text(later, float(t))
        assert v.hung(float(t), 60.0) is None
    v.observe_text(later, 1065.0)
    verdict = v.hung(1065.0, 60.0)
    assert verdict is not None
    assert verdict.headline() == "vllm :8000 wedged: 48 running, 6 waiting, no token for 60 s"
    idle = later.replace("vllm:num_requests_running{", "vllm:num_requests_running_x{")
    idle = idle.replace("vllm:num_requests_waiting{", "vllm:num_requests_waiting_x{")
    v.observe_text(idle, 1070.0)
    assert v.hung(1200.0, 60.0) is None  # nothing running or waiting: idle, not wedged


def test_kv_pressure_needs_full_cache_and_preemptions() -> None:
    first, later = page("0.34.0"), page("0.34.0", "metrics_later.prom")
    full = [p.replace("} 0.62", "} 0.97") for p in (first, later)]
    v = VllmTracker(8000)
    v.observe_text(full[0], 1000.0)
    v.observe_text(full[1], 1005.0)
    assert v.kv_pressure(0.9) == (
        "vllm :8000 KV cache 97% full, 0.8 preemptions/s: requests are evicted and recomputed"
    )
    v.observe_text(full[1], 1010.0)  # no preemption since: no pressure
    assert v.kv_pressure(0.9) is None
    calm = VllmTracker(8001)
    calm.observe_text(first, 1000.0)
    calm.observe_text(later, 1005.0)  # preempting at 62 %: not full
    assert calm.kv_pressure(0.9) is None


def test_engine_dead_lines_as_vllm_spells_them() -> None:
    # vllm/v1/engine/core.py (0.8.5, 0.34.0), vllm/v1/engine/exceptions.py,
    # vllm/engine/multiprocessing/__init__.py and async_llm_engine.py (0.6.6.post1)
    for line in (
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.",
        "MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find the "
        "original error",
        "AsyncEngineDeadError: Background loop has errored already.",
    ):
        assert engine_died(line), line
    assert not engine_died(page("0.34.0", "stats.log"))
    v = VllmTracker(8000)
    v.observe_text(page("0.34.0"), 1000.0)
    v.observe_log_line(
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.", 1001.0
    )
    text = v.dead_text()
    assert text is not None and text.startswith("vllm :8000 engine core dead, API server")
    v.mark_down(1002.0, "refused")  # the server is gone too: a stopped server, not this
    assert v.dead_text() is None


def test_the_wedged_log_line_is_not_progress() -> None:
    v = VllmTracker(8000)
    line = (
        "INFO 11-29 14:32:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 24 reqs, Waiting: 3 "
        "reqs, GPU KV cache usage: 62.0%, Prefix cache hit rate: 40.0%"
    )
    assert v.observe_log_line(line, 1000.0)
    assert v.log_progress_at is None
    assert v.observe_log_line(
        line.replace("generation throughput: 0.0", "generation throughput: 9.5"), 1001.0
    )
    assert v.log_progress_at is not None


@pytest.mark.parametrize(
    ("argv", "port"),
    [
        (["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8010"], 8010),
        (["/usr/bin/python3", "/venv/bin/vllm", "serve", "m", "--port=8011"], 8011),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], 8000),
        (["python3", "-m", "vllm", "serve", "m", "--api-key", "sk", "-tp", "2"], 8000),
    ],
)
def test_vllm_servers_are_found_by_their_command_line(argv: list[str], port: int) -> None:
    assert is_vllm_server(argv) and not is_sglang_server(argv)
    assert server_port(argv, "/nonexistent", 8000) == port


def test_engine_core_and_other_vllm_commands_are_not_servers() -> None:
    for argv in (
        ["VLLM::EngineCore"],
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
        ["vllm", "bench", "serve"],  # "serve" after "bench", not after vllm
        ["python", "train.py", "--vllm", "serve"],
    ):
        assert not is_vllm_server(argv), argv


# vLLM's KV-cache start-up failures, each as its release's code formats it:
# 0.6.6.post1 vllm/worker/worker.py raise_if_cache_size_invalid; 0.8.5 and 0.11.0
# vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory ("models's", sic);
# 0.34.0 vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory
KV_MEMORY_LINES = {
    "0.6.6.post1": "ValueError: The model's max seq len (131072) is larger than the maximum "
    "number of tokens that can be stored in KV cache (52480). Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    "0.8.5": "(EngineCore_0 pid=4711) ValueError: To serve at least one request with the "
    "models's max seq len (131072), (18.00 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (9.51 GiB). Based on the available memory,  Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    "0.11.0": "(EngineCore_DP0 pid=4711) ValueError: No available memory for the cache "
    "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    "0.34.0": "(EngineCore pid=4711) ValueError: To serve at least one request with the "
    "model's max seq len (131072), (18.0 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (9.51 GiB). Based on the available memory, the estimated "
    "maximum model length is 69232. Try increasing `gpu_memory_utilization` when "
    "initializing the engine (this flag also controls CPU memory reservation on the CPU "
    "backend, despite its name). Decreasing `max_model_len` also reduces what is needed.",
}


@pytest.mark.parametrize("version", RELEASES)
def test_vllms_kv_cache_that_does_not_fit_is_its_own_alert_with_vllms_fix(version: str) -> None:
    engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
    lines = [
        "INFO 11-29 14:30:02 [gpu_worker.py:298] Available KV cache memory: 9.51 GiB",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 83',
        KV_MEMORY_LINES[version],
    ]
    raised = engine.on_log_lines("/var/log/vllm.log", lines, engine="vllm")
    assert [a.kind for a in raised] == ["vllm_kv_memory"]
    assert raised[0].severity is Health.CRITICAL
    assert "ValueError: " in raised[0].message and "cache" in raised[0].message
    (incident,) = incidents(engine.active())
    assert [f.words for f in incident.fixes] == [
        "start it with a higher --gpu-memory-utilization or a lower --max-model-len"
    ]
    # the periodic stats line says "KV cache usage" too: no alert
    assert not engine.on_log_lines("/var/log/vllm.log", [page(version, "stats.log")])


def test_a_cuda_oom_in_a_vllm_log_is_vllms_with_the_fix_vllm_prints() -> None:
    oom = (
        "(EngineCore_DP0 pid=4711) torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free."
    )
    # vllm/v1/worker/gpu_model_runner.py (0.8.5-0.11.0): its warm-up's own words
    warm = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine."
    )
    for line in (oom, warm):
        engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
        raised = engine.on_log_lines("/var/log/vllm-8000.log", [line], engine="vllm")
        assert [a.kind for a in raised] == ["vllm_oom"], line
        (incident,) = incidents(engine.active())
        assert [f.words for f in incident.fixes] == [
            "restart it with a lower --max-num-seqs or --gpu-memory-utilization"
        ]
        # the same line in a job's log is the job's CUDA OOM, as before
        job = AlertEngine("box", AlertRules(), lambda: 1000.0)
        assert [a.kind for a in job.on_log_lines("/d.log", [line], job="d")] == ["cuda_oom"]


def _spec_page(accepted: float, drafts: float, engines: int = 1) -> str:
    """The 0.34.0 capture with the drafter's counters of vllm/v1/spec_decode/metrics.py
    (``SpecDecodingProm``: vllm:spec_decode_num_drafts, _num_draft_tokens,
    _num_accepted_tokens, counters with the stat logger's labels), 3 tokens a draft."""
    out = page("0.34.0")
    for e in range(engines):
        labels = f'engine="{e}",model_name="Qwen/Qwen3-8B"'
        out += (
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {3 * drafts}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}\n"
        )
    return out


def _counters_moving(text: str, k: int) -> str:
    """``text`` with the generation and prompt counters ``k`` thousand tokens further."""
    return re.sub(
        r"^(vllm:(?:generation|prompt)_tokens_total\{[^}]*\}) (\S+)$",
        lambda m: f"{m[1]} {float(m[2]) + 1000 * k}",
        text,
        flags=re.M,
    )


def test_a_vllm_drafter_that_decays_is_spec_accept_low_over_its_window() -> None:
    """The acceptance over the last seconds, as vLLM's own PromQL reads its counters: a
    drafter good for an hour (2.8 tokens a draft since start) that now accepts almost
    nothing is low at once, where the totals since start would take an hour to say so."""
    w = Workloads(HostConfig(name="box", kind="local"))
    engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
    accepted, drafts = 180_000.0, 100_000.0
    for k in range(20):  # 5 s apart: 50 drafts, 2 accepted tokens each step
        t = 1000.0 + 5 * k
        accepted, drafts = accepted + 2, drafts + 50
        w.on_http("vllm:8000", 200, _counters_moving(_spec_page(accepted, drafts), k), None, t)
        w.judge_spec(engine, t)
    v = w.vllm[8000]
    assert v.spec_accept_length == pytest.approx(1.04)  # 1 + 10 / 250 over the window
    assert v.spec_accept_rate == pytest.approx(10 / 750)
    (alert,) = [a for a in engine.active() if a.kind == "spec_accept_low"]
    assert alert.message.startswith(
        "vllm :8000 drafter tokens rejected: mean acceptance length 1.04 (accept rate 1%) for"
    )
    assert alert.message.endswith("below 1.5: speculative decoding costs more than it saves")


def test_a_vllm_drafter_that_accepts_or_an_idle_one_is_never_low() -> None:
    w = Workloads(HostConfig(name="box", kind="local"))
    engine = AlertEngine("box", AlertRules(), lambda: 1000.0)
    accepted, drafts = 1000.0, 1000.0
    for k in range(20):  # decoding, 2.6 tokens a draft
        t = 1000.0 + 5 * k
        accepted, drafts = accepted + 80, drafts + 50
        w.on_http("vllm:8000", 200, _counters_moving(_spec_page(accepted, drafts), k), None, t)
        w.judge_spec(engine, t)
    assert w.vllm[8000].spec_accept_length == pytest.approx(2.6)
    # idle from now on: no draft, no token; the totals since start (1.0 + 1.6...) stay
    for k in range(20, 40):
        t = 1000.0 + 5 * k
        w.on_http("vllm:8000", 200, _counters_moving(_spec_page(accepted, drafts), 19), None, t)
        w.judge_spec(engine, t)
    assert w.vllm[8000].spec_accept_length == pytest.approx(2.6)  # the last window's
    assert not [a for a in engine.active() if a.kind == "spec_accept_low"]


@pytest.mark.parametrize(
    ("argv", "sizes"),
    [
        (["vllm", "serve", "m", "--tensor-parallel-size", "4"], {"tp": 4}),
        (["vllm", "serve", "m", "-tp", "2", "-pp", "2", "-dp=2"], {"tp": 2, "pp": 2, "dp": 2}),
        (["vllm", "serve", "m", "--tensor_parallel_size=8", "-tp", "4"], {"tp": 4}),  # last
        (["vllm", "serve", "m", "--data-parallel-size", "x", "--max-model-len", "8"], {}),
    ],
)
def test_vllms_parallel_sizes_as_its_argument_parser_reads_them(
    argv: list[str], sizes: dict[str, int]
) -> None:
    """vllm/engine/arg_utils.py 0.34.0: ``--tensor-parallel-size``/``-tp``,
    ``--pipeline-parallel-size``/``-pp``, ``--data-parallel-size``/``-dp``;
    FlexibleArgumentParser takes underscores for dashes."""
    assert vllm_parallel(argv) == sizes


def _process(
    root: Path, pid: int, ppid: int, argv: list[str], devices: tuple[int, ...] = ()
) -> None:
    """``/proc/<pid>`` as the agent reads it: ``stat`` (the parent after the name),
    ``cmdline`` and ``fd`` links (dangling is enough: the agent reads the link)."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({argv[0][:15]}) S {ppid} {pid} {pid} 0 -1 4194560\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    for n, minor in enumerate((*devices, -1)):
        target = f"/dev/nvidia{minor}" if minor >= 0 else "/dev/nvidiactl"
        (d / "fd" / str(n + 10)).symlink_to(target)


def test_a_vllm_servers_gpus_are_those_its_process_tree_holds(tmp_path: Path) -> None:
    """Issue 38 point 2: the engine core and workers are told by descent from the server,
    not by their names: a ``VLLM::Worker_TP0`` of no server here (a leftover, another
    container's) is no server's, and the second server's workers are its own."""
    proc = tmp_path / "proc"
    _process(
        proc,
        100,
        1,
        ["/venv/bin/python3", "/venv/bin/vllm", "serve", "m", "--port", "8010", "-tp", "2"],
    )
    _process(proc, 101, 100, ["VLLM::EngineCore"])
    _process(proc, 102, 101, ["VLLM::Worker_TP0"], (14,))
    _process(proc, 103, 101, ["VLLM::Worker_TP1"], (15,))
    _process(proc, 200, 1, ["vllm", "serve", "m2", "--port=8011"])
    _process(
        proc, 201, 200, ["python3", "-c", "from multiprocessing.spawn import spawn_main"], (16,)
    )
    _process(proc, 300, 1, ["VLLM::Worker_TP0"], (17,))
    found, infos = scan_server_processes(str(proc))
    assert found == {"sglang": [], "vllm": [8010, 8011]}
    assert [(i.port, i.pid, i.tp, i.pp, i.minors) for i in infos] == [
        (8010, 100, 2, None, [14, 15]),
        (8011, 200, None, None, [16]),
    ]
    # through the wire and the workloads: the wedged server's alert is on its first GPU
    wire = json.loads(protocol.encode(infos[0]))
    info = protocol.ServerInfo.from_wire(wire)
    w = Workloads(HostConfig(name="box", kind="local"))
    w.on_server_info(info)
    gpus = tuple(GpuSample(i, minor=10 + i) for i in range(8))  # the driver's numbers
    sample = HostSample("box", 1000.0, None, gpus)
    tracker = w.vllm[8010]
    assert tracker.info is not None and tracker.info.short == "TP 2"
    assert _engine_gpus(w.vllm, "vllm", sample) == {8010: (4, 5)}
    tracker.observe_info(200, '{"version": "0.34.0"}')  # /version keeps the sizes
    assert tracker.snapshot_json()["parallel"] == "TP 2"
    assert tracker.snapshot_json()["version"] == "0.34.0"


def test_an_sglang_servers_command_line_is_sent_and_masked_on_receipt(tmp_path: Path) -> None:
    """Issue 36.2: discovery sends each SGLang server's launcher's command line (the
    lowest PID on its port, not its schedulers'); the monitor masks its secrets before it
    keeps it (``--api-key ****``), bounded on the wire."""
    proc = tmp_path / "proc"
    argv = ["python3", "-m", "sglang.launch_server", "--port", "30000", "--api-key", "sk-abc123xyz"]
    _process(proc, 400, 1, argv)
    _process(proc, 401, 400, ["sglang::scheduler_TP0"], (0,))
    _process(proc, 402, 400, [*argv[:3], "--port", "30000"])  # a child with the flag
    found, infos = scan_server_processes(str(proc))
    assert found["sglang"] == [30000]
    [info] = [i for i in infos if i.engine == "sglang"]
    assert (info.port, info.pid, info.argv) == (30000, 400, argv)
    wire = protocol.ServerInfo.from_wire(json.loads(protocol.encode(info)))
    assert command(wire) == "python3 -m sglang.launch_server --port 30000 --api-key ****"
    huge = {"engine": "sglang", "port": 1, "argv": ["x" * 9999] * 999}
    long = protocol.ServerInfo.from_wire(huge)
    assert len(long.argv) == protocol.ARGV_MAX and len(long.argv[0]) == protocol.ARGV_WORD_MAX
    w = Workloads(HostConfig(name="box", kind="local"))
    w.on_server_info(wire, command=command(wire))
    assert w.server_commands == {30000: command(wire)}
    assert w.vllm == {}  # no vLLM server of it
