"""The simulated machine's ``kill`` (``sim.kill``) and what the scenario shows after it: the
demo's wedged vLLM server can be stopped as its fix says, ``K`` on its API server by its
PID inside CT 200 (the container path of ``actions.kill``), and from then on it is gone:
its processes leave CT 200's /proc (the agent's discovery reads it), its engine core
leaves nvidia-smi's list, GPU 6 goes idle, and its HTTP server refuses. The kill is
recorded in the demo's state dir (which PID, when), so another demo never sees it. The
clock is frozen: no sleeps."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.backends.actions.kill import api_server, kill_alert, kill_plan
from gpumon.backends.alerts.facts import AlertFacts
from gpumon.backends.alerts.store import Alert
from gpumon.backends.model import Health
from gpumon.backends.remote.agent import scan_server_processes
from gpumon.backends.sim import kill
from gpumon.backends.sim.host_proc import write_ct_proc_tree
from gpumon.backends.sim.scenario import (
    JUPYTER_AT,
    JUPYTER_GPU,
    JUPYTER_MIB,
    JUPYTER_PID,
    VLLM_GPUS,
    WEDGE_AT,
    Kill,
    SimSettings,
    compute_processes,
    gpu_states,
    vllm_api_pid,
    vllm_engine_pid,
    vllm_stopped_at,
)
from gpumon.backends.sim.sglang_server import VllmServers
from gpumon.backends.sim.state import RESTARTS_FILE, ct_proc_path, record_kill, with_state

PORTS = (41001, 41002)  # the demo's vLLM servers' ports, server k on GPU VLLM_GPUS[k]
AT = WEDGE_AT + 30.0  # the wedge's alert is up: its fix is offered


def frozen(state: Path, at: float = AT, scenario: str = "vllm") -> SimSettings:
    return SimSettings(scenario=scenario, frozen_at=at, state_dir=str(state))


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimSettings:
    """The vllm scenario frozen at ``AT``, its ``GPUMON_SIM_*`` in the environment as the
    ``kill`` wrapper exports them, CT 200's /proc written as the transport writes it."""
    settings = frozen(tmp_path / "state")
    (tmp_path / "state").mkdir()
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    proc = ct_proc_path(settings)
    assert proc is not None
    write_ct_proc_tree(proc, PORTS)
    return settings


