"""gpumon against a real sshd on 127.0.0.1: container wrapping, agent, fallback,
host keys, auth, a server dying mid-stream, and nothing left behind after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.backends.config import load_config, resolve_host
from gpumon.backends.model import ConnState, Health, Source
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.remote import program_tag

from sshd_server import SshServer, free_port, processes_matching
from waiting import until

pytestmark = pytest.mark.integration

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]


def gpumon(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUMON, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_snapshot_through_container_uses_agent(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, sshd.config_toml(container=200))
    res = gpumon(["--config", str(cfg), "snapshot", "ct200", "--json"], client_env)
    assert res.returncode == 0, res.stderr
    # A fresh interpreter says nothing on stderr over SSH: no library warning (asyncssh
    # with cryptography 51 printed ten DSA deprecation lines on every import).
    assert res.stderr == ""
    data = json.loads(res.stdout)
    assert data["host"] == "ct200"
    assert data["source"] == Source.AGENT_SMI.value
    assert data["error"] is None
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    gpu6 = data["gpus"][6]
    assert gpu6["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpu6["memory_total_mib"] == 97887
    assert 0 < gpu6["memory_used_mib"] <= 97887
    assert gpu6["processes"], "the drafter process on GPU 6 is listed"
    # Every remote command went through `pct exec 200 --`.
    calls = sshd.pct_log.read_text().split()
    assert calls and set(calls) == {"200"}


def test_no_python_falls_back_to_direct_nvidia_smi(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, sshd.config_toml(python="/nonexistent/python3"))
    res = gpumon(["--config", str(cfg), "snapshot", "ct200", "--json"], client_env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["source"] == Source.SMI_DIRECT.value
    assert len(data["gpus"]) == 8
    assert all(g["memory_total_mib"] == 97887 for g in data["gpus"])


def test_check_reports_ok_summary(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, sshd.config_toml(container=200))
    # One sample (--window 0): the simulator's GPU 6 is ramping towards its OOM, which a
    # watching window rightly reports as a time-to-full warning (tests/system/test_check_snapshot).
    res = gpumon(["--config", str(cfg), "check", "ct200", "--window", "0"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr == ""
    assert res.stdout.startswith("OK ct200: 8 GPUs")
    assert len(res.stdout.strip().splitlines()) == 1


def test_unknown_host_key_refused_then_accept_new_records_it(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    sshd.known_hosts.write_text("")
    cfg = write_config(tmp_path, sshd.config_toml())
    res = gpumon(["--config", str(cfg), "check", "ct200"], client_env)
    assert res.returncode == 3
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", str(sshd.root / "host_key.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    assert "unknown host key" in res.stdout
    assert fingerprint in res.stdout  # SHA256:... as ssh-keygen prints it
    assert "accept_new" in res.stdout and "ssh-keyscan -p" in res.stdout
    assert sshd.known_hosts.read_text() == ""  # refusing records nothing

    cfg = write_config(tmp_path, sshd.config_toml(accept_new=True))
    res = gpumon(["--config", str(cfg), "check", "ct200", "--window", "0"], client_env)
    assert res.returncode == 0, res.stdout
    assert sshd.host_key_pub in sshd.known_hosts.read_text()

    # Recorded: now trusted without accept_new.
    cfg = write_config(tmp_path, sshd.config_toml())
    res = gpumon(["--config", str(cfg), "check", "ct200", "--window", "0"], client_env)
    assert res.returncode == 0, res.stdout + res.stderr


def test_changed_host_key_is_refused_even_with_accept_new(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    other = (sshd.root / "other_key.pub").read_text().split()[1]
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 {other}\n")
    cfg = write_config(tmp_path, sshd.config_toml(accept_new=True))
    res = gpumon(["--config", str(cfg), "check", "ct200"], client_env)
    assert res.returncode == 3
    assert "HOST KEY CHANGED" in res.stdout
    assert sshd.host_key_pub not in sshd.known_hosts.read_text()


def test_auth_refused_is_unknown_with_reason(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    text = sshd.config_toml().replace(str(sshd.client_key), str(sshd.root / "other_key"))
    cfg = write_config(tmp_path, text)
    res = gpumon(["--config", str(cfg), "check", "ct200"], client_env)
    assert res.returncode == 3
    assert res.stdout.startswith("UNKNOWN ct200: authentication refused")


def test_unreachable_host_is_unknown(client_env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    res = gpumon(["check", f"root@127.0.0.1:{port}"], client_env)
    assert res.returncode == 3
    assert "cannot connect" in res.stdout


def test_shell_metacharacters_in_paths_stay_literal(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    # The interpreter's path goes into the SSH command line (nvidia_smi is refused with
    # such characters at config check: it is a path, not a command line).
    odd = sshd.root / "bin dir; touch pwned $(id)"
    odd.mkdir()
    (odd / "python3").symlink_to(Path(sys.executable).resolve())
    cfg = write_config(tmp_path, sshd.config_toml(container=200, python=str(odd / "python3")))
    res = gpumon(["--config", str(cfg), "snapshot", "ct200", "--json"], client_env)
    assert res.returncode == 0, res.stderr
    snapshot = json.loads(res.stdout)
    assert len(snapshot["gpus"]) == 8
    assert snapshot["source"].startswith("agent/")  # the agent ran on that interpreter
    assert not list(Path("/").glob("pwned*")) and not (Path.home() / "pwned").exists()


async def test_server_killed_mid_stream_marks_stale_then_recovers(
    sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_SSH_CONFIG", "")
    cfg = write_config(tmp_path, sshd.config_toml(container=200, interval=0.2))
    host = resolve_host(load_config(cfg), "ct200")
    monitor = make_monitor(host)
    monitor.start()
    try:
        await until(lambda: monitor.samples >= 3, 20, "first samples")
        assert _state(monitor) == ConnState.CONNECTED
        before = monitor.latest
        assert before is not None
        sshd.kill()
        await until(lambda: _state(monitor) is ConnState.RECONNECTING, 20, "drop noticed")
        assert monitor.status.error
        # the last values stay on screen (a round already on its way when sshd died may
        # still land: never older ones, never none)...
        kept = monitor.latest
        assert kept is not None and kept.time >= before.time
        await until(lambda: monitor.is_stale(), 10, "stale")
        assert monitor.latest is kept  # nothing came, nothing was cleared while down
        age = monitor.stale_s()
        assert age is not None and age > 0.6  # ...marked stale, with their age
        sshd.start()
        count = monitor.samples
        await until(lambda: monitor.samples > count + 2, 60, "recovery")
        assert _state(monitor) == ConnState.CONNECTED
        assert monitor.status.error is None
        assert not monitor.is_stale()
    finally:
        await monitor.stop()


@pytest.mark.parametrize("python", ["python3", "/nonexistent/python3"], ids=["agent", "direct"])
def test_nothing_left_on_target_after_sigkill(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path, python: str
) -> None:
    cfg = write_config(tmp_path, sshd.config_toml(container=200, interval=0.5, python=python))
    script = (
        "import asyncio, sys\n"
        "from gpumon.backends.config.load import load_config, resolve_host\n"
        "from gpumon.backends.monitor.compose import make_monitor\n"
        "async def main():\n"
        f"    m = make_monitor(resolve_host(load_config({str(cfg)!r}), 'ct200'))\n"
        "    m.start()\n"
        "    while m.samples < 2: await asyncio.sleep(0.05)\n"
        "    print('streaming', flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    client = subprocess.Popen(
        [sys.executable, "-c", script], env=client_env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "streaming"
        marker = str(sshd.bin)  # on the session PATH of everything this sshd runs
        running = " ".join(cmd for _, cmd in processes_matching(marker))
        assert "gpumon.backends.sim.smi" in running, "nvidia-smi runs in loop mode"
        if python == "python3":
            assert program_tag("agent") in running, "inside the agent"
        started = time.monotonic()
        client.send_signal(signal.SIGKILL)
        client.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and processes_matching(marker):
            time.sleep(0.1)
        assert processes_matching(marker) == []
        print(f"target clean {time.monotonic() - started:.2f} s after SIGKILL")
    finally:
        if client.poll() is None:
            client.kill()


def _state(monitor: HostMonitor) -> ConnState:
    """Read afresh (the state changes under awaits; mypy would keep it narrowed)."""
    return monitor.status.state


def test_gpu_lost_fault_is_critical(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    from gpumon.backends.monitor import demo_settings
    from gpumon.backends.sim import SimSettings, write_wrapper

    settings: SimSettings = demo_settings(demo_time=10.0)
    faulty = sshd.root / "faulty"
    faulty.mkdir()
    from dataclasses import replace

    write_wrapper(faulty, replace(settings, fault="gpu_lost:4"))
    cfg = write_config(tmp_path, sshd.config_toml(nvidia_smi=str(faulty / "nvidia-smi")))
    res = gpumon(["--config", str(cfg), "check", "ct200"], client_env)
    assert res.returncode == 2, res.stdout
    assert "GPU 4" in res.stdout and "lost" in res.stdout
    snap = json.loads(
        gpumon(["--config", str(cfg), "snapshot", "ct200", "--json"], client_env).stdout
    )
    assert snap["gpus"][4]["health"] == Health.CRITICAL.value
    assert snap["gpus"][4]["memory_used_mib"] is None  # not reported: null, never 0


def test_driver_failure_is_critical_and_quotes_the_tool(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    from dataclasses import replace

    from gpumon.backends.monitor import demo_settings
    from gpumon.backends.sim import write_wrapper

    faulty = sshd.root / "faulty"
    faulty.mkdir()
    write_wrapper(faulty, replace(demo_settings(), fault="version_mismatch"))
    cfg = write_config(tmp_path, sshd.config_toml(nvidia_smi=str(faulty / "nvidia-smi")))
    res, took = _timed_check(cfg, client_env)
    # The driver's own verdict: CRITICAL in its words (issue 28), no longer UNKNOWN.
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout.startswith("CRITICAL ct200: nvidia-smi:")
    assert "Driver/library version mismatch" in res.stdout
    # No retry can end it: said when the agent said it, not after --timeout (issue 33.3).
    assert took < CHECK_TIMEOUT_S / 2, f"{took:.1f} s"


def test_a_target_without_nvidia_smi_is_unknown_with_the_reason_at_once(
    sshd: SshServer, client_env: dict[str, str], tmp_path: Path
) -> None:
    missing = sshd.root / "no-driver" / "nvidia-smi"
    cfg = write_config(tmp_path, sshd.config_toml(nvidia_smi=str(missing)))
    res, took = _timed_check(cfg, client_env)
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.startswith(
        f'UNKNOWN ct200: nvidia-smi: "{missing}: No such file or directory" (exit 127). '
        "The nvidia-smi command is missing, or not on PATH, on the target"
    ), res.stdout
    assert took < CHECK_TIMEOUT_S / 2, f"{took:.1f} s"


CHECK_TIMEOUT_S = 40  # check's --timeout: what a one-shot waited out before issue 33.3


def _timed_check(cfg: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """``check ct200`` and how long it took, in seconds."""
    started = time.monotonic()
    args = ["--config", str(cfg), "check", "ct200", "--timeout", str(CHECK_TIMEOUT_S)]
    res = gpumon(args, env, timeout=3 * CHECK_TIMEOUT_S)
    return res, time.monotonic() - started


def test_a_session_does_not_read_the_accounts_bashrc(sshd: SshServer) -> None:
    """bash reads ~/.bashrc for an sshd command only at level 1 (SHLVL unset or 0): the
    test server's sessions start at level 2 in bash, so this machine's ~/.bashrc (pyenv
    init, whose rehash waits 60 s on a lock a killed session left) never runs before
    gpumon's command. A shell that is not bash reads no ~/.bashrc and keeps level 1."""
    user = "root" if os.geteuid() == 0 else os.environ["USER"]
    out = subprocess.run(
        ["ssh", "-p", str(sshd.port), "-i", str(sshd.client_key), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={sshd.known_hosts}", "-o", "ConnectTimeout=5",
         f"{user}@127.0.0.1", 'echo "${BASH_VERSION}:${SHLVL}"'],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    bash, level = out.stdout.strip().split(":")
    assert level == ("2" if bash else "1"), out.stdout
