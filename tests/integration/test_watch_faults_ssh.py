"""Issue 28 points 1, 2 and 4 end to end: ``gpumon watch`` over real SSH (sshd on
127.0.0.1) with a webhook notifier and a live receiver. A host that is down from the
start, comes up, then loses its sshd and every session pages ``host_unreachable`` (warning,
then critical) and resolves each time it is back; a host whose nvidia-smi hangs from the
start pages ``stale_data``; one whose GPU is lost pages a critical ``driver_error`` in the
driver's own words, and ``check`` exits 2 with them. Before, each of the three posted
nothing in 60 s.

Issue 34.9: a host whose sshd goes down and comes back several times within the settle
time is one incident, opened once, updated with its outages, resolved once it has stayed
up that long (it gave an open and a resolve per outage)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_smi import GPU_LOST
from prometheus import free_port
from receiver import Receiver
from sshd_server import SshServer
from watch_faults import (
    GPUMON,
    PAGE_WITHIN_S,
    Watch,
    faulty_config,
    gauges,
    hook_events,
    is_event,
    wait_agent_up,
    wait_event,
    watch_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def gpumon(cfg: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A one-shot gpumon command on ``cfg``, as a user runs it."""
    return subprocess.run(
        [*GPUMON, "--config", str(cfg), *args], capture_output=True, text=True, env=env, timeout=60
    )


def alerts_active(port: int) -> dict[tuple[str, ...], float]:
    return gauges(port, "gpumon_alerts_active", "host", "kind", "severity")


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
        assert opened["summary"] == f"[{opened['severity'].upper()}] box: {opened['headline']}"
        assert opened["headline"].startswith("cannot connect to 127.0.0.1")
        print(f"never reachable: paged after {took:.1f} s")
        sshd.start()  # up: the incident resolves, fresh data follows
        wait_event(rx, log, is_event("resolve", "host_unreachable"))
        assert [alerts_active(port).get(k) for k in unreachable] == [0, 0]
        wait_agent_up(port, log)

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
    check = gpumon(cfg, client_env, "check", "box")
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith(f'CRITICAL box: nvidia-smi: "{GPU_LOST}"')
    snap = gpumon(cfg, client_env, "snapshot", "box", "--json")
    [alert] = json.loads(snap.stdout)["alerts"]
    assert (alert["kind"], alert["severity"]) == ("driver_error", "critical")
    assert alert["message"] == opened["cause"]


def wait_back(port: int, log: Path) -> None:
    """Until the watch on ``port`` has data from ``box`` again and its connection alert
    ended (fresh data alone may come a moment before the alert's end is judged)."""
    deadline = time.monotonic() + PAGE_WITHIN_S
    while True:
        wait_agent_up(port, log)
        active = alerts_active(port)
        if active and not any(v for k, v in active.items() if k[:2] == ("box", "host_unreachable")):
            return
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def outage(n: int) -> Callable[[dict[str, Any]], bool]:
    """The event that says the host's ``n``th outage."""
    return lambda ev: ev["kind"] == "host_unreachable" and ev["episodes"] == n


