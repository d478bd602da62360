"""Alerts and workloads on the dashboard, driven like a user drives them: the OOM of the
simulated drafter (strip, bell, notifications, jobs pane), the alert history with
acknowledgement, the SGLang pane, GPU owners and what the action keys get as selection."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_rows import click_row
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from gpumon.backends.alerts.store import Alert
from gpumon.backends.config import Config, resolve_host
from gpumon.backends.model import ConnState, Health
from gpumon.backends.monitor import HostMonitor, make_monitor
from gpumon.backends.workloads import JobState
from gpumon.tui.app import GpumonApp
from gpumon.tui.dashboard import ACTIONS
from gpumon.tui.screens import AlertHistoryScreen
from gpumon.tui.screens.alert_detail import AlertDetailScreen
from gpumon.tui.views import Role
from gpumon.tui.views.alert_cells import toast_text_width, wrapped_lines

from held_demo import HeldDemo, drafter_read
from screen_text import screen_lines

Wait = Callable[..., Awaitable[None]]
KeyActions = Callable[[Screen[Any]], set[str]]
FROZEN_NOW = 1795962750.0
FAKE_SMI = Path(__file__).parents[1] / "support" / "fake_smi.py"


def frozen_clock() -> float:
    return FROZEN_NOW


def record_notifications(app: GpumonApp) -> list[tuple[str, str, str]]:
    """(message, title, severity) of every notification from here on."""
    seen: list[tuple[str, str, str]] = []
    original = app.notify

    def notify(message: str, **kwargs: Any) -> None:
        seen.append((message, str(kwargs.get("title", "")), str(kwargs.get("severity", ""))))
        original(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return seen


def fake_smi_app(
    mode: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[HostMonitor, GpumonApp, list[tuple[str, str, str]]]:
    """The dashboard on ``local`` with tests/support/fake_smi.py as nvidia-smi, its fault
    mode read from ``mode``; and the notifications it shows from here on."""
    monkeypatch.setenv("FAKE_SMI_MODE", str(mode))
    host = dataclasses.replace(
        resolve_host(Config(path=None), "local"),
        nvidia_smi=str(FAKE_SMI),
        python=sys.executable,
        interval=0.3,
        kernel_log=False,
    )
    monitor = make_monitor(host)
    app = GpumonApp([monitor], bell=False)
    return monitor, app, record_notifications(app)


async def with_rows(pilot: Pilot[int], wait: Wait, app: GpumonApp) -> None:
    await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
    await pilot.pause()


# CT 201's jupyter-lab holds 6 GiB of GPU 6 from 32 s: the cause, said in the headline
OOM = "drafter: CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free"
HEADLINE = f"{OOM}; 6.0 GiB held by CT 201 jupyter-lab)"
FIXES = "K stop jupyter-lab, r restart drafter"


@pytest.mark.parametrize(
    ("size", "bell"), [((80, 24), True), ((120, 40), False)], ids=["80x24-bell", "120x40-no-bell"]
)
async def test_the_oom_is_one_incident_one_bell_and_its_headline_everywhere(
    demo_monitor: Callable[..., HostMonitor],
    wait: Wait,
    size: tuple[int, int],
    bell: bool,
    tmp_path: Path,
) -> None:
    # Held at 30 s, before the story's first alert (CT 201's jupyter at 32 s, the memory
    # warning near 40 s), until the drafter's log was read and its first rate shown: every
    # alert then knows its job (one incident) and the OOM at 60 s is live (listeners never
    # hear one found in the log's backlog), 15 s after the release at 2x (at 4x GPU 6's
    # last seconds before the OOM, its critical memory, could fall between two samples).
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=30.0, speed=2.0, held=held)
    monitor.recorder.directory = tmp_path
    monitor.recorder.after_s = 1.0  # write the incident a second after the first critical
    app = GpumonApp([monitor], bell=bell)
    announced: list[Alert] = []
    monitor.alerts.add_listener(announced.append)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    seen = record_notifications(app)
    section = app.dashboard.sections[0]
    async with app.run_test(size=size) as pilot:
        await with_rows(pilot, wait, app)
        await wait(
            pilot,
            lambda: "running" in section.jobs.plain and "tok/s" in section.jobs.plain,
            what="the drafter running with a rate",
        )
        held.release()
        await wait(
            pilot,
            lambda: "crashed: OOM on GPU 6" in section.jobs.plain,
            timeout=40,
            what="the drafter's crash in the jobs pane",
        )
        await wait(  # the OOM death of GPU 6 follows within a sample or two
            pilot,
            lambda: any(a.kind == "oom_death" for a in announced),
            what="the OOM death",
        )
        # The fixes' keys and words and the list key stay whole: at 80 columns the job's
        # name goes, then the headline is cut (issue 36; before it, the keys said only their
        # verbs). At 120 the holder's clause begins and is cut after the numbers.
        start = f"{OOM}; " if size[0] > 80 else "CUDA OOM on GPU 6 (tried 2"
        await wait(pilot, lambda: start in app.dashboard.strip.plain, what="the headline")
        critical = [a for a in announced if a.severity is Health.CRITICAL]
        assert len({a.kind for a in critical}) >= 3  # memory, the CUDA OOM, the drop
        assert len(bells) == (1 if bell else 0)  # one incident: one bell
        assert app.dashboard.bells == len(bells)
        strip = app.dashboard.strip.plain
        assert "CUDA out of memory" not in strip and "GPU 1" not in strip  # cause, physical
        assert "r restart" in strip and len(strip) <= size[0]
        assert strip.startswith(" ✖ ") and re.search(r"a: list$", strip)
        if size[0] == 80:  # the keys with their words, the headline cut before them
            assert f"(tried 2… — {FIXES}  a: list" in strip
        else:
            assert f"— {FIXES}  (+" in strip  # "(+4) a: list": K's target takes the room
        cause = "CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB free"
        await wait(
            pilot,
            lambda: any(cause in m for m, _, sev in seen if sev == "error"),
            what="the headline in a toast",
        )
        errors = [m for m, _, sev in seen if sev == "error"]
        width = toast_text_width(size[0])
        assert all(wrapped_lines(m, width) <= 3 for m in errors)  # three lines at most
        assert cause in errors[-1]  # the last toast says the cause, its numbers whole
        if size[0] == 80:  # cut before its fixes, never in them
            assert errors[-1].endswith(f"… — {FIXES}")
        else:  # 56 columns of three lines hold all of it (issue 36: 80 characters did not)
            assert errors[-1] == f"{HEADLINE} — {FIXES}"

        # The header counts the active alerts as of its last redraw, and the story goes on
        # at 2x: an alert raised since is counted at the next (triple run 1 beside a CPU
        # hog: "3 alerts" against the 4 just raised). It must agree once the monitor's own
        # count has held still over a redraw.
        def counted() -> bool:
            return f"{len(monitor.alerts.active())} alert" in section.header.plain

        await wait(
            pilot,
            counted,
            what=lambda: f"{len(monitor.alerts.active())} alerts in {section.header.plain!r}",
        )
        rows = [r.render().plain for r in section.rows]
        assert all("drafter" in rows[i] for i in (5, 6, 7))
        await wait(pilot, lambda: bool(monitor.recorder.written), what="the flight recording")
        path = monitor.recorder.written[0]
        assert path.parent == tmp_path
        assert any(m == f"incident recorded: {path}" for m, _, _ in seen)


async def test_history_lists_alerts_and_acknowledging_an_event_hides_it(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, key_actions: KeyActions
) -> None:
    # 70 s: the CUDA OOM is in the log before gpumon starts; the log ends with it and the
    # drafter is still down: one job_crashed condition in its words (no bell, no toast: it
    # is backlog)
    monitor = demo_monitor(clock=frozen_clock, demo_time=70.0)
    app = GpumonApp([monitor])
    async with app.run_test(size=(100, 24)) as pilot:
        await with_rows(pilot, wait, app)
        await wait(pilot, lambda: app.dashboard.strip.display, what="the strip")
        await wait(
            pilot,
            lambda: any(a.kind == "foreign_process" for a in monitor.alerts.active()),
            what="CT 201's jupyter on GPU 6",
        )
        strip = app.dashboard.strip.plain
        # the job's name is said once, in the fix ("r restart drafter"): at 100 columns
        # the headline gives it up first, keeping the numbers (issue 26.3)
        assert OOM.removeprefix("drafter: ") in strip and "r restart drafter" in strip, strip
        await pilot.press("a")
        screen = app.screen
        assert isinstance(screen, AlertHistoryScreen)
        keys = key_actions(screen)
        assert not keys & {a.name for a in ACTIONS if not a.app}  # the dashboard's are gone
        assert {"acknowledge", "acknowledge_all", "quit", "help", "cycle_theme"} <= keys
        table = screen.table
        assert table.row_count == len(monitor.alerts.history()) >= 1
        first = [str(c) for c in table.get_row_at(0)]
        assert first[0].endswith("critical") and first[2] == "demo" and first[3] == "6"
        assert first[4] == "drafter" and first[5] == "active"
        # the strip's words, the headline cut before the fixes on the row's two lines of
        # the width the other columns and "now" leave at 100 columns (issue 36): its
        # numbers, then "K stop jupyter-lab" (point 3) takes the room of the last word
        assert first[6].startswith("CUDA OOM on GPU 6 (tried 2.00 GiB, 90 MiB"), first[6]
        assert first[6].endswith(f"… — {FIXES}") and "now" in screen.table.columns
        assert "before gpumon started" not in first[6]
        # Enter: the incident in full (issue 26.3); Esc back to the history, unchanged
        await pilot.press("enter")
        detail = app.screen
        assert isinstance(detail, AlertDetailScreen)
        assert detail.plain.splitlines()[0].strip() == HEADLINE
        assert "Tried to allocate 2.00 GiB" in detail.plain  # the whole log line
        assert "torch.OutOfMemoryError" in detail.plain.split("lines", 1)[1]  # what raised it
        assert "gpumon restart demo drafter" in detail.plain
        await pilot.press("escape")
        assert app.screen is screen and monitor.alerts.active()
        footer = {k.key_display for k in screen.query(FooterKey)}
        assert {"⏎", "Space"} <= footer
        await pilot.press("space")  # Space acknowledges
        first = [str(c) for c in table.get_row_at(0)]
        # the drafter down and the jupyter holding GPU 6 are conditions: the incident
        # stays active, seen
        assert first[5] == "active ✓ack"
        kinds = sorted(a.kind for a in monitor.alerts.active())
        assert kinds == ["foreign_process", "job_crashed"]
        assert all(a.acknowledged for a in monitor.alerts.active())
        await pilot.press("escape")
        assert not isinstance(app.screen, AlertHistoryScreen)
        await pilot.pause()
        assert not app.dashboard.strip.display  # hidden, not an empty line
        assert "2 alerts (seen)" in app.dashboard.sections[0].header.plain


async def test_the_incidents_detail_follows_it_while_open(
    demo_monitor: Callable[..., HostMonitor], wait: Wait, tmp_path: Path
) -> None:
    """Opened on GPU 6's memory warning, the detail becomes the OOM's when the drafter
    dies: the same incident, its cause now the OOM (it was a snapshot before)."""
    # Held at 50 s (GPU 6 full enough for its warning) until the detail is open on the
    # warning and the drafter's log was read; at twice the speed the drafter dies 5 s later.
    held = HeldDemo(tmp_path)
    monitor = demo_monitor(demo_time=50.0, speed=2.0, held=held)
    app = GpumonApp([monitor])
    async with app.run_test(size=(100, 30)) as pilot:
        await with_rows(pilot, wait, app)
        await wait(
            pilot,
            lambda: any(a.kind == "memory" for a in monitor.alerts.active()),
            what="GPU 6's memory warning",
        )
        await wait(pilot, lambda: drafter_read(monitor), what="the drafter's log read")
        assert not any(a.kind == "cuda_oom" for a in monitor.alerts.history())
        await pilot.press("a")
        await pilot.press("enter")
        opened = app.screen
        assert isinstance(opened, AlertDetailScreen)
        detail: AlertDetailScreen = opened  # for the lambda below
        assert "CUDA OOM" not in detail.plain and "memory" in detail.plain
        held.release()
        await wait(
            pilot,
            lambda: detail.plain.splitlines()[0].strip() == HEADLINE,
            timeout=30,
            what=f"the OOM heading the open detail: {detail.plain[:200]!r}",
        )
        assert app.screen is detail  # still open, the same screen
        assert "torch.OutOfMemoryError" in detail.plain


async def test_acknowledged_conditions_stay_counted_as_seen(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    # 59 s: GPU 6 is 98.6 % full, a critical memory condition (it lasts while it holds)
    monitor = demo_monitor(clock=frozen_clock, demo_time=59.0)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_rows(pilot, wait, app)
        # 80 columns: the severity shows as its glyph, the word gives way to the headline
        await wait(pilot, lambda: "✖" in app.dashboard.strip.plain, what="memory alert")
        strip = app.dashboard.strip.plain
        # a full GPU is no crash: a restart does not fix it (RESTART_FIXES), it is not offered
        assert "GPU 6 mem" in strip and "r restart" not in strip, strip
        # the demo's jupyter in CT 201 holds 6 GiB of GPU 6 by now: a second condition,
        # and the fix the strip offers for the full GPU is to stop it
        await wait(
            pilot,
            lambda: any(a.kind == "foreign_process" for a in monitor.alerts.active()),
            what="the foreign process",
        )
        await wait(pilot, lambda: "K stop" in app.dashboard.strip.plain, what="K stop jupyter-lab")
        assert "GPU 6 mem" in app.dashboard.strip.plain
        await pilot.press("a", "A")
        await pilot.press("escape")
        await pilot.pause()
        active = monitor.alerts.active()
        assert sorted(a.kind for a in active) == ["foreign_process", "memory"]
        assert all(a.acknowledged for a in active)  # conditions: still active, seen
        assert not app.dashboard.strip.display
        assert "2 alerts (seen)" in app.dashboard.sections[0].header.plain


async def test_sglang_pane_lists_every_server_with_the_aggregate_and_owners(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, scenario="sglang")
    app = GpumonApp([monitor])
    section = app.dashboard.sections[0]
    async with app.run_test(size=(80, 24)) as pilot:
        await with_rows(pilot, wait, app)
        ports = sorted(monitor.workloads.sglang)
        assert len(ports) == 8
        await wait(
            pilot,
            lambda: all(s.gen_tokens_per_s is not None for s in monitor.workloads.sglang.values()),
            timeout=20,
            what="throughput of every server",
        )
        await wait(
            pilot,
            lambda: _aggregate_line_complete(section.sglang.plain),
            what="the pane showing every server's numbers",
        )
        lines = section.sglang.plain.splitlines()
        assert lines[0].startswith("SGLang") and "tok/s" in lines[0] and "KV" in lines[0]
        assert lines[1].startswith("all") and "8/8" in lines[1]
        assert "n/a" not in lines[1]
        servers = lines[2:]
        assert [line.split()[0] for line in servers] == [f":{p}" for p in ports]
        assert all(" up " in line and "%" in line for line in servers)
        total = sum(s.gen_tokens_per_s or 0 for s in monitor.workloads.sglang.values())
        assert total > 1000  # the aggregate line sums what the servers report
        rows = [r.render().plain for r in section.rows]
        assert [f"sglang:{p}" in row for p, row in zip(ports, rows, strict=True)] == [True] * 8
        assert not section.jobs.display  # no jobs: no empty pane
        assert section.sglang.region.bottom <= 23  # above the footer at 80x24


async def test_selection_for_the_action_keys_follows_the_cursor(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(clock=frozen_clock)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_rows(pilot, wait, app)
        await wait(pilot, lambda: monitor.status.state == ConnState.CONNECTED)

        def disabled() -> dict[str, bool]:
            return {k.key: k.has_class("-disabled") for k in app.screen.query(FooterKey)}

        # the footer catches up with the first cursor: Detail works, Restart stays
        # available without a job (pressed, it says why it has nothing to restart)
        await wait(
            pilot,
            lambda: disabled().get("enter") is False and disabled().get("r") is False,
            what="the footer",
        )
        assert app.dashboard.selected_monitor() is monitor
        assert app.dashboard.selected_job() is None  # GPU 0: the target side, not a job
        await pilot.press(*["down"] * 6)
        picked = app.dashboard.selected_job()
        assert picked is not None and picked[0] is monitor and picked[1].name == "drafter"
        assert picked[1] is monitor.host.job("drafter")
        await pilot.press("down", "down")  # past GPU 7: the jobs pane's drafter row
        assert app.dashboard.cursor == (0, 8)
        picked = app.dashboard.selected_job()
        assert picked is not None and picked[1].name == "drafter"
        jobs = app.dashboard.sections[0].jobs
        assert jobs.view is not None and jobs.view.cursor == 0
        await click_row(pilot, app, 2)
        assert app.dashboard.selected_job() is None
        await pilot.click("#jobs-0", offset=(2, 1))  # a click on the drafter's line
        assert app.dashboard.cursor == (0, 8)


async def test_full_in_shows_on_the_filling_gpu(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    # The trend needs two 10 s windows of samples (20 s from the start at 20 s); the OOM
    # comes at 60 s, 40 s after it.
    monitor = demo_monitor(frozen=False, demo_time=20.0)
    app = GpumonApp([monitor])
    async with app.run_test(size=(80, 24)) as pilot:
        await with_rows(pilot, wait, app)
        row = app.dashboard.sections[0].rows[6]
        await wait(
            pilot,
            lambda: "full" in row.render().plain,
            timeout=35,
            what="time to full on GPU 6",
        )
        text = row.render().plain
        assert all(len(line) <= 80 for line in text.splitlines())
        assert "~" in text and "s" in text.split("full", 1)[1]
        assert monitor.alerts.time_to_full(6) is not None
        assert all("full" not in r.render().plain for r in app.dashboard.sections[0].rows[:5])
        assert monitor.workloads.jobs["drafter"].state is JobState.RUNNING


def _aggregate_line_complete(pane: str) -> bool:
    """The SGLang pane's "all" line counts every server and has all its numbers."""
    lines = pane.splitlines()
    return len(lines) > 1 and "8/8" in lines[1] and "n/a" not in lines[1]


