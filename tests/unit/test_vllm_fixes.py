"""What fixes each vLLM verdict (issue 38, its loose end): the incident's fixes come from
the alert's facts, as SGLang's hung server's do (``incident.wedged_vllm_fixes``). A wedged
engine: its stacks (``py-spy dump --native`` of the processes vLLM titles ``VLLM::EngineCore``
and ``VLLM::Worker_TP*``: ``set_process_title``, vllm/utils/system_utils.py 0.34.0, the
prefix ``VLLM`` from ``VLLM_PROCESS_NAME_PREFIX``), then ``K`` on its API server; a dead
engine core: ``K`` on its API server; KV pressure: vLLM's advice on preemption; its memory
failures: the flags vLLM prints."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from gpumon.backends.alerts.engine import AlertEngine, AlertRules
from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.incident import command_fix, incidents
from gpumon.backends.config.load import HostConfig
from gpumon.backends.config.workloads import JobConfig, VllmConfig
from gpumon.backends.model import GpuProcess, GpuSample, HostSample
from gpumon.backends.monitor.sources.agent import command
from gpumon.backends.remote import protocol
from gpumon.backends.remote.agent import scan_server_processes
from gpumon.backends.sim.host_proc import write_ct_proc_tree
from gpumon.backends.workloads.watch import Workloads

from upstream_captures import UPSTREAM

PORT = 8000
API_SERVER = 4700


def page(name: str) -> str:
    return (UPSTREAM / "vllm" / "0.34.0" / name).read_text()


def _tp2_sample() -> HostSample:
    """A TP-2 server's GPUs 0 and 1, each with its worker (a TP-1 engine core would hold
    the GPU itself), and a python of another job on GPU 2."""
    gpus = tuple(GpuSample(index=i, uuid=f"GPU-{i}") for i in range(3))
    procs = (
        GpuProcess(4702, "VLLM::Worker_TP0", 70000, "GPU-0"),
        GpuProcess(4703, "VLLM::Worker_TP1", 70000, "GPU-1"),
        GpuProcess(5000, "python3", 1000, "GPU-2"),
    )
    return HostSample("box", 0.0, None, gpus, procs)


def _workloads(pid: int | None = API_SERVER) -> Workloads:
    w = Workloads(HostConfig(name="box", kind="ssh", vllm=VllmConfig(ports=(PORT,))))
    # discovery: the API server's PID and the device files (minors 0, 1) its tree holds
    w.on_server_info(protocol.ServerInfo("vllm", PORT, pid or 0, tp=2, minors=[0, 1]))
    return w


def _sample_with_minors() -> HostSample:
    sample = _tp2_sample()
    gpus = tuple(GpuSample(index=g.index, uuid=g.uuid, minor=g.index) for g in sample.gpus)
    return HostSample("box", 0.0, None, gpus, sample.processes)


def _wedge(w: Workloads, engine: AlertEngine, sample: HostSample | None) -> None:
    tracker = w.vllm[PORT]
    tracker.observe_text(page("metrics.prom"), 1000.0)
    for t in range(1005, 1075, 5):  # requests running, the counters frozen
        tracker.observe_text(page("metrics_later.prom"), float(t))
        w.judge_vllm(engine, float(t), sample)


def test_a_wedged_engines_incident_offers_its_stacks_then_k_on_its_api_server() -> None:
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, _sample_with_minors())
    [alert] = [a for a in engine.active() if a.kind == "vllm_wedged"]
    assert (alert.facts.engine_pids, alert.facts.server_pid) == ((4702, 4703), API_SERVER)
    back = AlertFacts.from_json(alert.facts.to_json())  # a recording keeps them
    assert (back.engine_pids, back.server_pid) == ((4702, 4703), API_SERVER)
    [incident] = incidents(engine.active())
    assert [(f.key, f.words) for f in incident.fixes] == [
        (None, "its stacks: py-spy dump --native --pid 4702 (each engine process: 4702, 4703)"),
        ("K", "stop its API server (PID 4700), then start it again"),
    ]
    assert command_fix(incident) == (
        "fix: its stacks: py-spy dump --native --pid 4702 (each engine process: 4702, 4703)"
    )


def test_a_wedged_engine_whose_processes_are_not_known_says_what_to_dump() -> None:
    """No sample lists its processes, discovery gave no PID (configured ports): the advice
    still names the processes to dump, and no ``K`` is offered on a PID nobody knows."""
    w = _workloads(pid=None)
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, None)
    [incident] = incidents(engine.active())
    assert incident.cause.kind == "vllm_wedged"
    assert [(f.key, f.words) for f in incident.fixes] == [
        (None, "its stacks: py-spy dump --native --pid <each VLLM::EngineCore, VLLM::Worker PID>"),
        (None, "restart the server (its API server and engine processes)"),
    ]


def test_a_dead_engine_core_is_fixed_by_k_on_its_api_server() -> None:
    """Every request fails until the server is restarted; its engine's stacks are gone."""
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1002.0)
    tracker = w.vllm[PORT]
    tracker.observe_text(page("metrics.prom"), 1000.0)
    tracker.observe_log_line(
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.", 1001.0
    )
    w.judge_vllm(engine, 1002.0, _sample_with_minors())
    [incident] = incidents(engine.active())
    assert incident.cause.kind == "vllm_engine_dead"
    assert [(f.key, f.words) for f in incident.fixes] == [
        ("K", "stop its API server (PID 4700), then start it again")
    ]
    assert command_fix(incident) == (
        "fix: stop its API server (PID 4700), then start it again (the dashboard's K)"
    )


