"""``gpumon watch`` as a process, delivering to a test receiver on 127.0.0.1 that stands in
for PagerDuty, ntfy, Slack and a webhook: every body matches the documented schema; the
receiver goes down, the watch is restarted mid-outage, and when the receiver is back every
open and resolve arrives once, in order. Also: SIGHUP reloads the notifiers, SIGTERM exits
0, ``gpumon notify test`` and ``gpumon notify status``.

The demo's clock is held at scenario time 30 s, before CT 201's jupyter comes at 32 s,
until the watch's exporter says the drafter's step (its log read): every alert knows the
drafter's GPUs (one incident). Then it runs 4x with the drafter's auto-restart on: the OOM
comes 7.5 s after the release, a live crash that the auto-restart follows; the automatic
restart (10 s backoff, 3 s verify) waits for the jupyter, the OOM's cause still on GPU 6,
until the test stops it as the fix's first step says (the dashboard's K), then refills the
drafter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from demo_holder import stop_the_holder
from held_demo import HeldDemo, exporter_read_drafter
from notify_schema import check_ntfy, check_pagerduty, check_signature, check_slack, check_webhook
from pagers import PagerDutyService
from prometheus import free_port
from receiver import Receiver

pytestmark = pytest.mark.system

GPUMON = [sys.executable, "-m", "gpumon.tui.cli"]
SECRET = "hook-secret"
PD_KEY = "R0UT1NGKEY"


def config(rx: Receiver, extra: str = "") -> str:
    return f"""
[watch]
metrics_port = 0
min_open_s = 0
resolve_after_s = 0
retry_first_s = 0.2
retry_max_s = 1

[notify.pd]
kind = "pagerduty"
url = "{rx.url("/pd")}"
routing_key_env = "TEST_PD_KEY"
min_severity = "critical"
group_s = 1

[notify.phone]
kind = "ntfy"
url = "{rx.url("/ntfy")}"
group_s = 1

[notify.chat]
kind = "slack"
url = "{rx.url("/slack")}"
group_s = 1

[notify.hook]
kind = "webhook"
url = "{rx.url("/hook")}"
secret_env = "TEST_HOOK_SECRET"
group_s = 1
{extra}"""


class Watch:
    def __init__(self, cfg: Path, log: Path, *demo: str, tmp: Path | None = None) -> None:
        env = {**os.environ, "TEST_PD_KEY": PD_KEY, "TEST_HOOK_SECRET": SECRET}
        if tmp is not None:  # the demo machine's folder, for its kill
            env["TMPDIR"] = str(tmp)
        self.log = log
        self.proc = subprocess.Popen(
            [*GPUMON, "watch", "demo", "--config", str(cfg), "--log-format", "json", *demo],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env=env,
        )

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.startswith("{")]

    def changes(self) -> list[dict[str, Any]]:
        return [x for x in self.lines() if "event" in x]

    def wait_log(self, pred: Any, timeout: float) -> None:
        self.wait(lambda: any(pred(x) for x in self.lines()), timeout)

    def wait(self, condition: Callable[[], bool], timeout: float) -> None:
        """Until ``condition()`` holds; fails with the log's end if the watch exits first."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.2)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def status(cfg: Path) -> dict[str, Any]:
    out = subprocess.run(
        [*GPUMON, "notify", "status", "--json", "--config", str(cfg)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout))


def pending(cfg: Path) -> int:
    return sum(n.get("pending", 0) for n in status(cfg)["notifiers"])