def _alerts_in_toast(title: str) -> int:
    """How many alerts one toast stands for: 1, plus N for "(+N more: a)"."""
    more = re.search(r"\(\+(\d+) more", title)
    return 1 + (int(more[1]) if more else 0)


async def test_stale_data_is_a_toast_and_colours_the_header(
    wait: Wait, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's nvidia-smi loop stops printing (alive, the link up): a warning toast
    "No data" and the header's state in the warning colour, not a green "● connected"."""
    mode = tmp_path / "mode"
    monitor, app, seen = fake_smi_app(mode, monkeypatch)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(80, 24)) as pilot:
        await wait(pilot, lambda: monitor.latest is not None, timeout=30, what="data")
        # fresh data says "● connected"; on a loaded machine (triple run 1, beside a CPU
        # hog) the first round can already be 2 s old when the header is drawn, and the
        # header then rightly says "◌ no data": wait for a fresh one
        await wait(
            pilot,
            lambda: "● connected" in section.header.plain,
            timeout=30,
            what=lambda: f"fresh data: the header says {section.header.plain!r}",
        )
        # On a loaded machine the first round can come more than 3 s after the connection
        # (a "No data" toast, ended by that round): the stall's toast is a later one.
        before = len(seen)
        mode.write_text("stall", encoding="utf-8")
        await wait(
            pilot,
            lambda: any(t == "WARNING: No data" for _, t, _ in seen[before:]),
            timeout=15,
            what="the stale-data toast",
        )
        message = next(m for m, t, _ in seen[before:] if t == "WARNING: No data")
        assert message.startswith("no GPU data for ")
        assert wrapped_lines(message, toast_text_width(80)) <= 3  # the toast's three lines
        await wait(pilot, lambda: "◌ no data" in section.header.plain, what="the header")
        view = section.header.view
        assert view is not None
        state = next(p for p in view.parts if p.text == "◌ no data")
        assert state.role == Role.WARNING
        await wait(  # the strip is drawn on the refresh after the toast
            pilot,
            lambda: "WARNING" in app.dashboard.strip.plain or "▲" in app.dashboard.strip.plain,
            what="the strip",
        )
        mode.write_text("", encoding="utf-8")
        await wait(pilot, lambda: not monitor.alerts.active(), timeout=15, what="fresh data")


