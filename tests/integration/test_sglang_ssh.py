"""SGLang servers behind the real sshd: the agent fetches /metrics on the target's
localhost and the monitor turns counters into rates; a server goes down and comes back."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from own_servers import own_incomplete

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.monitor import demo_settings, make_monitor

from scripted_http import Huge
from sshd_server import SshServer, free_port
from waiting import until

pytestmark = pytest.mark.integration


def start_servers(ports: list[int]) -> subprocess.Popen[bytes]:
    env = {**os.environ, **demo_settings("sglang").to_env()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpumon.backends.sim.sglang_server", "--ports",
         ",".join(map(str, ports))],
        env=env, start_new_session=True,
    )  # fmt: skip
    import socket

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", ports[-1])) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("simulated SGLang servers did not start")


async def test_rates_over_ssh_and_a_server_going_down_and_back(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    ports = [free_port(), free_port()]
    servers = start_servers(ports)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(container=200, interval=0.5)
        + f"[hosts.ct200.sglang]\nports = {ports}\ndiscover = false\n"
    )
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()
    try:
        trackers = monitor.workloads.sglang
        await until(
            lambda: all(trackers[p].gen_tokens_per_s is not None for p in ports), 20, "rates"
        )
        for p in ports:
            t = trackers[p]
            assert t.up and t.model == "Qwen/Qwen3-8B"
            assert t.gen_tokens_per_s is not None and 900 < t.gen_tokens_per_s < 1500
            assert t.running is not None and t.running > 0
            assert t.snapshot_json()["version"] == "0.5.18"  # its /server_info, read once
        os.killpg(servers.pid, signal.SIGKILL)
        servers.wait()
        await until(lambda: all(trackers[p].up is False for p in ports), 10, "down")
        assert trackers[ports[0]].stale and trackers[ports[0]].error
        servers = start_servers(ports)
        await until(
            lambda: all(trackers[p].up and trackers[p].gen_tokens_per_s for p in ports),
            20,
            "back up with rates",
        )
        rate = trackers[ports[0]].gen_tokens_per_s
        assert rate is not None and rate > 0  # never negative across the restart
    finally:
        await monitor.stop()
        if servers.poll() is None:
            os.killpg(servers.pid, signal.SIGKILL)
            servers.wait()


SGLANG_SCRIPT = """#!{python}
# A stand-in for SGLang's console script (0.5.5+): `sglang serve --port N` or `sglang serve
# --config FILE` (its YAML's `port:`) runs the simulated server there.
import re, sys
from gpumon.backends.sim.sglang_server import main
args = sys.argv[1:]
assert args[0] == "serve", args
if "--port" in args:
    port = args[args.index("--port") + 1]
else:
    with open(args[args.index("--config") + 1]) as f:
        port = re.search(r"^port: *(\\d+)", f.read(), re.M).group(1)