def test_kv_pressure_gives_vllms_advice_on_preemption() -> None:
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1005.0)
    tracker = w.vllm[PORT]
    tracker.observe_text(page("metrics.prom").replace("} 0.62", "} 0.97"), 1000.0)
    tracker.observe_text(page("metrics_later.prom").replace("} 0.62", "} 0.97"), 1005.0)
    w.judge_vllm(engine, 1005.0, _sample_with_minors())
    [incident] = incidents(engine.active())
    assert incident.cause.kind == "vllm_kv_pressure"
    assert [(f.key, f.words) for f in incident.fixes] == [
        (
            None,
            "restart it with a higher --gpu-memory-utilization, a lower --max-num-seqs or "
            "--max-num-batched-tokens, or a larger --tensor-parallel-size",
        )
    ]


def test_a_discovered_servers_fix_says_its_command_line_to_start_it_again(
    tmp_path: Path,
) -> None:
    """The agent sends how a discovered vLLM server was started (its ``/proc/PID/cmdline``,
    as for SGLang's), masked before anything keeps it: the wedged server's fix says it
    after ``K`` on its API server, the key never in it."""
    proc = tmp_path / "proc"
    argv = ["/venv/bin/python3", "/venv/bin/vllm", "serve", "m", "--port", "8000"]
    d = proc / str(API_SERVER)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(f"{API_SERVER} (python3) S 1 {API_SERVER} {API_SERVER} 0 -1 0\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0--api-key\0sk-s3cret\0")
    _, [info] = scan_server_processes(str(proc))
    wire = protocol.ServerInfo.from_wire(json.loads(protocol.encode(info)))
    w = Workloads(HostConfig(name="box", kind="ssh", vllm=VllmConfig(ports=(PORT,))))
    w.on_server_info(wire, command=command(wire))
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, None)
    [incident] = incidents(engine.active())
    assert [(f.key, f.words) for f in incident.fixes] == [
        (None, "its stacks: py-spy dump --native --pid <each VLLM::EngineCore, VLLM::Worker PID>"),
        ("K", "stop its API server (PID 4700)"),
        (
            None,
            "start it again: /venv/bin/python3 /venv/bin/vllm serve m --port 8000 --api-key ****",
        ),
    ]
    assert "s3cret" not in json.dumps(incident.cause.facts.to_json())


def test_the_demos_vllm_servers_are_found_by_discovery_in_ct200s_proc(tmp_path: Path) -> None:
    """The demo's vLLM servers run as a real V1 server does: an API server ``vllm serve``
    and its child titled ``VLLM::EngineCore``; the agent's own scan of the simulated
    CT200's ``/proc`` finds each API server with its port and command line, never the
    engine core (its title is no server's command)."""
    ports = (41001, 41002)
    found, infos = scan_server_processes(str(write_ct_proc_tree(tmp_path / "proc", ports)))
    assert found == {"sglang": [], "vllm": list(ports)}
    # GPU 6's engine core is CT 200's PID 4318 (nvidia-smi's list); its parent is 4312
    assert [(i.port, i.pid, i.argv[2:]) for i in infos] == [
        (41001, 4312, ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "41001"]),
        (41002, 4480, ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "41002"]),
    ]