def run_kill(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = kill.main(list(args))
    return code, capsys.readouterr().err.strip()


def test_a_vllm_servers_api_server_can_be_stopped_and_is_gone_after(
    demo: SimSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    api, engine = vllm_api_pid(0), vllm_engine_pid(0)
    assert (api, engine) == (4312, 4318)  # the PIDs the fix and CT 200's /proc say
    assert run_kill(capsys, "-s", "0", str(api)) == (0, "")
    assert run_kill(capsys, "-s", "TERM", str(api)) == (0, "")
    # which process, when: the demo's own state dir
    recorded = json.loads(Path(demo.state_dir or "", RESTARTS_FILE).read_text())
    assert recorded["kills"] == [{"pid": api, "at": AT}]
    after = with_state(demo)
    assert after.kills == (Kill(api, AT),)
    assert vllm_stopped_at(after, 0, AT) == AT and vllm_stopped_at(after, 1, AT) is None
    # kill -0 now says it is gone (K's wait_gone), and another signal finds nothing
    assert run_kill(capsys, "-0", str(api)) == (1, f"kill: ({api}) - No such process")
    assert run_kill(capsys, "-s", "KILL", str(api)) == (1, f"kill: ({api}) - No such process")
    assert run_kill(capsys, "-0", str(engine)) == (1, f"kill: ({engine}) - No such process")
    # the agent's discovery finds the other server only
    proc = ct_proc_path(demo)
    assert proc is not None
    found, infos = scan_server_processes(str(proc))
    assert found == {"sglang": [], "vllm": [PORTS[1]]}
    assert [i.pid for i in infos] == [vllm_api_pid(1)]
    # nvidia-smi: no engine core on GPU 6, which is idle; GPU 7's server goes on
    gpu6, gpu7 = VLLM_GPUS
    procs = {p.gpu_index: p for p in compute_processes(after, AT + 10.0)}
    assert gpu6 not in procs and procs[gpu7].name == "VLLM::EngineCore"
    gpus = gpu_states(after, AT + 10.0)
    assert gpus[gpu6].memory_used_mib <= 3 and gpus[gpu6].utilization_pct == 0
    assert gpus[gpu6].pstate == "P8"  # idle for more than P8_AFTER_S
    assert gpus[gpu7].memory_used_mib > 80000 and gpus[gpu7].utilization_pct >= 90


def test_sigkill_stops_it_too(demo: SimSettings, capsys: pytest.CaptureFixture[str]) -> None:
    api = vllm_api_pid(1)
    assert run_kill(capsys, "-KILL", str(api)) == (0, "")
    assert with_state(demo).kills == (Kill(api, AT),)
    assert run_kill(capsys, "-0", str(api)) == (1, f"kill: ({api}) - No such process")


def test_the_other_simulated_processes_keep_their_answers(
    demo: SimSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live simulated process it does not let end: "Operation not permitted" (an SGLang
    scheduler, the engine core by its host PID or by its PID in CT 200); a PID it does not
    know: "No such process". Nothing is recorded."""
    sglang = next(p.pid for p in compute_processes(demo, AT) if p.gpu_index == 0)
    engine_host_pid = next(p.pid for p in compute_processes(demo, AT) if p.gpu_index == 6)
    for pid in (sglang, engine_host_pid, vllm_engine_pid(0)):
        assert run_kill(capsys, "-0", str(pid)) == (0, "")
        assert run_kill(capsys, "-s", "TERM", str(pid)) == (
            1,
            f"kill: ({pid}) - Operation not permitted",
        )
    assert run_kill(capsys, "-s", "TERM", "4242") == (1, "kill: (4242) - No such process")
    assert run_kill(capsys, "-s", "TERM", str(JUPYTER_PID)) == (
        1,
        f"kill: ({JUPYTER_PID}) - No such process",  # not in this scenario
    )
    assert with_state(demo).kills == ()
    assert not Path(demo.state_dir or "", RESTARTS_FILE).exists()


def test_before_the_kill_the_scenario_is_what_it_was(tmp_path: Path) -> None:
    """A kill changes nothing before its time (the demo's screenshots stay as they are),
    and a kill recorded in one demo's state dir is not another's."""
    plain = frozen(tmp_path / "a")
    stopped = replace(plain, kills=(Kill(vllm_api_pid(0), AT),))
    for t in (0.0, 30.0, WEDGE_AT, AT - 0.5):
        assert gpu_states(stopped, t) == gpu_states(plain, t)
        assert compute_processes(stopped, t) == compute_processes(plain, t)
        assert vllm_stopped_at(stopped, 0, t) is None
    assert vllm_stopped_at(stopped, 0, AT) == AT
    assert with_state(frozen(tmp_path / "b")).kills == ()


def test_the_jupyters_kill_is_recorded_by_its_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The foreign jupyter's kill (training-oom) is the same record: its host PID, when;
    GPU 6 gets its share back."""
    (tmp_path / "state").mkdir()
    at = JUPYTER_AT + 8.0
    settings = frozen(tmp_path / "state", at, "training-oom")
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    before = gpu_states(settings, at)[JUPYTER_GPU].memory_used_mib
    assert run_kill(capsys, "-s", "TERM", str(JUPYTER_PID)) == (0, "")
    after = with_state(settings)
    assert after.kills == (Kill(JUPYTER_PID, at),)
    assert JUPYTER_PID not in {p.pid for p in compute_processes(after, at)}
    freed = before - gpu_states(after, at)[JUPYTER_GPU].memory_used_mib
    assert abs(freed - JUPYTER_MIB) < 100, freed


def test_the_stopped_servers_port_refuses(demo: SimSettings) -> None:
    """The simulated vLLM HTTP servers follow the state dir: a stopped server's port is
    closed from then on (a dead server's refuses connections), the other's is not."""
    servers = VllmServers(demo, list(PORTS))
    servers.follow_state()
    assert servers.down == {}
    assert demo.state_dir is not None
    record_kill(demo.state_dir, vllm_api_pid(0), AT)
    servers.follow_state()
    assert servers.down == {PORTS[0]: "refuse"}


def test_k_on_the_wedges_fix_signals_its_api_server_inside_the_container() -> None:
    """The process ``K`` stops for a wedged engine's incident (the fix "K stop its API
    server (PID 4312)"): that API server by its PID in CT 200, its command line; the
    kill goes the container path, unguarded (no start time known), and its evidence is of
    that alert's incident."""
    command = "/root/venv/bin/python3 /root/venv/bin/vllm serve m --port 41001"
    facts = AlertFacts(port=PORTS[0], server_pid=4312, engine_pids=(4318,), command=command)
    wedged = Alert(
        f"vllm_wedged:{PORTS[0]}", Health.CRITICAL, "vllm_wedged", "demo", 6, None,
        f"vllm :{PORTS[0]} wedged: 41 running", 100.0, 100.0, facts=facts,
    )  # fmt: skip
    process = api_server(wedged, 200)
    assert process is not None
    assert (process.pid, process.container, process.command) == (4312, "200", command)
    assert process.host_pid is None and process.start_ticks is None
    plan = kill_plan("demo", process, host_access=True, container=200)
    assert not plan.on_host and plan.shell_line("TERM") == "pct exec 200 -- kill -s TERM 4312"
    assert kill_alert([wedged], process, ()) == wedged.key
    assert api_server(replace(wedged, facts=replace(facts, server_pid=None)), 200) is None