async def test_a_lost_gpu_is_a_critical_driver_error_on_the_screen(
    wait: Wait, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvidia-smi says "GPU is lost" from the start: a critical toast "Driver error" in the
    driver's words, the strip leads with them and the header says "no data" critical."""
    mode = tmp_path / "mode"
    mode.write_text("lost", encoding="utf-8")
    _, app, seen = fake_smi_app(mode, monkeypatch)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(100, 24)) as pilot:
        await wait(
            pilot,
            lambda: any(t == "CRITICAL: Driver error" for _, t, _ in seen),
            timeout=20,
            what="the driver-error toast",
        )
        message = next(m for m, t, _ in seen if t == "CRITICAL: Driver error")
        assert message.startswith('nvidia-smi: "Unable to determine the device handle')
        await wait(pilot, lambda: "GPU is lost" in app.dashboard.strip.plain, what="the strip")
        await wait(pilot, lambda: "◌ no data" in section.header.plain, what="the header")
        view = section.header.view
        assert view is not None
        assert next(p for p in view.parts if p.text == "◌ no data").role == Role.CRITICAL


async def test_a_host_that_cannot_be_reached_is_an_alert_on_the_screen(wait: Wait) -> None:
    """Nothing listens on the host's SSH port: after three refused tries a warning toast
    "Host unreachable" with the reason, the strip says it, the header counts it."""
    from prometheus import free_port

    host = resolve_host(Config(path=None), f"nobody@127.0.0.1:{free_port()}")
    monitor = make_monitor(host)
    app = GpumonApp([monitor], bell=False)
    seen = record_notifications(app)
    section = app.dashboard.sections[0]
    async with app.run_test(size=(100, 24)) as pilot:
        await wait(
            pilot,
            lambda: any(t == "WARNING: Host unreachable" for _, t, _ in seen),
            timeout=30,
            what="the unreachable toast",
        )
        message = next(m for m, t, _ in seen if t == "WARNING: Host unreachable")
        assert "connection refused" in message
        await wait(pilot, lambda: "connection refused" in app.dashboard.strip.plain, what="strip")
        await wait(pilot, lambda: "1 alert" in section.header.plain, what="the header's count")
        assert monitor.status.state is ConnState.RECONNECTING


