"""``gpumon watch`` against faults of a test sshd host (``sshd_server``), delivering to a
test ``Receiver``: the config, an nvidia-smi in a chosen fault mode on the target, the
watch as a process, and waiting for the events the receiver got. For
tests/integration/test_watch_faults_ssh.py and bench/bench_paging.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from receiver import Receiver
from sshd_server import SshServer

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
FAKE_SMI = Path(__file__).parent / "fake_smi.py"
PAGE_WITHIN_S = 60.0  # issue 28's bar: an incident at the receiver within a minute


def watch_config(rx: Receiver, hosts: str, metrics_port: int, resolve_after_s: float = 0) -> str:
    return f"""{hosts}
[watch]
metrics_port = {metrics_port}
min_open_s = 0
resolve_after_s = {resolve_after_s}

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
    """``gpumon watch`` with the JSON log, as a context manager; ``args``: its hosts and
    options (none: every host of the config)."""

    def __init__(self, cfg: Path, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self.faked = "FAKETIME_TIMESTAMP_FILE" in env  # under libfaketime (``WallClock``)
        self.proc = subprocess.Popen(
            [*GPUMON, "watch", *args, "--config", str(cfg), "--log-format", "json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env=env,
        )

    def __enter__(self) -> Watch:
        return self

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Until ``condition()`` holds; fails with the log's end if the watch exits first."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, f"{what}: {self.log.read_text()[-2000:]}"
            time.sleep(0.3)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a test that stopped it and failed
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.faked:
            WallClock.forget(self.proc.pid)
        if exc_type is None:
            assert_json_lines(self.log)


# libfaketime (Debian's libfaketime; .ci/run installs it), found where the package puts it.
FAKETIME_LIB = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)


class WallClock:
    """The wall clock of a process started with ``env(...)``: libfaketime shifts what
    ``CLOCK_REALTIME`` reads by the offset in a file, read again on every call
    (``FAKETIME_NO_CACHE``), so ``step`` moves it while the process runs, as an NTP step
    or a hand-set clock does. ``CLOCK_MONOTONIC`` is left alone
    (``FAKETIME_DONT_FAKE_MONOTONIC``; libfaketime shifts it too by default), as a real
    step leaves it. libfaketime 0.9.10's README, "Changing settings while a program is
    running" and section 4d (offsets)."""

    def __init__(self, rc: Path) -> None:
        if FAKETIME_LIB is None:
            raise AssertionError("libfaketime is not installed (apt-get install libfaketime)")
        self.rc = rc
        self.step(0)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {
            **env,
            "LD_PRELOAD": str(FAKETIME_LIB),
            "FAKETIME_TIMESTAMP_FILE": str(self.rc),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def step(self, offset_s: float) -> None:
        """The wall clock ``offset_s`` seconds from the real one from now on (written
        whole: a reader never sees a half-written file)."""
        part = self.rc.with_suffix(".part")
        part.write_text(f"{offset_s:+.0f}\n", encoding="ascii")
        os.replace(part, self.rc)

    @staticmethod
    def forget(pid: int) -> None:
        """libfaketime's shared memory of the ended process ``pid``: it is left behind
        when the process is killed, and a later process given the same PID would fail
        on it (its README, "Cleaning up shared memory")."""
        for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
            with contextlib.suppress(OSError):
                (Path("/dev/shm") / name).unlink()


def assert_json_lines(log: Path) -> None:
    """Every line ``watch --log-format json`` wrote on stderr is one JSON object: nothing
    else reaches stderr (a library's warning, a traceback) to break a log shipper."""
    for n, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"watch.log line {n} is not JSON: {line!r}") from None
        assert isinstance(record, dict), f"watch.log line {n} is not an object: {line!r}"


def hook_events(rx: Receiver) -> list[dict[str, Any]]:
    return [ev for r in rx.received("/hook") for ev in r.json()["events"]]


def is_event(event: str, kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda ev: ev["event"] == event and ev["kind"] == kind


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


def wait_agent_up(port: int, log: Path, host: str = "box") -> None:
    """Until the exporter on ``port`` says fresh samples come from ``host``."""
    deadline = time.monotonic() + PAGE_WITHIN_S
    while gauges(port, "gpumon_agent_up", "host").get((host,)) != 1.0:
        if time.monotonic() > deadline:
            raise AssertionError(f"no data from {host}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
