"""Issue 28 points 1, 2 and 4 end to end: ``gpumon watch`` over real SSH (sshd on
127.0.0.1) with a webhook notifier and a live receiver. A host that is down from the
start, comes up, then loses its sshd and every session pages ``host_unreachable`` (warning,
then critical) and resolves each time it is back; a host whose nvidia-smi hangs from the
start pages ``stale_data``; one whose GPU is lost pages a critical ``driver_error`` in the
driver's own words, and ``check`` exits 2 with them. Before, each of the three posted
nothing in 60 s."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_smi import GPU_LOST
from prometheus_client.parser import text_string_to_metric_families

from prometheus import free_port
from receiver import Receiver
from sshd_server import SshServer

pytestmark = pytest.mark.integration

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"
PAGE_WITHIN_S = 60.0  # the bar: an incident at the receiver within a minute


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def watch_config(rx: Receiver, hosts: str, metrics_port: int) -> str:
    return f"""{hosts}
[watch]
metrics_port = {metrics_port}
min_open_s = 0

[notify.hook]
kind = "webhook"
url = "{rx.url("/hook")}"
group_s = 0
"""


def faulty_smi(sshd: SshServer, mode: str) -> Path:
    """An nvidia-smi on the target that answers as tests/support/fake_smi.py does in
    fault ``mode`` (``stall``, ``lost``), read from a file the test can change."""
    mode_file = sshd.root / "smi-mode"
    mode_file.write_text(mode, encoding="utf-8")
    script = sshd.bin / "nvidia-smi-faulty"
    script.write_text(
        f'#!/bin/sh\nFAKE_SMI_MODE="{mode_file}" exec "{sys.executable}" "{FAKE_SMI}" "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def faulty_config(sshd: SshServer, rx: Receiver, tmp: Path, mode: str) -> tuple[Path, Path]:
    """A config whose host ``box`` has nvidia-smi in fault ``mode``; and the log's path."""
    smi = faulty_smi(sshd, mode)
    cfg = tmp / "config.toml"
    cfg.write_text(watch_config(rx, sshd.config_toml("box", nvidia_smi=str(smi)), 0))
    return cfg, tmp / "watch.log"


