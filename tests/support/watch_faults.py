"""``gpumon watch`` against faults of a test sshd host (``sshd_server``), delivering to a
test ``Receiver``: the config, an nvidia-smi in a chosen fault mode on the target, the
watch as a process, and waiting for the events the receiver got. For
tests/integration/test_watch_faults_ssh.py and bench/bench_paging.py."""

from __future__ import annotations

import json
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
        self.proc = subprocess.Popen(
            [*GPUMON, "watch", *args, "--config", str(cfg), "--log-format", "json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env=env,
        )

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if exc_type is None:
            assert_json_lines(self.log)


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
