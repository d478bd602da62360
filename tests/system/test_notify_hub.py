"""The hub's delivery against a live receiver: a 429 is retried after its Retry-After, a
storm on one host goes out as one message per window, the rate limit holds messages back
without dropping any, a failing command is retried (and ended when the hub closes), and a
removed notifier's messages stay in the outbox."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpumon.backends.config.notify import NotifierConfig, NotifySettings
from gpumon.backends.model import Health
from gpumon.backends.notify.event import IncidentEvent
from gpumon.backends.notify.hub import NotifyHub
from gpumon.backends.notify.outbox import Outbox

from notify_schema import check_webhook
from receiver import Receiver
from waiting import until

pytestmark = pytest.mark.system


def event(n: int, host: str = "ct200") -> IncidentEvent:
    now = time.time()
    return IncidentEvent("open", f"{host}/gpu{n}/-/xid", host, n, None, "xid", Health.CRITICAL,
                         f"Xid 79 on GPU {n}", None, None, now, now, None)  # fmt: skip


def settings_for(*notifiers: NotifierConfig) -> NotifySettings:
    return NotifySettings(
        notifiers={n.name: n for n in notifiers}, retry_first_s=0.1, retry_max_s=0.5
    )


def hub_for(tmp_path: Path, *notifiers: NotifierConfig) -> NotifyHub:
    return NotifyHub(settings_for(*notifiers), Outbox(tmp_path / "outbox.sqlite3"))


def hook(rx: Receiver, **values: object) -> NotifierConfig:
    return NotifierConfig(name="hook", kind="webhook", url=rx.url("/hook"), **values)  # type: ignore[arg-type]


async def test_a_429_is_retried_after_its_retry_after(tmp_path: Path) -> None:
    with Receiver() as rx:
        rx.answers, rx.retry_after = [429], "0.5"
        hub = hub_for(tmp_path, hook(rx, group_s=0))
        await hub.start()
        t0 = time.time()
        hub.publish([event(1)])
        await until(lambda: len(rx.received()) == 1)
        assert rx.received()[0].at - t0 >= 0.45  # waited as told, not the 0.1 s backoff
        await until(lambda: not hub.outbox.pending("hook"))  # marked once its answer came
        [status] = hub.outbox.status()
        assert status["pending"] == 0 and "HTTP 429" in status["last_error"]
        await hub.close()
        hub.outbox.close()


async def test_a_storm_on_one_host_is_one_message_per_window(tmp_path: Path) -> None:
    with Receiver() as rx:
        hub = hub_for(tmp_path, hook(rx, group_s=1.0))
        await hub.start()
        hub.publish([event(0)])
        await until(lambda: len(rx.received()) == 1)  # the first goes at once
        hub.publish([event(n) for n in range(1, 8)])
        hub.publish([event(0, host="other")])  # another host is not held back
        await until(lambda: len(rx.received()) == 3, timeout=5)
        bodies = [check_webhook(r.json()) for r in rx.received()]
        assert [len(b) for b in bodies] == [1, 1, 7]
        assert bodies[1][0]["host"] == "other"
        assert [e["gpu"] for e in bodies[2]] == list(range(1, 8))
        await hub.close()
        hub.outbox.close()


async def test_the_rate_limit_holds_messages_back_and_drops_none(tmp_path: Path) -> None:
    with Receiver() as rx:
        hub = hub_for(tmp_path, hook(rx, group_s=0, max_per_minute=2))
        await hub.start()
        for n in range(4):  # four hosts: four messages wanted
            hub.publish([event(n, host=f"h{n}")])
        await until(lambda: len(rx.received()) == 2)
        await asyncio.sleep(0.5)
        assert len(rx.received()) == 2 and len(hub.outbox.pending("hook")) == 2
        await hub.close()
        hub.outbox.close()
        # Nothing lost: a new hub (a new gpumon, its own minute) sends the rest, in order.
        hub2 = NotifyHub(hub.settings, Outbox(tmp_path / "outbox.sqlite3"))
        await hub2.start()
        await until(lambda: len(rx.received()) == 4)
        assert [r.json()["events"][0]["host"] for r in rx.received()] == ["h0", "h1", "h2", "h3"]
        await hub2.close()
        hub2.outbox.close()


async def test_a_failing_command_is_retried_until_it_succeeds(tmp_path: Path) -> None:
    flag, out = tmp_path / "ok", tmp_path / "got.json"
    script = tmp_path / "page.py"
    script.write_text(
        "import pathlib, sys\n"
        f"if not pathlib.Path({str(flag)!r}).exists():\n"
        "    sys.exit(1)\n"
        f"pathlib.Path({str(out)!r}).write_bytes(sys.stdin.buffer.read())\n"
    )
    cmd = NotifierConfig(name="cmd", kind="command", command=(sys.executable, str(script)))
    hub = hub_for(tmp_path, cmd)
    await hub.start()
    hub.publish([event(3)])
    await until(lambda: hub.outbox.failures("cmd") >= 2)
    flag.touch()
    await until(lambda: out.exists() and out.stat().st_size > 0)
    [ev] = check_webhook(json.loads(out.read_text()))
    assert ev["gpu"] == 3
    await hub.close()
    hub.outbox.close()


async def test_closing_the_hub_ends_a_command_still_running(tmp_path: Path) -> None:
    """The hub closes while a command notifier runs: the command is killed and reaped
    then, not left running with a transport that outlives the event loop."""
    pid_file = tmp_path / "pid"
    script = tmp_path / "notify.py"
    script.write_text(
        f"import os, pathlib, time\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    cmd = NotifierConfig(name="cmd", kind="command", command=(sys.executable, str(script)))
    hub = hub_for(tmp_path, cmd)
    await hub.start()
    hub.publish([event(3)])
    await until(lambda: pid_file.exists() and pid_file.read_text(), 20, "the command")
    pid = int(pid_file.read_text())
    await hub.close()
    hub.outbox.close()
    with pytest.raises(ProcessLookupError):  # killed and reaped: not even a zombie
        os.kill(pid, 0)


async def test_a_removed_notifier_keeps_its_messages(tmp_path: Path) -> None:
    with Receiver() as rx:
        rx.stop()
        hub = hub_for(tmp_path, hook(rx, group_s=0))
        await hub.start()
        hub.publish([event(1)])
        await until(lambda: hub.outbox.failures("hook") >= 1)
        await hub.reconfigure(NotifySettings())
        assert [r.event.gpu for r in hub.outbox.pending("hook")] == [1]
        rx.start()
        await hub.reconfigure(settings_for(hook(rx, group_s=0)))
        await until(lambda: len(rx.received()) == 1)
        await hub.close()
        hub.outbox.close()


async def test_terminal_notifications_go_to_the_tty_or_the_dashboards_writer(
    tmp_path: Path,
) -> None:
    tty = tmp_path / "tty"
    tty.touch()
    term = NotifierConfig(name="desk", kind="terminal", tty=str(tty), group_s=0, settle_s=0)
    hub = hub_for(tmp_path, term)
    await hub.start()
    hub.publish([event(6)])
    await until(lambda: tty.stat().st_size > 0)
    assert tty.read_bytes().startswith(b"\x1b]9;[CRITICAL] ct200: Xid 79 on GPU 6")
    written: list[bytes] = []
    hub.terminal = written.append  # the dashboard's driver
    hub.publish([event(6, host="gpu2")])
    await until(lambda: bool(written))
    assert b"[CRITICAL] gpu2: Xid 79 on GPU 6" in written[0] and written[0].endswith(b"\a")
    await hub.close()
    hub.outbox.close()


async def test_a_hub_on_standby_queues_and_sends_nothing(tmp_path: Path) -> None:
    with Receiver() as rx:
        hub = hub_for(tmp_path, hook(rx, group_s=0))
        watch_runs = True
        hub.standby = lambda: watch_runs  # the dashboard while a `gpumon watch` runs
        seen: list[IncidentEvent] = []
        hub.changes.add(seen.append)
        await hub.start()
        hub.publish([event(1)])
        assert len(seen) == 1 and hub.outbox.pending() == []  # logged, not queued
        watch_runs = False  # the watch stopped: the dashboard delivers again
        hub.publish([event(2)])
        await until(lambda: len(rx.received()) == 1, timeout=10)
        assert check_webhook(rx.received()[0].json())[0]["gpu"] == 2
        await hub.close()
        hub.outbox.close()


async def test_a_refused_message_is_set_aside_and_the_rest_still_go_out(tmp_path: Path) -> None:
    """A receiver that refuses one message itself (HTTP 422: sending it again cannot help)
    must not block everything behind it: the grouped message is split, the refused event
    is set aside (counted, said in ``notify status``), the others are delivered in order.
    A 401 (a wrong key) is retried instead: every message would fail alike."""
    with Receiver() as rx:
        hub = hub_for(tmp_path, hook(rx, group_s=1.0))
        await hub.start()
        hub.publish([event(0)])
        await until(lambda: len(rx.received()) == 1)
        # the storm's grouped message: refused; then one by one: 1 ok, 2 refused, 3 ok
        rx.answers = [422, 202, 422]
        hub.publish([event(n) for n in (1, 2, 3)])
        await until(lambda: not hub.outbox.pending("hook"), timeout=10)
        gpus = [e["gpu"] for r in rx.received() for e in check_webhook(r.json())]
        assert gpus == [0, 1, 3]
        [status] = hub.outbox.status()
        assert status["rejected"] == 1 and status["failures"] == 0
        assert "refused, set aside" in status["last_error"] and "HTTP 422" in status["last_error"]
        rx.answers = [401]
        hub.publish([event(4)])
        await until(lambda: 4 in [e["gpu"] for r in rx.received() for e in check_webhook(r.json())])
        [status] = hub.outbox.status()
        assert status["rejected"] == 1  # the 401 was retried, not set aside
        await hub.close()
        hub.outbox.close()
