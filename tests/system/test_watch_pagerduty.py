"""Issue 33.6 end to end: ``gpumon watch demo`` pages a PagerDuty stand-in on 127.0.0.1
that follows the Events API v2's documented semantics (tests/support/pagers.py: an
alert's title is its first trigger's summary, later triggers of its ``dedup_key`` only
add log entries). For the demo's OOM the phone shows the OOM's headline, not the memory
warning that opened the incident 2 s before: with the pager's settle window (the
default) as the one alert's title; without it (``settle_s = 0``), as a new alert that
replaced the memory warning's, which is resolved.

The demo's clock is held at scenario time 30 s, before CT 201's jupyter (32 s) and GPU 6's
memory warning, until the watch's exporter says the drafter's step (its log read: every
alert knows the drafter's GPUs), then runs 4x: the warning comes ~2.5 s after the release
and the drafter's OOM 7.5 s after it, live (as in test_watch_delivery)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from gpumon.backends.config.notify import SETTLE_S

from held_demo import HeldDemo, exporter_read_drafter
from notify_schema import check_pagerduty
from pagers import PagerDutyService, PagerDutyStandIn
from prometheus import free_port
from watch_faults import Watch

pytestmark = pytest.mark.system

HEADLINE = (
    "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free; 6.0 GiB held by CT 201 jupyter-lab)"
)
SETTLED, AT_ONCE = "SETTLEDKEY", "ATONCEKEY"  # the routing keys: two PagerDuty services


def config(pd: PagerDutyStandIn) -> str:
    return f"""
[watch]
metrics_port = 0

[notify.oncall]
kind = "pagerduty"
url = "{pd.url("/v2/enqueue")}"
routing_key = "{SETTLED}"
group_s = 1

[notify.oncall_now]
kind = "pagerduty"
url = "{pd.url("/v2/enqueue")}"
routing_key = "{AT_ONCE}"
group_s = 1
settle_s = 0
"""


def drafter(service: PagerDutyService) -> list[str]:
    """The titles of the drafter's alerts on ``service`` that are not resolved."""
    return [t for t in service.showing() if "demo: drafter:" in t]


def test_the_phone_shows_the_ooms_headline_not_the_warning_before_it(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    log = tmp_path / "watch.log"
    with PagerDutyStandIn() as pd:
        cfg.write_text(config(pd))
        held, port = HeldDemo(tmp_path), free_port()
        demo = ("demo", "--demo-time", "30", "--demo-speed", "4", *held.args)
        with Watch(cfg, dict(os.environ), log, *demo, "--metrics-port", str(port)) as watch:
            deadline = time.monotonic() + 60
            while not exporter_read_drafter(port):
                assert watch.proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            held.release()
            deadline = time.monotonic() + 90
            while not all(
                any(HEADLINE in t for t in drafter(pd.service(key))) for key in (SETTLED, AT_ONCE)
            ):
                assert watch.proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (pd.services, log.read_text()[-3000:])
                time.sleep(0.2)
        for r in pd.received():
            check_pagerduty(r.json(), r.json()["routing_key"])
    changes = [
        c for c in map(json.loads, log.read_text().splitlines()) if c.get("job") == "drafter"
    ]
    [key] = {c["key"] for c in changes}
    opened = changes[0]
    cause = next(c for c in changes if c["kind"] == "cuda_oom")
    title = f"[CRITICAL] demo: {HEADLINE}"

    # With the settle window: the OOM's headline is the title of the incident's alert.
    settled = pd.service(SETTLED)
    assert drafter(settled) == [title]
    took = dt.datetime.fromisoformat(cause["time"]) - dt.datetime.fromisoformat(opened["time"])
    if took.total_seconds() < SETTLE_S - 1:  # the OOM came within the window: one page
        assert [a.title for a in settled.alerts if "drafter" in a.title] == [title]
        assert settled.notified == [title]

    # At once: the memory warning paged first (when it opened the incident); the OOM
    # resolved that alert and opened its own under KEY#2, which the phone shows.
    now = pd.service(AT_ONCE)
    assert drafter(now) == [title]
    *before, last = [a for a in now.alerts if "drafter" in a.title]
    assert last.title == title and last.status == "triggered"
    assert all(a.status == "resolved" for a in before)
    if opened["kind"] == "memory":  # else a loaded machine saw both in one round
        assert before[0].title.startswith("[WARNING] demo: drafter: GPU 6 memory")
        assert (before[0].dedup_key, last.dedup_key) == (key, f"{key}#{len(before) + 1}")
    assert not any(c["event"] == "resolve" for c in changes)