def test_a_vllm_server_that_is_a_job_is_restarted_by_r() -> None:
    """``server = PORT`` of a vLLM port: its wedged engine and its dead engine core name
    the job, and ``r restart`` (its command ``gpumon restart``) replaces ``K`` on its API
    server, after the wedged engine's stacks. Before, neither named a job: no ``r``."""
    job = JobConfig(name="llama", server=PORT, start="vllm serve m --port 8000")
    host = HostConfig(name="box", kind="ssh", vllm=VllmConfig(ports=(PORT,)), jobs=(job,))
    w = Workloads(host)
    w.on_server_info(protocol.ServerInfo("vllm", PORT, API_SERVER, tp=2, minors=[0, 1]))
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, _sample_with_minors())
    [incident] = incidents(engine.active())
    assert incident.cause.job == "llama" and incident.fix == "llama"
    assert [(f.key, f.words, f.command) for f in incident.fixes] == [
        (
            None,
            "its stacks: py-spy dump --native --pid 4702 (each engine process: 4702, 4703)",
            None,
        ),
        ("r", "restart llama", "gpumon restart box llama"),
    ]
    w.vllm[PORT].observe_log_line(
        "ERROR 11-29 14:33:02 [core.py:398] EngineCore encountered a fatal error.", 1071.0
    )
    w.judge_vllm(engine, 1072.0, _sample_with_minors())
    [dead] = [a for a in engine.active() if a.kind == "vllm_engine_dead"]
    assert dead.job == "llama"
    [fixes] = {i.fixes for i in incidents([dead])}
    assert [(f.key, f.words) for f in fixes] == [("r", "restart llama")]


def _more_tokens(text: str) -> str:
    """The page with more generation tokens than ``metrics_later.prom``: tokens came."""
    return re.sub(
        r"^(vllm:generation_tokens_total\{[^}]*\} )([\d.]+)$",
        lambda m: f"{m[1]}{float(m[2]) + 500.0}",
        text,
        flags=re.M,
    )


def _wedged(engine: AlertEngine) -> list[tuple[float, bool]]:
    """Every vllm_wedged alert of the history, active or ended, as (raised at, active):
    one per incident."""
    return [(a.time, a.active) for a in engine.history() if a.kind == "vllm_wedged"]


def test_a_scrape_that_did_not_come_is_no_token_the_wedged_alert_holds() -> None:
    """A /metrics scrape that timed out (a loaded target: the demo's server beside a CPU
    hog missed the agent's 2 s, CI triple run 1) marked the server down, which ended the
    critical alert; the next pages raised it again once the counters' span had started
    over: a resolve and a new page for one wedge. No page is no token: the alert holds
    through the failure and the span's restart, and ends when tokens come."""
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    sample = _sample_with_minors()
    _wedge(w, engine, sample)
    assert _wedged(engine) == [(1065.0, True)]
    later = page("metrics_later.prom")
    w.on_http(f"vllm:{PORT}", None, "", "timed out", 1075.0)
    w.judge_vllm(engine, 1075.0, sample)
    assert _wedged(engine) == [(1065.0, True)]
    w.on_http(f"vllm:{PORT}", 200, later, None, 1076.0)  # one page: no span yet
    w.judge_vllm(engine, 1076.0, sample)
    assert _wedged(engine) == [(1065.0, True)]
    w.on_http(f"vllm:{PORT}", 200, later, None, 1080.0)  # judged again: still wedged
    w.judge_vllm(engine, 1080.0, sample)
    [alert] = [a for a in engine.active() if a.kind == "vllm_wedged"]
    assert alert.time == 1065.0  # the same alert, counted from the last token (1005)
    assert alert.message.startswith("vllm :8000 wedged: 48 running, 6 waiting, no token for 75 s")
    w.on_http(f"vllm:{PORT}", 200, _more_tokens(later), None, 1085.0)
    w.judge_vllm(engine, 1085.0, sample)
    assert _wedged(engine) == [(1065.0, False)]  # tokens: it ends


def test_a_wedged_alert_without_pages_ends_after_hung_after_s_or_when_the_work_went() -> None:
    """The hold is bounded: a server that answers no page for ``hung_after_s`` is stopped
    or gone, not wedged (the alert ends); a page that says nothing runs or waits ends it
    at once, as does a port that refuses the connection (nothing listens: the server was
    stopped, by K or otherwise; a wedged one's API server still answers)."""
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    sample = _sample_with_minors()
    _wedge(w, engine, sample)
    for t in range(1075, 1135, 5):  # no answer, 60 s (hung_after_s) from 1075
        w.on_http(f"vllm:{PORT}", None, "", "timed out", float(t))
        w.judge_vllm(engine, float(t), sample)
        assert _wedged(engine) == [(1065.0, True)], t
    w.on_http(f"vllm:{PORT}", None, "", "timed out", 1135.0)
    w.judge_vllm(engine, 1135.0, sample)
    assert _wedged(engine) == [(1065.0, False)]

    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, sample)
    refused = "ConnectionRefusedError: [Errno 111] Connection refused"  # the agent's words
    w.on_http(f"vllm:{PORT}", None, "", refused, 1075.0)
    w.judge_vllm(engine, 1075.0, sample)
    assert _wedged(engine) == [(1065.0, False)]

    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, sample)
    w.on_http(f"vllm:{PORT}", None, "", "timed out", 1075.0)
    w.judge_vllm(engine, 1075.0, sample)
    assert _wedged(engine) == [(1065.0, True)]
    idle = page("metrics_later.prom").replace(
        "vllm:num_requests_running{", "vllm:num_requests_running_x{"
    )
    idle = idle.replace("vllm:num_requests_waiting{", "vllm:num_requests_waiting_x{")
    w.on_http(f"vllm:{PORT}", 200, idle, None, 1076.0)
    w.judge_vllm(engine, 1076.0, sample)
    assert _wedged(engine) == [(1065.0, False)]  # nothing running or waiting: idle