class Watch:
    def __init__(self, cfg: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [*GPUMON, "watch", "--config", str(cfg), "--log-format", "json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env=env,
        )

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hook_events(rx: Receiver) -> list[dict[str, Any]]:
    return [ev for r in rx.received("/hook") for ev in r.json()["events"]]


def wait_event(
    rx: Receiver,
    log: Path,
    pred: Callable[[dict[str, Any]], bool],
    timeout: float = PAGE_WITHIN_S,
    since: int = 0,
) -> tuple[dict[str, Any], float]:
    """The first event posted to the receiver (from its ``since``-th on) that ``pred``
    accepts, and how long the wait took."""
    start = time.monotonic()
    while True:
        found = [ev for ev in hook_events(rx)[since:] if pred(ev)]
        if found:
            return found[0], time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(
                f"no such event in {timeout:g} s; posted: {json.dumps(hook_events(rx))}\n"
                f"watch log:\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.2)


def gauges(port: int, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The exporter's ``name`` samples by ``labels``; empty while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return {
        tuple(s.labels[label] for label in labels): s.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for s in family.samples
    }


def alerts_active(port: int) -> dict[tuple[str, ...], float]:
    return gauges(port, "gpumon_alerts_active", "host", "kind", "severity")


def wait_data(port: int, log: Path) -> None:
    deadline = time.monotonic() + PAGE_WITHIN_S
    while gauges(port, "gpumon_agent_up", "host").get(("box",)) != 1.0:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def is_event(event: str, kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda ev: ev["event"] == event and ev["kind"] == kind


def test_a_host_down_from_the_start_or_whose_sshd_dies_pages_and_resolves(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    sshd.kill()  # down from the start: nothing listens on its port
    port = free_port()
    cfg = tmp_path / "config.toml"
    hosts = sshd.config_toml("box") + "[hosts.box.alerts]\nunreachable_critical_s = 12\n"
    cfg.write_text(watch_config(rx, hosts, port))
    log = tmp_path / "watch.log"
    unreachable = [("box", "host_unreachable", level) for level in ("warning", "critical")]
    with Watch(cfg, client_env, log):
        opened, took = wait_event(rx, log, is_event("open", "host_unreachable"))
        assert opened["key"] == "box/gpu-/-/host_unreachable"
        assert "connection refused" in opened["cause"] and "unreachable for" in opened["cause"]
        assert opened["summary"].startswith(f"[{opened['severity'].upper()}] host_unreachable")
        print(f"never reachable: paged after {took:.1f} s")
        sshd.start()  # up: the incident resolves, fresh data follows
        wait_event(rx, log, is_event("resolve", "host_unreachable"))
        assert [alerts_active(port).get(k) for k in unreachable] == [0, 0]
        wait_data(port, log)

        before = len(hook_events(rx))
        sshd.kill()  # sshd and every session it serves die mid-stream
        down = time.monotonic()
        opened, took = wait_event(rx, log, is_event("open", "host_unreachable"), since=before)
        assert opened["severity"] == "warning" and "connection refused" in opened["cause"]
        print(f"sshd killed: warning paged after {took:.1f} s")
        assert alerts_active(port)[unreachable[0]] == 1
        update, _ = wait_event(rx, log, is_event("update", "host_unreachable"), since=before)
        assert (update["key"], update["severity"]) == (opened["key"], "critical")
        assert time.monotonic() - down >= 11  # unreachable_critical_s, from the last data
        assert alerts_active(port)[unreachable[1]] == 1
        sshd.start()
        wait_event(rx, log, is_event("resolve", "host_unreachable"), since=before)
    changes = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    said = [(c["event"], c["kind"]) for c in changes if "event" in c]
    assert said.count(("open", "host_unreachable")) == 2  # the log says what was posted


def test_a_host_whose_nvidia_smi_hangs_from_the_start_pages_stale_data(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    cfg, log = faulty_config(sshd, rx, tmp_path, "stall")
    with Watch(cfg, client_env, log):
        opened, took = wait_event(rx, log, is_event("open", "stale_data"))
        print(f"nvidia-smi hanging from the start: paged after {took:.1f} s")
        assert opened["key"] == "box/gpu-/-/stale_data"
        assert opened["cause"].startswith("no GPU data for")


def test_a_lost_gpu_pages_a_critical_driver_error_in_the_drivers_words(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    cfg, log = faulty_config(sshd, rx, tmp_path, "lost")
    with Watch(cfg, client_env, log):
        opened, took = wait_event(rx, log, is_event("open", "driver_error"))
        print(f"GPU lost from the start: paged after {took:.1f} s")
        assert opened["severity"] == "critical"
        assert opened["cause"].startswith(f'nvidia-smi: "{GPU_LOST}" (exit 15)')
        assert "reboot the host" in opened["cause"]
        assert not any(ev["kind"] == "stale_data" for ev in hook_events(rx))
    run = [*GPUMON, "--config", str(cfg)]
    check = subprocess.run(
        [*run, "check", "box", "--timeout", "8"], capture_output=True, text=True,
        env=client_env, timeout=60,
    )  # fmt: skip
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith(f'CRITICAL box: nvidia-smi: "{GPU_LOST}"')
    snap = subprocess.run(
        [*run, "snapshot", "box", "--json", "--timeout", "8"], capture_output=True, text=True,
        env=client_env, timeout=60,
    )  # fmt: skip
    [alert] = json.loads(snap.stdout)["alerts"]
    assert (alert["kind"], alert["severity"]) == ("driver_error", "critical")
    assert alert["message"] == opened["cause"]