def test_every_message_arrives_once_in_order_across_an_outage_and_a_restart(
    rx: Receiver, tmp_path: Path
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(rx))
    log = tmp_path / "watch.log"
    held, port = HeldDemo(tmp_path), free_port()
    demo = ("--demo-time", "30", "--demo-speed", "4", "--demo-auto-restart", *held.args)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    first = Watch(cfg, log, *demo, "--metrics-port", str(port), tmp=tmp)
    try:
        first.wait(lambda: exporter_read_drafter(port), 60)
        held.release()
        # The OOM (its memory warning opened the incident, or the OOM itself); the first
        # message of each notifier goes out at once.
        first.wait_log(
            lambda x: x.get("event") in ("open", "update") and x["kind"] == "cuda_oom", 60
        )
        rx.wait_for(1, "/pd")
        rx.stop()  # the receiver goes down: the resolves wait in the outbox
        # The restart waits for the jupyter, the OOM's cause (the drafter needs more than
        # it leaves): it is stopped as the fix's first step says, and the restart goes on.
        first.wait_log(lambda x: str(x.get("action")).startswith("auto-restart 1/3 due"), 60)
        stop_the_holder(tmp)
        first.wait_log(lambda x: x.get("action") == "auto-restart succeeded", 90)
        first.wait_log(lambda x: x.get("event") == "resolve" and x["kind"] == "cuda_oom", 90)
        deadline = time.monotonic() + 30
        while not status(cfg)["notifiers"] or not any(
            n.get("last_error") for n in status(cfg)["notifiers"]
        ):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        before = status(cfg)
        assert before["watch_running"] and pending(cfg) > 0
        assert first.stop() == 0  # SIGTERM mid-outage: a clean exit, the outbox kept
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    changes = first.changes()
    opened = [c["key"] for c in changes if c["event"] == "open"]
    resolved = [c["key"] for c in changes if c["event"] == "resolve"]
    assert set(resolved) <= set(opened)
    # One failure, one incident: the memory warning, the CT 201 holder, torch's OOM line
    # and the memory drop are opened once, under one key, and resolved once.
    drafter = [c for c in changes if c["job"] == "drafter"]
    [oom_key] = {c["key"] for c in drafter}
    assert [c["event"] for c in drafter].count("open") == 1 and drafter[0]["event"] == "open"
    assert [c["event"] for c in drafter].count("resolve") == 1
    assert drafter[-1]["event"] == "resolve" and drafter[-1]["count"] >= 2
    oom_resolve = next(c for c in changes if c["event"] == "resolve" and c["kind"] == "cuda_oom")
    assert oom_resolve["resolved_by"] == "auto-restart"
    assert oom_resolve["action"] == "auto-restart succeeded"
    # The restart is said when it ended: an update with when, the new PID, how long.
    [restarted] = [
        c for c in changes if c["event"] == "update" and c["action"] == "auto-restart succeeded"
        and c["kind"] == "cuda_oom"
    ]  # fmt: skip
    assert restarted["time"] == restarted["action_at"] and restarted["pid"] > 0
    assert 0 < restarted["took_s"] < 60 and restarted["headline"].startswith("drafter: CUDA OOM")
    assert restarted["attachments"] == [restarted["recording"]]
    assert first.lines()[-1]["message"] == "stopped: SIGTERM"
    left = pending(cfg)
    assert left > 0 and not status(cfg)["watch_running"]

    # A new watch (the demo far from its OOM: no new alerts) resumes the outbox; the
    # receiver comes back on the same port.
    second = Watch(cfg, log, "--demo-time", "0")
    try:
        time.sleep(1.0)
        rx.start()
        deadline = time.monotonic() + 60
        while pending(cfg):
            assert time.monotonic() < deadline, status(cfg)
            time.sleep(0.3)
        assert second.stop() == 0
    finally:
        if second.proc.poll() is None:
            second.proc.kill()

    # Everything, once, in order, per receiver; every body as documented.
    hook_events = []
    for r in rx.received("/hook"):
        check_signature(r.body, r.headers, SECRET)
        hook_events += check_webhook(r.json())
    assert [(e["event"], e["key"]) for e in hook_events] == [
        (c["event"], c["key"]) for c in changes
    ]
    # PagerDuty (tests/support/pagers.py): an alert per critical incident, each resolved
    # in the end (a resolve that overtook its trigger would leave one open); the failure
    # is one alert, titled with the OOM's headline (it used to get three).
    pd = PagerDutyService(PD_KEY)
    for r in rx.received("/pd"):
        check_pagerduty(r.json(), PD_KEY)
        pd.apply(r.json())
    assert pd.showing() == []
    paged = {a.dedup_key.partition("#")[0] for a in pd.alerts}
    assert paged == {c["key"] for c in changes if c["severity"] == "critical"}  # min_severity
    [paged_oom] = [a for a in pd.alerts if a.dedup_key.startswith(oom_key)]
    assert paged_oom.title.startswith("[CRITICAL] demo: drafter: CUDA OOM on GPU 6")
    for r in rx.received("/slack"):
        check_slack(r.json())
    for r in rx.received("/ntfy"):
        check_ntfy(r.headers, r.body)
    slack_text = "\n".join(r.body.decode() for r in rx.received("/slack"))
    ntfy_text = "\n".join(r.headers["Title"] + r.body.decode() for r in rx.received("/ntfy"))
    headline = (
        "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 "
        "jupyter-lab)"
    )
    # the holder was stopped before the restart could go on: the resolve says the OOM alone
    bare = "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free)"
    for text in (slack_text, ntfy_text):  # the headline, not torch's raw line, leads
        assert f"] demo: {headline}" in text and text.count(f"[RESOLVED] demo: {bare}") == 1
        assert text.count("[RESOLVED] demo: drafter") == 1
        assert "fix: stop jupyter-lab (the dashboard's K), then gpumon restart demo drafter" in text
        assert "flight recording: " in text
        assert "auto-restart succeeded at " in text and "attempted" not in text
    after = {n["notifier"]: n for n in status(cfg)["notifiers"]}
    assert all(n["pending"] == 0 and n["failures"] == 0 for n in after.values())
    assert status(cfg)["open_incidents"] == []


def test_sighup_reloads_notifiers_and_notify_test_sends(rx: Receiver, tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(config(rx))
    watch = Watch(cfg, tmp_path / "watch.log", "--demo-time", "0")
    try:
        watch.wait_log(lambda x: "watching demo" in x.get("message", ""), 30)
        out = tmp_path / "cmd.json"
        extra = f"""
[notify.script]
kind = "command"
command = ["sh", "-c", "cat > {out}"]
"""
        cfg.write_text(config(rx, extra))
        watch.proc.send_signal(signal.SIGHUP)
        watch.wait_log(lambda x: "notifier script added" in x.get("message", ""), 30)
        cfg.write_text("[notify.broken]\nkind = 3\n")
        watch.proc.send_signal(signal.SIGHUP)
        watch.wait_log(lambda x: "reload refused" in x.get("message", ""), 30)
        assert watch.proc.poll() is None  # a bad config keeps the old one running
        assert watch.stop() == 0
    finally:
        if watch.proc.poll() is None:
            watch.proc.kill()
    cfg.write_text(config(rx, extra))
    env = {**os.environ, "TEST_HOOK_SECRET": SECRET}
    for name in ("hook", "script"):
        done = subprocess.run(
            [*GPUMON, "notify", "test", name, "--config", str(cfg)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0 and f"notify test {name}: sent" in done.stdout, done.stderr
    [test_event] = check_webhook(rx.received("/hook")[-1].json())
    assert test_event["event"] == "test"
    assert check_webhook(json.loads(out.read_text()))[0]["event"] == "test"
    # No routing key in the environment: a failure that names the variable, exit 1.
    failed = subprocess.run(
        [*GPUMON, "notify", "test", "pd", "--config", str(cfg)], capture_output=True, text=True
    )
    assert failed.returncode == 1 and "$TEST_PD_KEY" in failed.stderr