def _stats_line(at: float, gen: float, running: int = 41, waiting: int = 4) -> str:
    """vLLM's periodic stats line stamped ``at`` (local time, as vLLM's logger writes it)."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(at))
    return (
        f"INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: {gen} tokens/s, Running: {running} reqs, Waiting: "
        f"{waiting} reqs, GPU KV cache usage: 62.0%, Prefix cache hit rate: 40.0%"
    )


def test_a_verdict_of_the_log_holds_through_the_first_pages_span() -> None:
    """The log's stats lines came before the first /metrics page (the demo's wedged vLLM
    server beside a CPU hog): they said 41 running and no token for 80 s, and the alert
    was raised; the first page then gave the counters a span of 0 s, too short to judge
    by, and the alert ended, to be raised again 2 s later (a resolve and a new page for
    one wedge; the TUI test found the strip offering its fix and no alert active). The
    alert holds until the pages judge, and ends when tokens come."""
    w = _workloads()
    t0 = time.mktime(time.strptime("2026-11-29 14:32:00", "%Y-%m-%d %H:%M:%S"))
    engine = AlertEngine("box", AlertRules(), clock=lambda: t0)
    sample = _sample_with_minors()
    tracker = w.vllm[PORT]
    tracker.observe_log_line(_stats_line(t0, 1960.0), t0)  # the last token
    for k in range(1, 9):  # wedged: requests, no token, every 10 s
        tracker.observe_log_line(_stats_line(t0 + 10 * k, 0.0), t0 + 10 * k)
        w.judge_vllm(engine, t0 + 10 * k, sample)
    assert _wedged(engine) == [(t0 + 60, True)]  # from the log alone: no page yet
    later = page("metrics_later.prom")
    w.on_http(f"vllm:{PORT}", 200, later, None, t0 + 81)  # the first page: no span
    w.judge_vllm(engine, t0 + 81, sample)
    assert _wedged(engine) == [(t0 + 60, True)]
    w.on_http(f"vllm:{PORT}", 200, later, None, t0 + 86)  # judged by the pages: wedged
    w.judge_vllm(engine, t0 + 86, sample)
    [alert] = [a for a in engine.active() if a.kind == "vllm_wedged"]
    assert alert.time == t0 + 60 and "no token for 86 s" in alert.message, alert.message
    w.on_http(f"vllm:{PORT}", 200, _more_tokens(later), None, t0 + 91)
    w.judge_vllm(engine, t0 + 91, sample)
    assert _wedged(engine) == [(t0 + 60, False)]  # tokens: it ends


def test_a_wedge_judged_before_the_process_list_learns_its_gpu_when_it_comes() -> None:
    """The verdict came before the first process list (a loaded machine: the demo's, in
    the TUI test): raised with no GPU. The alert's GPU stayed unknown for its whole life
    though the next sample said it (only its facts learned it): the incident did not fold
    in what happened on that GPU, and the pages named none. It is the same alert, now on
    its server's first GPU, with its engine processes."""
    w = _workloads()
    engine = AlertEngine("box", AlertRules(), clock=lambda: 1070.0)
    _wedge(w, engine, None)
    [before] = [a for a in engine.active() if a.kind == "vllm_wedged"]
    assert before.gpu is None and before.facts.engine_pids == ()
    w.judge_vllm(engine, 1075.0, _sample_with_minors())
    [after] = [a for a in engine.active() if a.kind == "vllm_wedged"]
    assert (after.key, after.time) == (before.key, before.time)  # the same alert
    assert after.gpu == 0 and after.facts.gpu is not None and after.facts.gpu.index == 0
    assert after.facts.engine_pids == (4702, 4703)
