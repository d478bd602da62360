"""Issue 34 point 5 end to end: ``gpumon watch`` over real SSH (sshd on 127.0.0.1) with a
webhook receiver, its own process stopped and its wall clock stepped. A watch SIGSTOPped
for longer than the critical stale threshold paged a false CRITICAL ``stale_data`` within
a second of SIGCONT; a +1 h wall-clock step paged it at once; after a -30 min step an
nvidia-smi hang was not paged for 30 min. Ages are judged on the monotonic clock from
the data's receive time, and time gpumon itself did not run is not the host's silence.

Each test ends with a true hang (nvidia-smi stops answering, ``fake_smi`` ``stall``) and
waits for its page: the hub delivers in order, so a false page made before it would have
reached the receiver first."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prometheus import free_port
from receiver import Receiver
from sshd_server import SshServer, descendants
from watch_faults import (
    PAGE_WITHIN_S,
    WallClock,
    Watch,
    faulty_smi,
    gauges,
    hook_events,
    is_event,
    wait_agent_up,
    wait_event,
    watch_config,
)

pytestmark = pytest.mark.integration

# A short critical threshold keeps the stop short: 10 intervals of 1 s (its floor).
ALERTS = "[hosts.box.alerts]\nstale_warning_intervals = 5\nstale_critical_intervals = 10\n"
STOPPED_S = 12.0  # longer than the critical threshold


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def _config(sshd: SshServer, rx: Receiver, tmp: Path, port: int) -> tuple[Path, Path]:
    """The watch's config (host ``box``, its nvidia-smi answering until told to hang)
    and its log; the file ``sshd.root / "smi-mode"`` switches the hang on."""
    smi = faulty_smi(sshd, "")
    cfg = tmp / "config.toml"
    cfg.write_text(watch_config(rx, sshd.config_toml("box", nvidia_smi=str(smi)) + ALERTS, port))
    return cfg, tmp / "watch.log"


def _fresh_sample(port: int, log: Path) -> None:
    """Until the exporter says the newest sample is under a second old: the watch is
    running and has taken a sample since whatever came before."""
    deadline = time.monotonic() + PAGE_WITHIN_S
    while not 0 <= gauges(port, "gpumon_sample_age_seconds", "host").get(("box",), -1) < 1.0:
        if time.monotonic() > deadline:
            raise AssertionError(f"no fresh sample from box:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def _agent(sshd: SshServer) -> int:
    """The PID of gpumon's agent on the target (its argv names it: ``gpumon-agent``)."""
    assert sshd.proc is not None
    for pid in descendants(sshd.proc.pid):
        with contextlib.suppress(OSError):
            if b"gpumon-agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError("no agent runs on the target")


def _the_hang_is_paged_first(sshd: SshServer, rx: Receiver, log: Path) -> None:
    """nvidia-smi hangs now: its ``stale_data`` warning is the first page the receiver
    ever got (no false page came before it)."""
    assert hook_events(rx) == [], "paged before the hang"
    (sshd.root / "smi-mode").write_text("stall", encoding="utf-8")
    opened, took = wait_event(rx, log, is_event("open", "stale_data"))
    print(f"nvidia-smi hung: paged after {took:.1f} s")
    assert hook_events(rx)[0] == opened, "a page came before the hang's"
    assert opened["severity"] == "warning" and opened["cause"].startswith("no GPU data for")


def test_a_watch_stopped_longer_than_the_critical_threshold_pages_nothing_on_resuming(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    port = free_port()
    cfg, log = _config(sshd, rx, tmp_path, port)
    with Watch(cfg, client_env, log) as watch:
        wait_agent_up(port, log)
        # The agent is held with the watch and let go once the watch runs again (it has
        # answered a scrape), so the host's next round comes after the watch's first
        # judgement, as it does where the link buffered nothing. With the rounds
        # buffered the false page raced them: 3 of 5 runs before the fix.
        agent = _agent(sshd)
        os.kill(agent, signal.SIGSTOP)
        watch.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STOPPED_S)  # the fault itself: gpumon not running for this long
            watch.proc.send_signal(signal.SIGCONT)
            assert gauges(port, "gpumon_agent_up", "host"), "the watch does not answer"
        finally:
            os.kill(agent, signal.SIGCONT)
        _fresh_sample(port, log)
        _the_hang_is_paged_first(sshd, rx, log)


@contextlib.contextmanager
def _watch_on_a_wall_clock(
    sshd: SshServer, env: dict[str, str], rx: Receiver, tmp: Path
) -> Iterator[tuple[WallClock, int, Path]]:
    """A watch whose wall clock the test steps (``WallClock``), once it has data from
    ``box``; its wall clock, metrics port and log."""
    port = free_port()
    cfg, log = _config(sshd, rx, tmp, port)
    wall = WallClock(tmp / "faketime.rc")
    with Watch(cfg, wall.env(env), log):
        wait_agent_up(port, log)
        yield wall, port, log


def test_a_wall_clock_step_forward_pages_nothing(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    with _watch_on_a_wall_clock(sshd, client_env, rx, tmp_path) as (wall, port, log):
        wall.step(+3600)
        _fresh_sample(port, log)
        _the_hang_is_paged_first(sshd, rx, log)


def test_a_hang_during_a_wall_clock_step_back_is_paged_in_its_usual_time(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    with _watch_on_a_wall_clock(sshd, client_env, rx, tmp_path) as (wall, _, log):
        assert hook_events(rx) == []
        (sshd.root / "smi-mode").write_text("stall", encoding="utf-8")
        wall.step(-1800)  # while nvidia-smi hangs, before its page is due
        opened, took = wait_event(rx, log, is_event("open", "stale_data"))
        print(f"nvidia-smi hung, clock stepped back 30 min: paged after {took:.1f} s")
        assert opened["severity"] == "warning" and opened["cause"].startswith("no GPU data for")
        update, _ = wait_event(rx, log, is_event("update", "stale_data"))
        assert update["severity"] == "critical"  # and the escalation too, 10 s in
        assert [(e["event"], e["kind"]) for e in hook_events(rx)] == [
            ("open", "stale_data"),
            ("update", "stale_data"),
        ]