def test_a_flapping_sshd_is_one_incident_that_counts_its_outages(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    settle = 20.0  # resolve_after_s: longer than the host stays up between outages here
    port = free_port()
    cfg = tmp_path / "config.toml"
    cfg.write_text(watch_config(rx, sshd.config_toml("box"), port, resolve_after_s=settle))
    log = tmp_path / "watch.log"
    outages = 3
    with Watch(cfg, client_env, log):
        wait_agent_up(port, log)
        for n in range(1, outages + 1):
            sshd.kill()  # down: sshd and every session it serves
            posted, took = wait_event(rx, log, outage(n))
            print(f"outage {n}: {posted['event']} posted after {took:.1f} s")
            sshd.start()
            back_at = time.time()  # it cannot be back before its sshd is
            wait_back(port, log)  # the alert ended; the incident waits to settle
        resolved, _ = wait_event(rx, log, is_event("resolve", "host_unreachable"), settle + 60)
    events = [ev for ev in hook_events(rx) if ev["kind"] == "host_unreachable"]
    said = [(ev["event"], ev["episodes"]) for ev in events]
    assert said == [("open", 1), ("update", 2), ("update", 3), ("resolve", 3)], said
    assert {ev["key"] for ev in events} == {"box/gpu-/-/host_unreachable"}
    # resolved once the host had been back ``settle`` (the event's time is to the second)
    assert dt.datetime.fromisoformat(resolved["time"]).timestamp() >= back_at + settle - 1


def test_a_gpu_whose_handle_fails_from_the_start_pages_and_check_is_critical(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    """Issue 34 point 6: nvidia-smi lists GPU 1 as ``Unable to determine the device handle
    for GPU0000:19:00.0: Unknown Error`` from its first round. It was dropped as junk:
    ``check`` said ``OK box: 1 GPUs`` and watch said nothing."""
    cfg, log = faulty_config(sshd, rx, tmp_path, "no_handle:2")
    line = "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error"
    with Watch(cfg, client_env, log):
        opened, took = wait_event(rx, log, is_event("open", "gpu_health"))
        print(f"a GPU unreadable from the start: paged after {took:.1f} s")
        assert opened["severity"] == "critical"
        assert opened["cause"].startswith("GPU 0000:19:00.0 cannot be read: Unknown Error")
        assert line in opened["cause"]
    check = gpumon(cfg, client_env, "check", "box")
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith("CRITICAL box: GPU 0000:19:00.0 cannot be read: Unknown Error")
    assert "(2 GPUs (1 unreadable)" in check.stdout


THREE_DAYS_S = 3 * 86400
OOM_LOG = Path(__file__).parents[1] / "fixtures" / "progress" / "kv_drafter_oom.log"


def old_oom_log(tmp_path: Path) -> tuple[Path, float]:
    """A training log ending in a CUDA OOM traceback, last written 3 days ago."""
    log = tmp_path / "train.log"
    log.write_text(OOM_LOG.read_text(encoding="utf-8"), encoding="utf-8")
    written = time.time() - THREE_DAYS_S
    os.utime(log, (written, written))
    assert log.read_text().rstrip().splitlines()[-1].startswith("torch.OutOfMemoryError")
    return log, written


def test_a_followed_log_that_ended_in_an_oom_3_days_ago_is_history_not_a_page(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    """Issue 34 point 7: it paged CRITICAL 4 s after a fresh watch (opened now) and check
    exited 2. A later live fault pages and resolves: by then a page of the backlog, if
    there were one (from the hub's third sample), has been delivered before it."""
    log, _ = old_oom_log(tmp_path)
    cfg, watch_log = faulty_config(sshd, rx, tmp_path, "")
    cfg.write_text(cfg.read_text().replace("\n[watch]", f'watch_logs = ["{log}"]\n\n[watch]', 1))
    mode = sshd.root / "smi-mode"
    with Watch(cfg, client_env, watch_log):
        mode.write_text("lost", encoding="utf-8")  # a live fault: it pages
        wait_event(rx, watch_log, is_event("open", "driver_error"))
        mode.write_text("gpus:2", encoding="utf-8")
        wait_event(rx, watch_log, is_event("resolve", "driver_error"))
    said = [(ev["event"], ev["kind"]) for ev in hook_events(rx)]
    assert said == [("open", "driver_error"), ("resolve", "driver_error")], hook_events(rx)
    check = gpumon(cfg, client_env, "check", "box")
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("OK box: 2 GPUs")


def test_a_configured_job_down_since_the_oom_its_log_ended_in_is_one_condition_dated_by_it(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    """The exception: the job the log belongs to is configured and still down (no process
    on its GPU 6): one job_crashed condition, opened at the line's time, and check says it
    (exit 2). The log names its GPU: process GPU 1 of CUDA_VISIBLE_DEVICES=5,6,7."""
    log, written = old_oom_log(tmp_path)
    cfg, watch_log = faulty_config(sshd, rx, tmp_path, "gpus:8")
    job = f'\n[hosts.box.jobs.drafter]\ngpus = [5, 6, 7]\nlog = "{log}"\n'
    cfg.write_text(cfg.read_text().replace("\n[watch]", f"{job}\n[watch]", 1))
    with Watch(cfg, client_env, watch_log):
        opened, took = wait_event(rx, watch_log, is_event("open", "job_crashed"))
        print(f"a job down since its log's OOM: paged after {took:.1f} s")
    assert (opened["severity"], opened["job"], opened["gpu"]) == ("critical", "drafter", 6)
    assert opened["headline"].startswith("drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free")
    opened_at = dt.datetime.fromisoformat(opened["opened_at"]).timestamp()
    assert abs(opened_at - written) < 2  # the line's time (its file's), not now
    assert [ev["kind"] for ev in hook_events(rx)] == ["job_crashed"]  # the OOM itself: history
    check = gpumon(cfg, client_env, "check", "box")
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith("CRITICAL box: drafter: CUDA OOM on GPU 6 (tried 2.00 GiB")