sys.exit(main(["--ports", port]))
"""


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_sglang_serve_is_in_the_first_snapshot_without_a_sglang_table(
    sshd: SshServer, tmp_path: Path, client_env: dict[str, str]
) -> None:
    """Issue 23: discovery is on by default, and the first snapshot waits for its round
    and two observations of each server found. One server is started as `sglang serve
    --model-path M --port N`, one as `sglang serve --config server.yaml` (a relative
    path: the process's working directory) with the port in the YAML."""
    by_flag, by_yaml = free_port(), free_port()
    script = tmp_path / "bin" / "sglang"
    script.parent.mkdir()
    script.write_text(SGLANG_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    (tmp_path / "server.yaml").write_text(f"model-path: Qwen/Qwen3-8B\nport: {by_yaml}\n")
    env = {**os.environ, **demo_settings("sglang").to_env()}
    servers = [
        subprocess.Popen(
            [str(script), "serve", *args], cwd=tmp_path, env=env, start_new_session=True
        )
        for args in (
            ["--model-path", "Qwen/Qwen3-8B", "--port", str(by_flag)],
            ["--config", "server.yaml"],
        )
    ]
    cfg = tmp_path / "config.toml"
    cfg.write_text(sshd.config_toml(interval=0.5))  # no [hosts.ct200.sglang] at all
    try:
        deadline = time.monotonic() + 20
        while not (_answers(by_flag) and _answers(by_yaml)):
            assert time.monotonic() < deadline, "the stand-in servers did not start"
            time.sleep(0.05)
        res = subprocess.run(
            [sys.executable, "-m", "gpumon.tui.cli", "--config", str(cfg), "snapshot",
             "ct200", "--json"],
            env=client_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        for proc in servers:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    found = {s["port"]: s for s in data["sglang"]}
    for port in (by_flag, by_yaml):
        assert found[port]["up"] is True, found
        assert found[port]["model"] == "Qwen/Qwen3-8B"
        rate = found[port]["gen_tokens_per_s"]  # two observations: a rate
        assert rate is not None and rate > 0, found[port]
    assert own_incomplete(data["incomplete"], [by_flag, by_yaml]) == [], data["incomplete"]


async def test_a_hung_server_is_sglang_hung_and_a_long_prefill_is_not(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25.1: over the real sshd, the simulated server of GPU 0 hangs (37 running,
    its counters frozen) and is ``sglang_hung`` within ``hung_after_s`` + 10 s; the one
    of GPU 1, in a long prefill from the same moment (decode flat, prefill moving), is
    not; both were seen working first."""
    from gpumon.backends.sim.scenario import HANG_AT

    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    hung_after = 10.0
    ports = [free_port(), free_port()]  # server i is the simulator's server of GPU i
    settings = demo_settings("hang", demo_time=HANG_AT - 4.0)
    hang_at = settings.t0 + HANG_AT  # wall clock
    env = {**os.environ, **settings.to_env()}
    servers = subprocess.Popen(
        [sys.executable, "-m", "gpumon.backends.sim.sglang_server", "--ports",
         ",".join(map(str, ports))],
        env=env, start_new_session=True,
    )  # fmt: skip
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(container=200, interval=0.5)
        + f"[hosts.ct200.sglang]\nports = {ports}\ndiscover = false\n"
        + f"hung_after_s = {hung_after:g}\n"
    )
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()

    def active_message() -> str:
        return " ".join(a.message for a in monitor.alerts.active() if a.kind == "sglang_hung")

    def hung(port: int) -> list[str]:
        return [a.message for a in monitor.alerts.history() if a.key == f"sglang_hung:{port}"]

    try:
        left = hang_at + hung_after + 10.0 - time.time()
        [message] = await until(lambda: hung(ports[0]), left, "sglang_hung on the hung server")
        assert message.startswith(f"sglang :{ports[0]} hung: 37 running, ")
        assert time.time() - hang_at <= hung_after + 10.0
        # the long prefill has stood as long without a decoded token: not hung, and stays so
        await until(lambda: time.time() - hang_at >= hung_after + 12.0, 30, "a while more")
        assert hung(ports[1]) == []
        assert monitor.workloads.sglang[ports[1]].running == 12
        active = [a for a in monitor.alerts.active() if a.kind == "sglang_hung"]
        assert [a.key for a in active] == [f"sglang_hung:{ports[0]}"]
        # the agent asked /health_generate once; the server held it 20 s and said 503
        said = "; /health_generate timed out (503 after 2"
        tracker = monitor.workloads.sglang[ports[0]]
        await until(
            lambda: said in active_message(),
            40,
            lambda: f"the /health_generate answer: {tracker.health} in {active_message()!r}",
        )
    finally:
        await monitor.stop()
        os.killpg(servers.pid, signal.SIGKILL)
        servers.wait()


def test_a_page_over_8_mib_is_an_sglang_error_and_a_stopped_server_is_not(
    sshd: SshServer, tmp_path: Path, client_env: dict[str, str]
) -> None:
    """Issue 28.6: a server answering a 10 MB ``/metrics`` was ``up: false`` and nothing
    else; it is a warning ``sglang_error`` in ``snapshot --json`` and ``check`` (exit 1).
    A port nothing listens on (a stopped server) raises no alert."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    httpd.daemon_threads = True
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    huge, stopped = httpd.server_address[1], free_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(interval=0.5)
        + f"[hosts.ct200.sglang]\nports = {[huge, stopped]}\ndiscover = false\n"
    )

    def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpumon.tui.cli", "--config", str(cfg), *args],
            env=client_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    try:
        snap = gpumon("snapshot", "ct200", "--json")
        check = gpumon("check", "--window", "0", "ct200")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert snap.returncode == 0, snap.stderr
    data = json.loads(snap.stdout)
    servers = {s["port"]: s for s in data["sglang"]}
    assert servers[huge]["up"] is False and servers[stopped]["up"] is False, servers
    said = [(a["kind"], a["severity"], a["message"]) for a in data["alerts"]]
    page = ("sglang_error", "warning", f"sglang :{huge} /metrics page larger than 8 MiB: not read")
    assert page in said, said
    assert [a for a in said if f":{stopped}" in a[2]] == []  # a stopped server is no fault
    assert own_incomplete(data["incomplete"], [huge, stopped]) == [], data["incomplete"]
    assert check.returncode == 1, (check.stdout, check.stderr)
    assert check.stdout.startswith("WARNING") and f"sglang :{huge} /metrics page" in check.stdout


LAUNCHER = """#!{python}
# A stand-in for `python -m sglang.launch_server --port N ...` (its file name holds
# "sglang.launch_server", as discovery looks for it): the simulated server on that port.
import sys
from gpumon.backends.sim.sglang_server import main
args = sys.argv[1:]
sys.exit(main(["--ports", args[args.index("--port") + 1]]))
"""


async def test_a_hung_server_that_is_no_job_is_offered_its_command_line_masked(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36.2: the agent's discovery sends the command line a server was started
    with; its hang's fix says it (to start it again), its ``--api-key`` masked as the
    bundle masks it, beside ``K`` on its scheduler; the key is nowhere in the alert."""
    from gpumon.backends.alerts.incident import incidents
    from gpumon.backends.sim.scenario import HANG_AT

    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    port, key = free_port(), "sk-gpumon-test-0123456789abcdef"
    launcher = tmp_path / "sglang.launch_server.py"
    launcher.write_text(LAUNCHER.format(python=sys.executable))
    argv = [sys.executable, str(launcher), "--model-path", "Qwen/Qwen3-8B", "--port", str(port)]
    env = {**os.environ, **demo_settings("hang", demo_time=HANG_AT - 3.0).to_env()}
    server = subprocess.Popen([*argv, "--api-key", key], env=env, start_new_session=True)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        sshd.config_toml(container=200, interval=0.5) + "[hosts.ct200.sglang]\nhung_after_s = 5\n"
    )  # discovered, not configured
    monitor = make_monitor(resolve_host(load_config(cfg), "ct200"))
    monitor.start()

    def hung() -> list[str]:
        found = incidents(monitor.alerts.active())
        return [f.words for i in found if i.cause.key == f"sglang_hung:{port}" for f in i.fixes]

    try:
        fixes = await until(
            lambda: [f for f in hung() if f.startswith("start it again")],
            90,
            lambda: f"the command line in the fixes: {hung()}",
        )
        line = shlex.join(argv)
        assert fixes == [f"start it again: {line} --api-key ****"]
        [alert] = [a for a in monitor.alerts.active() if a.key == f"sglang_hung:{port}"]
        assert key not in json.dumps(alert.facts.to_json()) and key not in alert.message
        assert alert.job is None
    finally:
        await monitor.stop()
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
