"""Issue 34 point 5 end to end: ``gpumon watch`` over real SSH (sshd on 127.0.0.1) with a
webhook receiver, its own process stopped and its wall clock stepped. A watch SIGSTOPped
for longer than the critical stale threshold paged a false CRITICAL ``stale_data`` within
a second of SIGCONT; a +1 h wall-clock step paged it at once; after a -30 min step an
nvidia-smi hang was not paged for 30 min. Ages are judged on the monotonic clock from
the data's receive time, and time gpumon itself did not run is not the host's silence.

Each test ends with a true hang (nvidia-smi stops answering, ``fake_smi`` ``stall``) and
waits for its page: the hub delivers in order, so a false page made before it would have
reached the receiver first.

A running job on the target (its log written a step every half second, its GPU held by a
process) is judged on the monotonic clock too: a +1 h step paged a false critical
``job_stalled`` at the next sample (its last step read an hour before by the wall clock)
and its derived rate a false ``job_slow``; after a -30 min step its true stall went
unpaged for 30 min. It ends with that stall, paged first and within ``stall_after_s``.

So is an SGLang server (the simulator's, its log followed): after a -30 min step its true
hang went unpaged for 30 min (its last token read "30 min" later by the wall clock)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.backends.monitor import demo_settings
from gpumon.backends.sim.sglang_server import SglangServers

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


def _config(
    sshd: SshServer, rx: Receiver, tmp: Path, port: int, extra: str = ""
) -> tuple[Path, Path]:
    """The watch's config (host ``box``, its nvidia-smi answering until told to hang,
    ``extra`` tables) and its log; the file ``sshd.root / "smi-mode"`` switches the hang
    on."""
    smi = faulty_smi(sshd, "")
    cfg = tmp / "config.toml"
    box = sshd.config_toml("box", nvidia_smi=str(smi)) + ALERTS + extra
    cfg.write_text(watch_config(rx, box, port))
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
    sshd: SshServer, env: dict[str, str], rx: Receiver, tmp: Path, extra: str = ""
) -> Iterator[tuple[WallClock, int, Path]]:
    """A watch whose wall clock the test steps (``WallClock``), once it has data from
    ``box``; its wall clock, metrics port and log."""
    port = free_port()
    cfg, log = _config(sshd, rx, tmp, port, extra)
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


STALL_AFTER_S = 8.0
JOB = f"""
[hosts.box.jobs.train]
gpus = [0]
progress = "kv"
stall_after_s = {STALL_AFTER_S:g}
expect_tokens_per_s = 20000
slow_below = 0.2
slow_for_s = 3
"""


class Job:
    """A running job as its log shows it: a step every half second, 10,000 tokens each
    (20 Ktok/s, as its config expects); its GPU 0 is held by the target's process.
    ``stop()`` is its true stall: no more steps."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.steps = 0
        self.last_at = time.monotonic()
        self._write()  # its first step is in the log before the watch: judged at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job", daemon=True)

    def config(self) -> str:
        return JOB + f'log = "{self.log}"\n'

    def _write(self) -> None:
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"step {self.steps}/100000 | loss 2.3100 | tokens {self.steps * 10000}\n")
        self.last_at = time.monotonic()
        self.steps += 1

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._write()

    def __enter__(self) -> Job:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _read_past(port: int, log: Path, step: int) -> None:
    """Until the exporter says the watch read the job's step ``step`` and knows its rate."""
    deadline = time.monotonic() + PAGE_WITHIN_S
    while True:
        seen = gauges(port, "gpumon_job_step", "job_name").get(("train",), -1)
        rate = gauges(port, "gpumon_job_rate", "job_name", "unit").get(
            ("train", "tokens_per_second")
        )
        if seen >= step and rate:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the job's step {step} not read:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def _the_stall_is_paged_first(rx: Receiver, log: Path, job: Job) -> float:
    """The job's ``job_stalled`` (critical) is the first page the receiver ever got, and
    the only one; returns how long after its last step it was paged."""
    opened, _ = wait_event(rx, log, is_event("open", "job_stalled"))
    took = time.monotonic() - job.last_at
    assert hook_events(rx)[0] == opened, f"a page came before the stall's: {hook_events(rx)}"
    assert opened["severity"] == "critical" and opened["job"] == "train"
    assert [e["kind"] for e in hook_events(rx)] == ["job_stalled"]  # no job_slow
    return took