async def test_the_idle_drafter_is_one_incident_on_the_screen(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """The demo's idle scenario at 150 s: the drafter's GPUs held and idle are one
    warning incident, its headline in the strip and a "GPU held and idle" toast; the
    alert names the holder from the Proxmox host's list once it comes."""
    monitor = demo_monitor(frozen=False, demo_time=150.0, scenario="idle")
    app = GpumonApp([monitor], bell=False)
    seen = record_notifications(app)
    async with app.run_test(size=(120, 40)) as pilot:
        strip = app.dashboard.strip
        await wait(pilot, lambda: "drafter's GPUs 5-7 idle" in strip.plain, what="the strip")
        assert "while holding 84-86 GiB each" in strip.plain
        await wait(pilot, lambda: any(t == "WARNING: GPU held and idle" for _, t, _ in seen))
        message = next(m for m, t, _ in seen if t == "WARNING: GPU held and idle")
        assert message.startswith("drafter's GPUs 5-7 idle (")  # the toast cuts the holder
        host_side = "held by PID 874 train.drafter in CT200 (+2 more)"  # the Proxmox host's list

        def said() -> list[str]:
            return [a.message for a in monitor.alerts.active() if a.kind == "gpu_idle_held"]

        # then what the idle time drew so far (the demo's GPUs report their power)
        await wait(pilot, lambda: f"; {host_side}; " in said()[0], what="the host-side holder")


async def test_held_and_idle_not_before_the_window(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    monitor = demo_monitor(frozen=False, demo_time=40.0, scenario="idle")
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait(pilot, lambda: len(app.dashboard.sections[0].rows) == 8, what="GPU rows")
        await pilot.pause(0.5)
        assert "idle" not in app.dashboard.strip.plain
        assert not [a for a in monitor.alerts.history() if a.kind == "gpu_idle_held"]


async def test_the_history_lists_the_notes_gpumon_was_given(
    demo_monitor: Callable[..., HostMonitor], wait: Wait
) -> None:
    """The agent's notes (what gpumon cannot see here) were shown nowhere: the history
    says the newest under its table, one line each, escaped, and the count of older ones."""
    monitor = demo_monitor(demo_time=20.0)
    app = GpumonApp([monitor], bell=False)
    async with app.run_test(size=(100, 24)) as pilot:
        await with_rows(pilot, wait, app)
        await pilot.press("a")
        await wait(pilot, lambda: isinstance(app.screen, AlertHistoryScreen), what="history")
        screen = app.screen
        assert isinstance(screen, AlertHistoryScreen)
        assert not screen.notes_line.display  # none yet: no empty line for them
        said = (
            "kernel log not readable here (Operation not permitted): Xid and host "
            "OOM-killer lines need gpumon on the Proxmox host itself"
        )
        for k in range(4):
            monitor.ingest_note(f"note {k}: \x1b[2J" if k < 3 else said)
        await wait(pilot, lambda: screen.notes_line.display, what="the notes")
        await pilot.pause()
        lines = screen_lines(app)
        older = next(i for i, line in enumerate(lines) if "+1 older notes" in line)
        shown = lines[older + 1 : older + 4]
        assert "note 1: \\x1b[2J" in shown[0] and "note 2:" in shown[1], shown
        assert "kernel log not readable here" in shown[2] and shown[2].rstrip().endswith("…")