@contextlib.contextmanager
def _a_running_job(
    sshd: SshServer, env: dict[str, str], rx: Receiver, tmp: Path
) -> Iterator[tuple[Job, WallClock, int, Path]]:
    """The job running, and a watch on a wall clock the test steps that has read its
    first steps and rate; the job, the watch's wall clock, metrics port and log."""
    job = Job(tmp / "train.log")
    with job, _watch_on_a_wall_clock(sshd, env, rx, tmp, job.config()) as (wall, port, log):
        _read_past(port, log, 4)
        yield job, wall, port, log


def test_a_wall_clock_step_forward_pages_no_stall_of_a_running_job(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    with _a_running_job(sshd, client_env, rx, tmp_path) as (job, wall, port, log):
        wall.step(+3600)
        # steps go on: 10 s of them read since (the old code paged job_stalled at the
        # first sample after the step and job_slow 3 s later)
        _read_past(port, log, job.steps + 20)
        assert hook_events(rx) == [], "paged while the job ran"
        job.stop()
        took = _the_stall_is_paged_first(rx, log, job)
        print(f"the job stalled, clock stepped 1 h on before: paged after {took:.1f} s")
        assert took >= STALL_AFTER_S


def test_a_stall_during_a_wall_clock_step_back_is_paged_in_its_usual_time(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    with _a_running_job(sshd, client_env, rx, tmp_path) as (job, wall, _, log):
        job.stop()  # the stall begins
        wall.step(-1800)  # before its page is due
        took = _the_stall_is_paged_first(rx, log, job)
        print(f"the job stalled, clock stepped back 30 min: paged after {took:.1f} s")
        assert STALL_AFTER_S <= took <= STALL_AFTER_S + PAGE_WITHIN_S / 2


HUNG_AFTER_S = 10.0


class Frozen:
    """The simulated SGLang server's clock: the real wall clock until ``freeze()``, then
    still. A server whose clock stands is hung as a real one is: ``/metrics`` answers
    with its counters frozen and its requests still running, its log gets no decode line."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.since = 0.0  # when it froze (monotonic)

    def __call__(self) -> float:
        return time.time() if self.at is None else self.at

    def freeze(self) -> None:
        self.since = time.monotonic()
        self.at = time.time()


def _decoding(port: int, log: Path, server: int) -> None:
    """Until the exporter says the watch knows the server's generation rate (two scrapes
    of its counters read)."""
    deadline = time.monotonic() + PAGE_WITHIN_S
    key = ("box", str(server))
    while not gauges(port, "gpumon_sglang_generation_tokens_per_second", "host", "port").get(key):
        if time.monotonic() > deadline:
            raise AssertionError(f"no rate of :{server} read:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def test_an_sglang_hang_during_a_wall_clock_step_back_is_paged_in_its_usual_time(
    sshd: SshServer, client_env: dict[str, str], rx: Receiver, tmp_path: Path
) -> None:
    server = free_port()
    clock = Frozen()
    logs = tmp_path / "sglang"
    servers = SglangServers(demo_settings("sglang"), [server], log_dir=logs, clock=clock)
    servers.start()
    sglang = (
        f'[hosts.box.sglang]\nports = [{server}]\nlog = "{logs / f"sglang-{server}.log"}"\n'
        f"discover = false\nhung_after_s = {HUNG_AFTER_S:g}\n"
    )
    try:
        with _watch_on_a_wall_clock(sshd, client_env, rx, tmp_path, sglang) as (wall, port, log):
            _decoding(port, log, server)
            clock.freeze()  # the hang begins
            wall.step(-1800)  # before its page is due
            opened, _ = wait_event(rx, log, is_event("open", "sglang_hung"))
            took = time.monotonic() - clock.since
            print(f"SGLang hung, clock stepped back 30 min: paged after {took:.1f} s")
            assert hook_events(rx)[0] == opened, f"a page came before the hang's: {hook_events(rx)}"
            assert opened["severity"] == "critical"
            assert opened["cause"].startswith(f"sglang :{server} hung: ")
            assert took <= HUNG_AFTER_S + PAGE_WITHIN_S / 2
    finally:
        servers.stop()
